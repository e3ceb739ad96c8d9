#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "kernels/kernel.hpp"

namespace sparrow::kernels {

static bool aligned(const void* p, size_t a) { return (reinterpret_cast<uintptr_t>(p) % a) == 0; }

Status check_problem(const Problem& p, Format expected, bool takes_input_rms,
                     bool takes_output_swiglu) {
  if (format_of(p.w) != expected) {
    return invalid_argument(std::string("kernel for ") + format_name(expected) + " got a " +
                            format_name(format_of(p.w)) + " weight");
  }
  if (location_of(p.w) != Location::device) {
    return invalid_argument("the weight is on the host; call to_device() first");
  }
  const Shape& s = shape_of(p.w);
  SPARROW_RETURN_IF_ERROR(check_view(p.x, "X"));
  SPARROW_RETURN_IF_ERROR(check_view(ConstMatrixView(p.y), "Y"));
  if (p.x.cols != s.cols) {
    return invalid_argument("X has " + std::to_string(p.x.cols) + " columns, W has K = " +
                            std::to_string(s.cols));
  }
  if (p.opt.output_swiglu) {
    if (!takes_output_swiglu) {
      return unsupported(
          "this kernel does not take output_swiglu (see matmul_takes_output_swiglu)");
    }
    if (s.rows % 2 != 0) {
      return invalid_argument("output_swiglu needs a stacked [gate; up] weight with an even row "
                              "count, W has M = " + std::to_string(s.rows));
    }
    if (p.opt.bias || p.opt.accumulate) {
      return invalid_argument("output_swiglu takes no bias and no accumulate");
    }
  }
  const int64_t y_cols = p.opt.output_swiglu ? s.rows / 2 : s.rows;
  if (p.y.rows != p.x.rows || p.y.cols != y_cols) {
    return invalid_argument("Y is " + std::to_string(p.y.rows) + " x " +
                            std::to_string(p.y.cols) + ", expected N x " +
                            (p.opt.output_swiglu ? "M/2 (output_swiglu) = " : "M = ") +
                            std::to_string(p.x.rows) + " x " + std::to_string(y_cols));
  }
  if (p.x.dtype != s.dtype || p.y.dtype != s.dtype) {
    return invalid_argument(std::string("X, Y and W must share a dtype (W is ") +
                            dtype_name(s.dtype) + ", X " + dtype_name(p.x.dtype) + ", Y " +
                            dtype_name(p.y.dtype) + ")");
  }
  const size_t es = dtype_size(s.dtype);
  if (!aligned(p.x.data, es) || !aligned(p.y.data, es) ||
      (p.opt.bias && !aligned(p.opt.bias, es))) {
    return invalid_argument("X, Y and bias must be aligned to their element size (" +
                            std::to_string(es) + " bytes)");
  }
  if (p.opt.input_rms) {
    if (!takes_input_rms) {
      return unsupported("this kernel does not take input_rms (see matmul_takes_input_rms)");
    }
    if (!(p.opt.rms_eps >= 0.0f) || !std::isfinite(p.opt.rms_eps)) {
      return invalid_argument("rms_eps must be finite and >= 0");
    }
  }
  return Status::success();
}

bool takes_input_rms(const KernelInfo& k, const Weight& w, int64_t n) {
  return k.input_rms != nullptr && k.input_rms(w, n);
}

bool takes_output_swiglu(const KernelInfo& k, const Weight& w, int64_t n) {
  // A stacked [gate; up] weight has an even row count whatever the kernel (check_problem refuses
  // any other); the kernel's hook says where else it takes it.
  return k.output_swiglu != nullptr && shape_of(w).rows % 2 == 0 && k.output_swiglu(w, n);
}

WorkspaceNeed workspace_need(const KernelInfo& k, const Weight& w) {
  return k.workspace ? k.workspace(w) : WorkspaceNeed{};
}

const KernelInfo* find_kernel(const char* name) {
  for (const auto& k : all_kernels()) {
    if (std::strcmp(k.name, name) == 0) return &k;
  }
  return nullptr;
}

}  // namespace sparrow::kernels
