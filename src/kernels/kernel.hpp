// What every GPU kernel of sparrow looks like from the outside: it takes one Problem (raw device
// pointers and sizes in views) and a stream, launches asynchronously, and returns a Status.
// registry.cpp lists every kernel; the dispatcher and `sparrow bench` choose among them.
#pragma once

#include <cstdint>
#include <vector>

#include "sparrow/matmul.hpp"

namespace sparrow::kernels {

struct Problem {
  const Weight& w;     // on the device
  ConstMatrixView x;   // N x K, device
  MatrixView y;        // N x M, device
  MatmulOptions opt;
  int64_t n() const { return x.rows; }
};

using RunFn = Status (*)(const Problem&, Stream);

// Device scratch a kernel needs, in bytes (MatmulOptions::workspace): `full` for one pass over W,
// `min` the least it runs with (then in row chunks, more slowly).
struct WorkspaceNeed {
  size_t full = 0, min = 0;
};
using WorkspaceFn = WorkspaceNeed (*)(const Weight&);
// Whether the kernel honours MatmulOptions::input_rms for this weight at N tokens.
using InputRmsFn = bool (*)(const Weight&, int64_t n);
// Whether the kernel honours MatmulOptions::output_swiglu for this weight at N tokens.
using OutputSwigluFn = bool (*)(const Weight&, int64_t n);
// Whether the kernel runs on the current device (architecture-specific code such as sm_90a).
using AvailableFn = bool (*)();

struct KernelInfo {
  const char* name;  // unique, "<format>.<kernel>": "dense.gemv", "dense.cublas", "macko.warp_row"
  Format format;     // the weight format it reads
  int64_t best_min_n, best_max_n;  // the N range it is built for (it is correct for any N >= 1)
  RunFn run;
  WorkspaceFn workspace = nullptr;  // null: needs none
  InputRmsFn input_rms = nullptr;   // null: never takes MatmulOptions::input_rms
  AvailableFn available = nullptr;  // null: runs on every GPU the build targets
  OutputSwigluFn output_swiglu = nullptr;  // null: never takes MatmulOptions::output_swiglu
};

// Whether kernel k runs on the current device (its `available`, else true).
inline bool available_here(const KernelInfo& k) { return k.available == nullptr || k.available(); }

// Whether kernel k takes MatmulOptions::input_rms for w at N = n.
bool takes_input_rms(const KernelInfo& k, const Weight& w, int64_t n);
// Whether kernel k takes MatmulOptions::output_swiglu for w at N = n (never for an odd row count).
bool takes_output_swiglu(const KernelInfo& k, const Weight& w, int64_t n);

// What the kernel needs for this weight ({0, 0} for kernels without a workspace).
WorkspaceNeed workspace_need(const KernelInfo& k, const Weight& w);

// Every kernel in this build.
const std::vector<KernelInfo>& all_kernels();
const KernelInfo* find_kernel(const char* name);

// The argument checks every kernel runs first (see matmul.hpp for the rules). A kernel passes
// `takes_input_rms` true when it honours MatmulOptions::input_rms for this problem, and
// `takes_output_swiglu` for MatmulOptions::output_swiglu; the others refuse them here instead of
// silently computing the matmul without the norm or the SwiGLU.
Status check_problem(const Problem& p, Format expected, bool takes_input_rms = false,
                     bool takes_output_swiglu = false);

}  // namespace sparrow::kernels
