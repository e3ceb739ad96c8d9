// tca_bme's few-token CUDA-core kernel (few_tokens.cu): N = 2..4 on weights too small for the
// streaming kernel of tca_bme.decode to keep its warps busy (decode.cu chooses), the one-token
// kernel's work split (one_token.hpp) with every set bit multiplied by up to 4 tokens.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kernel.hpp"
#include "kernels/tca_bme/one_token.hpp"
#include "sparrow/formats/tca_bme.hpp"

namespace sparrow::kernels::tca_bme_few_tokens {

// Blocks, warps and the strip buffer as in the one-token kernel (one_token.hpp's Config); the
// token count is a template parameter: 2 or 4 (a pass of n tokens runs the smallest >= n).
using Config = tca_bme_one_token::Config;
constexpr int kMaxTokens = 4;

// The token count of the instance that runs n tokens (2 <= n <= kMaxTokens).
constexpr int instance_tokens(int n) { return n <= 2 ? 2 : 4; }

// Dynamic shared memory of one block of `warps` warps running the `tokens` instance: per warp
// the strip's values and the group's X as fp32 (64 columns x tokens).
size_t shared_bytes(int warps, int tokens);

// Y (n x M, row stride ldy) = X (n x K, row stride ldx) * W^T for 2 <= n <= kMaxTokens; x and y
// device pointers of W's dtype (T = __half, __nv_bfloat16). `dependent`: a programmatic dependent
// launch (kernels/dependent_launch.cuh); `rms`: normalise each token of X first
// (MatmulOptions::input_rms).
template <class T>
Status launch(const tca_bme::Matrix& w, const T* x, int64_t ldx, T* y, int64_t ldy, int n,
              const T* bias, bool accumulate, int sm_count, bool dependent, bool rms,
              float rms_eps, cudaStream_t stream);

}  // namespace sparrow::kernels::tca_bme_few_tokens
