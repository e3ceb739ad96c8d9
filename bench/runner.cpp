#include "bench/runner.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "bench/cusparse_baseline.hpp"
#include "bench/device_info.hpp"
#include "bench/report.hpp"
#include "bench/timing.hpp"
#include "core/cuda_check.hpp"
#include "kernels/dense/cublas.hpp"
#include "kernels/kernel.hpp"
#include "sparrow/dispatch.hpp"
#include "sparrow/patterns.hpp"
#include "sparrow/reference.hpp"
#include "sparrow/version.hpp"

namespace sparrow::bench {

namespace {

constexpr int kExitFail = 1, kExitBadArgs = 2, kExitNoGpu = 3;
// Above this many weight elements the error is checked on an evenly spaced subset of rows of
// about this many elements, which keeps the double reference to seconds for 70B-sized layers.
constexpr int64_t kFullReferenceElements = int64_t(16) << 20;
constexpr int kMaxCopies = 256;

double tolerance(DType t) { return t == DType::bf16 ? 8e-3 : 1e-3; }


// What is timed for one row.
struct Candidate {
  enum class Kind { kernel, matmul, cusparse } kind = Kind::kernel;
  std::string format, kernel;
  Format weight_format = Format::dense;
  const kernels::KernelInfo* info = nullptr;
};

// One encoded weight in a format with its device copies (for L2 rotation).
struct WeightSet {
  Status status;  // encode/upload failure: the rows that need it are skipped or failed
  size_t bytes = 0;
  std::vector<Weight> copies;
};

// The error reference for one (W, X): a subset of rows (or all) of Y in double.
struct Reference {
  std::vector<int64_t> rows;
  std::vector<double> y;  // N x rows.size()
  std::string scope;
};

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

int copies_for(size_t bytes, int64_t l2_bytes) {
  const double need = 3.0 * double(l2_bytes) / double(std::max<size_t>(bytes, 1));
  return std::clamp(int(std::ceil(need)), 2, kMaxCopies);
}

// Device copies of an encoded host weight, enough of them to exceed 3x the L2 together.
WeightSet upload_copies(const Weight& host, int64_t l2_bytes) {
  WeightSet s;
  s.bytes = storage_bytes(host);
  const int copies = copies_for(s.bytes, l2_bytes);
  for (int i = 0; i < copies; ++i) {
    auto d = to_device(host);
    if (!d.ok()) {
      s.status = d.status();
      s.copies.clear();
      return s;
    }
    s.copies.push_back(std::move(d).value());
  }
  return s;
}

Result<std::vector<Candidate>> select_candidates(const std::string& spec, bool& best_mode) {
  std::vector<Candidate> out;
  auto add_kernel = [&out](const kernels::KernelInfo& k) {
    if (std::string(k.name) == "dense.cublas") return;  // always first, as the baseline
    for (const auto& c : out) {
      if (c.kernel == k.name) return;
    }
    out.push_back({Candidate::Kind::kernel, format_name(k.format), k.name, k.format, &k});
  };
  bool with_cusparse = false;
  best_mode = spec == "best";
  if (spec == "all" || spec == "best") {
    for (const auto& k : kernels::all_kernels()) add_kernel(k);
    with_cusparse = true;
  } else {
    size_t start = 0;
    while (start <= spec.size()) {
      const size_t comma = spec.find(',', start);
      const std::string item =
          spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      start = comma == std::string::npos ? spec.size() + 1 : comma + 1;
      if (item.empty()) continue;
      if (item == "cusparse" || item.rfind("cusparse.", 0) == 0) {
        with_cusparse = true;
      } else if (item.find('.') != std::string::npos) {
        const kernels::KernelInfo* k = kernels::find_kernel(item.c_str());
        if (!k) return invalid_argument("no kernel named '" + item + "' in this build");
        add_kernel(*k);
      } else if (auto f = parse_format(item)) {
        bool any = false;
        for (const auto& k : kernels::all_kernels()) {
          if (k.format == *f) {
            add_kernel(k);
            any = true;
          }
        }
        if (!any) {
          std::printf("# note: no GPU kernel for the %s format in this build yet\n", item.c_str());
        }
      } else {
        return invalid_argument("--formats: '" + item +
                                "' is neither all, best, a format (dense, csr, macko, tca_bme, "
                                "tiled_csl, nm), a kernel name (e.g. macko.warp_row) nor cusparse");
      }
    }
  }
  const kernels::KernelInfo* cublas = kernels::find_kernel("dense.cublas");
  if (!cublas) return invalid_argument("dense.cublas is not registered (it is the baseline)");
  out.insert(out.begin(), {Candidate::Kind::kernel, "dense", "dense.cublas", Format::dense, cublas});
  if (best_mode) {
    std::set<Format> formats;
    for (const auto& c : out) formats.insert(c.weight_format);
    for (Format f : formats) {
      out.push_back({Candidate::Kind::matmul, format_name(f), "matmul(" + std::string(format_name(f)) + ")",
                     f, nullptr});
    }
  }
  if (with_cusparse) out.push_back({Candidate::Kind::cusparse, "csr", "cusparse", Format::csr, nullptr});
  return out;
}

// Reference rows: all of them, or an evenly spaced subset for big layers.
Reference make_reference_rows(int64_t m, int64_t k) {
  Reference r;
  if (m * k <= kFullReferenceElements) {
    for (int64_t i = 0; i < m; ++i) r.rows.push_back(i);
    r.scope = "all rows";
    return r;
  }
  const int64_t want = std::max<int64_t>(1, kFullReferenceElements / k);
  const int64_t stride = (m + want - 1) / want;
  for (int64_t i = 0; i < m; i += stride) r.rows.push_back(i);
  r.scope = std::to_string(r.rows.size()) + " of " + std::to_string(m) + " rows";
  return r;
}

// The reference walks a csr encoding of the chosen rows (non-zeros only: cheaper than dense).
Result<Weight> reference_weight(const HostMatrix& w, const std::vector<int64_t>& rows) {
  HostMatrix sub(w.dtype(), int64_t(rows.size()), w.cols());
  const size_t row_bytes = size_t(w.cols()) * dtype_size(w.dtype());
  for (size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(static_cast<uint8_t*>(sub.data()) + i * row_bytes,
                static_cast<const uint8_t*>(w.data()) + size_t(rows[i]) * row_bytes, row_bytes);
  }
  return encode(Format::csr, sub.view());
}

double check_error(const MatrixView& dy, const Reference& ref, std::string& failure) {
  HostMatrix y(dy.dtype, dy.rows, dy.cols);
  const size_t es = dtype_size(dy.dtype);
  const cudaError_t e = cudaMemcpy2D(y.data(), size_t(dy.cols) * es, dy.data, size_t(dy.ld) * es,
                                     size_t(dy.cols) * es, size_t(dy.rows), cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) {
    failure = std::string("copying Y back: ") + cudaGetErrorString(e);
    return INFINITY;
  }
  HostMatrix sub(dy.dtype, dy.rows, int64_t(ref.rows.size()));
  for (int64_t n = 0; n < dy.rows; ++n) {
    for (size_t i = 0; i < ref.rows.size(); ++i) {
      std::memcpy(static_cast<uint8_t*>(sub.data()) + (size_t(n) * ref.rows.size() + i) * es,
                  static_cast<const uint8_t*>(y.data()) + (size_t(n * dy.cols + ref.rows[i])) * es,
                  es);
    }
  }
  return reference::normalized_error(sub.view(), ref.y);
}

}  // namespace

int run_bench(const BenchOptions& opt) {
  const auto t_start = std::chrono::steady_clock::now();
  bool best_mode = false;
  auto cands = select_candidates(opt.formats, best_mode);
  if (!cands.ok()) {
    std::fprintf(stderr, "sparrow bench: %s\n", cands.status().message().c_str());
    return kExitBadArgs;
  }
  std::vector<patterns::Spec> specs;
  for (const auto& p : opt.patterns) {
    auto s = patterns::parse(p);
    if (!s.ok()) {
      std::fprintf(stderr, "sparrow bench: --pattern: %s\n", s.status().message().c_str());
      return kExitBadArgs;
    }
    specs.push_back(s.value());
  }

  // Arguments first (exit 2 on any machine), then the GPU (exit 3 without one).
  auto dev = query_device();
  if (!dev.ok()) {
    std::fprintf(stderr, "sparrow bench: %s: nothing to benchmark on this machine\n",
                 dev.status().message().c_str());
    return kExitNoGpu;
  }
  DeviceInfo info = dev.value();
  cudaStream_t stream = nullptr;
  auto fatal = [](const Status& s) {
    std::fprintf(stderr, "sparrow bench: %s\n", s.to_string().c_str());
    return kExitFail;
  };
  if (auto s = cuda_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
      !s.ok()) {
    return fatal(s);
  }
  if (auto s = kernels::dense_cublas_prepare(); !s.ok()) return fatal(s);

  // The ceiling: a streaming read of 1 GiB (20x the H100's L2), median of 20.
  auto bw = measure_read_ceiling(info.sm_count, stream);
  if (!bw.ok()) return fatal(bw.status());
  const double read_gbps = bw.value();
  refresh_clocks(info);

  std::vector<std::string> header = header_lines(info);
  header.push_back("read bandwidth (ceiling): " + std::to_string(int(std::lround(read_gbps))) +
                   " GB/s (streaming read of 1 GiB, median of 20)");
  header.push_back(std::string("sparrow ") + kVersion + ", git " + git_revision());
  // Whose measurements matmul's picks (the matmul(FORMAT) rows) come from on this GPU.
  header.push_back(std::string("rule table: measured on ") + rule_table_gpu() + " (" +
                   rule_table_date() + ")");
  header.push_back("command: " + opt.command_line);
  header.push_back("date: " + utc_now());
  header.push_back(std::string("dtype: ") + dtype_name(opt.dtype) + ", reps " +
                   std::to_string(opt.reps) +
                   " (median of replays; one replay = a CUDA graph of calls rotating over weight "
                   "copies > 3x L2; us is per call)");
  if (opt.dependent_launch) {
    header.push_back("dependent launch: on (sparrow's kernels only; cuBLAS, cuSPARSE and "
                     "stream_read launch as usual)");
  }
  for (const auto& h : header) std::printf("# %s\n", h.c_str());
  std::printf("# columns: us = median per call; GB/s = (weight + X + Y bytes) / us; %%floor = "
              "(bytes / read bandwidth) / us; xcuBLAS = cuBLAS us / us; error = |y-ref|/|ref|; "
              "* = fastest in the problem\n");
  print_table_header();
  std::ofstream csv;
  if (!opt.csv_path.empty()) {
    csv.open(opt.csv_path);
    if (!csv) {
      std::fprintf(stderr, "sparrow bench: cannot write %s\n", opt.csv_path.c_str());
      return kExitBadArgs;
    }
    write_csv_header(csv, header);
  }

  const double tol = tolerance(opt.dtype);
  const size_t es = dtype_size(opt.dtype);
  std::vector<Row> rows;
  bool failed = false;

  for (const auto& shape : opt.shapes) {
    // The streaming-read kernel over exactly the dense weight's bytes, under the same protocol:
    // what a pure read of this many bytes reaches, with this launch shape and rotation.
    {
      Row r;
      r.shape = shape.name;
      r.m = shape.m;
      r.k = shape.k;
      r.format = "-";
      r.kernel = "stream_read";
      r.pattern = "-";
      r.dtype = dtype_name(opt.dtype);
      const size_t bytes = size_t(shape.m) * size_t((shape.k + 7) / 8 * 8) * es;
      r.weight_bytes = r.bytes = bytes;
      const int copies = copies_for(bytes, info.l2_bytes);
      std::vector<std::shared_ptr<void>> bufs;
      Status st;
      for (int i = 0; i < copies && st.ok(); ++i) {
        auto mem = detail::device_alloc(bytes);
        if (!mem.ok()) {
          st = mem.status();
          break;
        }
        bufs.push_back(mem.value());
        st = fill_pattern(bufs.back().get(), bytes, stream);
      }
      Result<Timing> t = st;
      if (st.ok()) {
        auto rc = RotatedCalls::prepare(
            [&](int i, cudaStream_t s) {
              return enqueue_stream_read(bufs[size_t(i)].get(), bytes, info.sm_count, s);
            },
            copies, stream);
        t = rc.ok() ? rc.value()->time(opt.reps, info.sm_clock_peak_mhz, opt.row_budget_s) : Result<Timing>(rc.status());
      }
      if (t.ok()) {
        r.us = t->median_us;
        r.p10_us = t->p10_us;
        r.p90_us = t->p90_us;
        r.copies = t->copies;
        r.calls_per_replay = t->calls_per_replay;
        r.graph = t->graph;
        r.gbps = double(bytes) / (r.us * 1e3);
        r.floor_us = double(bytes) / (read_gbps * 1e3);
        r.pct_floor = 100.0 * r.floor_us / r.us;
        r.note = "dense weight bytes, read only";
      } else {
        r.status = "FAIL";
        r.note = t.status().to_string();
        failed = true;
      }
      rows.push_back(r);
      write_csv_row(csv, r);
      print_row(r);
    }

    const auto t_shape = std::chrono::steady_clock::now();
    // Host work (generation, encoding, reference) dominates big shapes and is single-threaded
    // per call, so independent pieces run concurrently: every (pattern, sparsity) matrix of the
    // shape at once, then every format's encoding of one matrix at once, then the references.
    std::vector<std::pair<size_t, double>> items;
    for (size_t pi = 0; pi < specs.size(); ++pi) {
      for (double sparsity : opt.sparsities) items.emplace_back(pi, sparsity);
    }
    std::vector<std::future<Result<HostMatrix>>> generated;
    for (const auto& [pi, sparsity] : items) {
      generated.push_back(std::async(std::launch::async, [&, pi = pi, sparsity = sparsity] {
        return patterns::generate(specs[pi], opt.dtype, shape.m, shape.k, sparsity, opt.seed);
      }));
    }
    for (size_t item = 0; item < items.size(); ++item) {
      const size_t pi = items[item].first;
      const double sparsity = items[item].second;
      {
        auto host = generated[item].get();
        if (!host.ok()) {
          std::fprintf(stderr, "sparrow bench: %s\n", host.status().to_string().c_str());
          return kExitBadArgs;
        }
        const HostMatrix& w_host = host.value();
        const ConstMatrixView wv = w_host.view();

        // Every format the candidates need ("csr32": 32-bit indices, for cuSPARSE).
        std::map<std::string, std::pair<Format, EncodeOptions>> needed;
        // The nm format encodes only N:M matrices: its kernels run with --pattern nm:N:M[:L].
        const bool nm_pattern = specs[pi].kind == patterns::Kind::nm;
        for (const auto& c : cands.value()) {
          if (c.weight_format == Format::nm && !nm_pattern) continue;
          EncodeOptions eo;
          if (c.kind == Candidate::Kind::cusparse) eo.csr_index = csr::IndexWidth::bits32;
          if (nm_pattern) eo.nm_pattern = specs[pi].nm;
          needed.emplace(c.kind == Candidate::Kind::cusparse ? "csr32" : c.format,
                         std::make_pair(c.weight_format, eo));
        }
        std::map<std::string, std::future<Result<Weight>>> encoded;
        for (const auto& [key, fe] : needed) {
          encoded.emplace(key, std::async(std::launch::async, [&wv, fe = fe] {
                            return encode(fe.first, wv, fe.second);
                          }));
        }
        Reference ref_rows = make_reference_rows(shape.m, shape.k);
        auto ref_w = reference_weight(w_host, ref_rows.rows);
        if (!ref_w.ok()) return fatal(ref_w.status());
        std::vector<HostMatrix> xs;
        for (int64_t n : opt.ns) {
          xs.push_back(patterns::dense_random(opt.dtype, n, shape.k, opt.seed * 1000003u + uint64_t(n)));
        }
        std::vector<std::future<Result<std::vector<double>>>> refs;
        for (const auto& x : xs) {
          refs.push_back(std::async(std::launch::async, [&ref_w, &x] {
            return reference::matmul_f64(ref_w.value(), x.view());
          }));
        }
        std::map<std::string, WeightSet> weights;
        for (auto& [key, fut] : encoded) {
          auto host_weight = fut.get();
          WeightSet ws;
          if (host_weight.ok()) {
            ws = upload_copies(host_weight.value(), info.l2_bytes);
          } else {
            ws.status = host_weight.status();
          }
          weights.emplace(key, std::move(ws));
        }

        // The scratch of the expand_cublas kernels: one whole expanded W, as the engine gives it.
        const size_t ws_bytes = size_t(shape.m) * size_t((shape.k + 7) / 8 * 8) * es;
        auto ws_mem = detail::device_alloc(ws_bytes);
        if (!ws_mem.ok()) return fatal(ws_mem.status());
        MatmulOptions mopt;
        mopt.workspace = ws_mem.value().get();
        mopt.workspace_bytes = ws_bytes;
        mopt.dependent_launch = opt.dependent_launch;

        for (size_t ni = 0; ni < opt.ns.size(); ++ni) {
          const int64_t n = opt.ns[ni];
          const HostMatrix& x = xs[ni];
          auto ref = refs[ni].get();
          if (!ref.ok()) return fatal(ref.status());
          Reference r_all = ref_rows;
          r_all.y = std::move(ref).value();

          auto dx_mem = detail::device_alloc(x.bytes());
          auto dy_mem = detail::device_alloc(size_t(n * shape.m) * es);
          if (!dx_mem.ok()) return fatal(dx_mem.status());
          if (!dy_mem.ok()) return fatal(dy_mem.status());
          if (auto s = detail::copy_to_device(dx_mem.value().get(), x.data(), x.bytes()); !s.ok()) {
            return fatal(s);
          }
          const ConstMatrixView dx{dx_mem.value().get(), opt.dtype, n, shape.k, shape.k};
          const MatrixView dy{dy_mem.value().get(), opt.dtype, n, shape.m, shape.m};

          std::vector<Row> group;
          for (const auto& c : cands.value()) {
            Row r;
            r.shape = shape.name;
            r.m = shape.m;
            r.k = shape.k;
            r.n = n;
            r.sparsity = sparsity;
            r.pattern = patterns::to_string(specs[pi]);
            r.dtype = dtype_name(opt.dtype);
            r.format = c.format;
            r.kernel = c.kernel;

            const bool cusparse = c.kind == Candidate::Kind::cusparse;
            if (c.weight_format == Format::nm && !nm_pattern) {
              r.status = "skip";
              r.note = "the nm format needs an N:M matrix: --pattern nm:N:M[:L]";
              group.push_back(r);
              print_row(r);
              continue;
            }
            WeightSet& ws = weights.at(cusparse ? "csr32" : c.format);
            if (!ws.status.ok()) {
              r.status = "skip";
              r.note = "encode: " + ws.status.to_string();
              if (ws.status.code() != Code::unsupported) {
                r.status = "FAIL";
                failed = true;
              }
              group.push_back(r);
              print_row(r);
              continue;
            }
            r.weight_bytes = ws.bytes;
            r.bytes = ws.bytes + size_t(n * shape.k) * es + size_t(n * shape.m) * es;

            std::unique_ptr<CusparseCsr> sp;
            CallFn call;
            if (cusparse) {
              auto s = CusparseCsr::create(ws.copies, dx, dy);
              if (!s.ok()) {
                r.status = s.status().code() == Code::unsupported ? "skip" : "FAIL";
                r.note = "cuSPARSE: " + s.status().to_string();
                failed = failed || r.status == "FAIL";
                group.push_back(r);
                print_row(r);
                continue;
              }
              sp = std::move(s).value();
              r.kernel = sp->kernel_name();
              call = [&sp](int i, cudaStream_t st) { return sp->run(i, st); };
            } else if (c.kind == Candidate::Kind::matmul) {
              call = [&ws, dx, dy, mopt](int i, cudaStream_t st) {
                return matmul(dy, ws.copies[size_t(i)], dx, st, mopt);
              };
            } else {
              const kernels::KernelInfo* k = c.info;
              call = [&ws, k, dx, dy, mopt](int i, cudaStream_t st) {
                return k->run(kernels::Problem{ws.copies[size_t(i)], dx, dy, mopt}, st);
              };
            }

            auto rc = RotatedCalls::prepare(call, int(ws.copies.size()), stream);
            Result<Timing> t = rc.ok() ? rc.value()->time(opt.reps, info.sm_clock_peak_mhz, opt.row_budget_s)
                                       : Result<Timing>(rc.status());
            if (!t.ok()) {
              cudaGetLastError();
              const bool unsup = t.status().code() == Code::unsupported;
              r.status = unsup ? "skip" : "FAIL";
              r.note = t.status().to_string();
              failed = failed || !unsup;
              group.push_back(r);
              print_row(r);
              // A launch failure may leave the context unusable; stop rather than report noise.
              if (cudaDeviceSynchronize() != cudaSuccess) return fatal(t.status());
              continue;
            }
            r.us = t->median_us;
            r.p10_us = t->p10_us;
            r.p90_us = t->p90_us;
            r.copies = t->copies;
            r.calls_per_replay = t->calls_per_replay;
            r.graph = t->graph;
            r.note = t->note;
            r.gbps = double(r.bytes) / (r.us * 1e3);
            r.floor_us = double(r.bytes) / (read_gbps * 1e3);
            r.pct_floor = 100.0 * r.floor_us / r.us;
            if (int(ws.copies.size()) == kMaxCopies &&
                double(ws.bytes) * kMaxCopies < 3.0 * double(info.l2_bytes)) {
              r.note += (r.note.empty() ? "" : "; ") + std::string("copies capped: L2 not cold");
            }

            // Correctness of what was timed: poison Y, replay once, compare with the reference.
            std::string failure;
            Status st = cuda_status(cudaMemsetAsync(dy.data, 0xFF, size_t(n * shape.m) * es, stream),
                                    "poison Y");
            if (st.ok()) st = rc.value()->replay();
            if (st.ok()) st = cuda_status(cudaStreamSynchronize(stream), "verification replay");
            if (!st.ok()) {
              failure = st.to_string();
            } else {
              r.error = check_error(dy, r_all, failure);
              r.error_scope = r_all.scope;
            }
            if (!failure.empty() || !(r.error <= tol)) {
              char buf[96];
              std::snprintf(buf, sizeof(buf), "error above tolerance %.0e", tol);
              r.note += (r.note.empty() ? "" : "; ") + (failure.empty() ? std::string(buf) : failure);
              // cuSPARSE is a third-party baseline: its inexactness is reported, not sparrow's
              // failure (its fp16 SpMM measured ~1.2e-3 on the H100, 2e-3 at K = 11008).
              if (cusparse && failure.empty() && std::isfinite(r.error)) {
                r.status = "inexact";
              } else {
                r.status = "FAIL";
                failed = true;
              }
            }
            group.push_back(r);
          }

          // Speedups against the cuBLAS row of the same problem, and the fastest correct one.
          double cublas_us = -1;
          for (const auto& r : group) {
            if (r.kernel == "dense.cublas" && r.status == "ok") cublas_us = r.us;
          }
          int best = -1;
          for (size_t i = 0; i < group.size(); ++i) {
            Row& r = group[i];
            if (r.us < 0) continue;
            if (cublas_us > 0) r.speedup = cublas_us / r.us;
            if (r.status == "ok" && (best < 0 || r.us < group[size_t(best)].us)) best = int(i);
          }
          if (best >= 0) group[size_t(best)].best = true;
          for (const auto& r : group) {
            if (r.us >= 0) print_row(r);  // skipped rows were printed already
            rows.push_back(r);
            write_csv_row(csv, r);
          }
          if (opt.ns.size() > 1 || opt.sparsities.size() > 1) std::printf("\n");
        }
      }
    }
    std::printf("# %s done in %.0f s (generation, encoding, reference and timing)\n\n",
                shape.name.c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t_shape).count());
    std::fflush(stdout);
  }

