// Turning CUDA runtime errors into Status.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "sparrow/status.hpp"

namespace sparrow {

inline Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::success();
  const Code code = e == cudaErrorMemoryAllocation ? Code::out_of_memory
                    : (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver)
                        ? Code::no_device
                        : Code::cuda_error;
  return {code, std::string(what) + ": " + cudaGetErrorString(e)};
}

}  // namespace sparrow

// Returns a cuda_error Status from the enclosing function when a CUDA call fails.
#define SPARROW_CUDA_RETURN_IF_ERROR(call) SPARROW_RETURN_IF_ERROR(::sparrow::cuda_status((call), #call))
// After a kernel launch: reports launch-configuration errors without synchronising.
#define SPARROW_CUDA_CHECK_LAUNCH(name) \
  SPARROW_RETURN_IF_ERROR(::sparrow::cuda_status(cudaGetLastError(), name " launch"))
