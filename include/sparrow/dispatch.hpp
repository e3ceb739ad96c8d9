// How sparrow chooses: which kernel `matmul` runs for a weight (per format and N), and which
// format a layer should be stored in. Both come from a shipped rule table of measurements
// (src/dispatch/rule_table_data.inc, generated from `sparrow bench` CSV by
// scripts/make_rule_table.py; scripts/rule-table.sh lists the runs and the engine-measured
// exceptions), and every choice carries the reason it was made.
#pragma once

#include <string>

#include "sparrow/weight.hpp"

namespace sparrow {

// Fraction of stored non-zeros: nnz / (M * K). 1 for dense, N/M for nm.
double density_of(const Weight& w);

struct KernelPick {
  std::string kernel;             // registry name, e.g. "macko.warp_row"
  double measured_speedup = 0.0;  // vs cuBLAS in the table's cell; 0 when not measured
  std::string reason;
};

// The kernel matmul runs for a weight of format `f`, this density and shape (rows x cols; 0 x 0:
// unknown, the medians over the benchmarked shapes) at N tokens, given a workspace large enough
// for every kernel (matmul skips kernels whose workspace it was not given), for a call with
// MatmulOptions::input_rms (`input_rms`: the fastest kernel that can take it unless another
// measured more than 1.1x faster, since it would bring a norm kernel back) or without, launched
// plainly or as a dependent launch (MatmulOptions::dependent_launch: a dense weight takes the
// registry's kernel for N, and kernels the engine measured slower than the table's plain runs
// predicted are left out). Fails with unsupported when the build has no GPU kernel for the format.
Result<KernelPick> pick_kernel(Format f, double density, int64_t n, int64_t rows = 0,
                               int64_t cols = 0, bool input_rms = false,
                               bool dependent_launch = false);

struct FormatPick {
  Format format = Format::dense;
  std::string kernel;
  double measured_speedup = 1.0;
  std::string reason;
};

// Plan time: the format whose measured kernel is fastest for a layer of this density and shape
// (rows x cols, as pick_kernel) at N tokens; dense (cuBLAS) whenever no sparse format was measured
// faster. `allow_nm` when the layer is N:M. `input_rms` and `dependent_launch` describe the calls
// the layer will get, as pick_kernel's do: each format is judged by the kernel matmul will run
// for such a call (the engine: dependent launches, the norm folded into q/k/v and gate/up), not
// by one it leaves out there.
FormatPick pick_format(double density, int64_t n, bool allow_nm = false, int64_t rows = 0,
                       int64_t cols = 0, bool input_rms = false, bool dependent_launch = false);

// The GPU and date the shipped table was measured on.
const char* rule_table_gpu();
const char* rule_table_date();

}  // namespace sparrow