  const int fails = int(std::count_if(rows.begin(), rows.end(), [](const Row& r) { return r.status == "FAIL"; }));
  std::printf("# %zu rows, %d failed%s, %.0f s\n", rows.size(), fails,
              fails ? " (FAIL rows above)" : "",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count());

  if (!opt.json_path.empty()) {
    nlohmann::json j;
    j["sparrow_version"] = kVersion;
    j["git_revision"] = git_revision();
    j["command"] = opt.command_line;
    j["date"] = utc_now();
    j["device"] = to_json(info);
    j["read_bandwidth_gbps"] = read_gbps;
    j["dtype"] = dtype_name(opt.dtype);
    j["reps"] = opt.reps;
    j["tolerance"] = tol;
    j["protocol"] =
        "cold L2: weight copies rotated (total >= 3x L2); one CUDA graph per candidate of "
        "calls_per_replay calls over the copies; 3 warm-up replays; reps timed replays (CUDA "
        "events), us = median replay time / calls_per_replay";
    j["rows"] = nlohmann::json::array();
    for (const auto& r : rows) j["rows"].push_back(row_json(r));
    std::ofstream(opt.json_path) << j.dump(1) << "\n";
  }
  cudaStreamDestroy(stream);
  return failed ? kExitFail : 0;
}

}  // namespace sparrow::bench
