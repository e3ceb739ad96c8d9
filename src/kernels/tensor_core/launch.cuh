// Host side shared by the tensor-core SpMM launchers: the split-K choice and a launch that puts
// the split-K blocks of one output tile into one thread-block cluster (sm_90), where the epilogue
// reduces them through distributed shared memory (see store_output in mma.cuh).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/cuda_check.hpp"
#include "kernels/dependent_launch.cuh"
#include "kernels/device_info.hpp"
#include "kernels/kernel.hpp"
#include "kernels/tensor_core/mma.cuh"
#include "kernels/tensor_core/split_k.hpp"

namespace sparrow::kernels::tc {

// The X / Y arguments of tokens t0 .. t0 + n - 1 of problem p (all its tokens from t0 when n < 0)
// for a rows x cols weight of 16-bit elements.
inline XYArgs xy_args(const Problem& p, int64_t rows, int64_t cols, int64_t t0 = 0,
                      int64_t n = -1) {
  XYArgs a{};
  a.x = static_cast<const uint16_t*>(p.x.data) + t0 * p.x.ld;
  a.y = static_cast<uint16_t*>(p.y.data) + t0 * p.y.ld;
  a.bias = p.opt.bias;
  a.ldx = p.x.ld;
  a.ldy = p.y.ld;
  a.n = int(n < 0 ? p.n() - t0 : n);
  a.m = int(rows);
  a.k = int(cols);
  a.accumulate = p.opt.accumulate;
  a.x_vec = reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && p.x.ld % 8 == 0;
  return a;
}

struct DeviceInfo {
  int sms = 0;
  int major = 0;
};

// From the per-device cache of kernels/device_info.hpp.
inline Status device_info(DeviceInfo& d) {
  SPARROW_ASSIGN_OR_RETURN(const kernels::DeviceInfo info, current_device_info());
  d.sms = info.sm_count;
  d.major = info.cc_major;
  return Status::success();
}

// How many blocks split K for one output tile (tiled_csl.mma; the tca_bme kernels use
// choose_splits_by_waves below): enough that the grid fills every resident block slot once (a
// memory-bound kernel needs the whole chip's loads in flight), capped by the cluster size and so
// that every split still has a few k steps. Split-K needs clusters (sm_90).
// SPARROW_TC_MAX_SPLITS=<n> caps it (experiments: 1 turns split-K and clusters off).
inline int max_splits_override() {
  static const int v = std::max(1, env_knob("SPARROW_TC_MAX_SPLITS", kMaxSplits));
  return v;
}

// The most splits a tile of k_steps may take: the cluster size and a few k steps per split.
inline int64_t max_splits(int64_t k_steps) {
  return std::min<int64_t>(std::min(kMaxSplits, max_splits_override()),
                           std::max<int64_t>(k_steps / kMinStepsPerSplit, 1));
}

inline int choose_splits(const DeviceInfo& d, int blocks_per_sm, int64_t output_tiles,
                         int64_t k_steps) {
  if (d.major < 9) return 1;
  const int64_t slots = int64_t(std::max(blocks_per_sm, 1)) * d.sms;
  const int64_t s = std::min((slots + output_tiles - 1) / output_tiles, max_splits(k_steps));
  return int(std::max<int64_t>(s, 1));
}

// How many clusters of `blocks` blocks of `kernel` the device runs at once (thread-block clusters
// must fit in one GPC, so large blocks fit fewer clusters than SMs / blocks). Cached per
// (device, kernel, smem, blocks): the host asks on every launch outside graph capture.
template <class Kernel>
int max_active_clusters(Kernel kernel, int blocks, int threads, size_t smem) {
  struct Key {
    int dev;
    const void* k;
    size_t smem;
    int blocks;
  };
  static thread_local Key keys[64];
  static thread_local int values[64];
  static thread_local int used = 0;
  int dev = 0;
  cudaGetDevice(&dev);
  for (int i = 0; i < used; ++i) {
    const Key& e = keys[i];
    if (e.dev == dev && e.k == reinterpret_cast<const void*>(kernel) && e.smem == smem &&
        e.blocks == blocks)
      return values[i];
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(blocks), 1, 1);
  cfg.blockDim = dim3(unsigned(threads));
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = unsigned(blocks);
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
    cudaGetLastError();
    clusters = 0;
  }
  if (used < 64) {
    keys[used] = {dev, reinterpret_cast<const void*>(kernel), smem, blocks};
    values[used++] = clusters;
  }
  return clusters;
}

// The split count by choose_splits_by_cost (split_k.hpp), counting the blocks that run at once as
// the device reports for each cluster size: for kernels with few blocks per SM, rounding the split
// count up to fill every slot can start a second wave that doubles the time (tca_bme.wgmma_smem at
// 4096 rows, N = 256: 32 row tiles x 4 splits, clusters of four blocks of 184 KB, ran 2.3x longer
// per k step than the same kernel with 2 splits at N = 512, H100, session 15). Capped as
// choose_splits. SPARROW_TC_SPLIT_FIXED_STEPS=<n> (experiments, read once) replaces
// kSplitFixedSteps; 0 is the cost of sessions 15-43.
template <class Kernel>
int choose_splits_by_waves(const DeviceInfo& d, Kernel kernel, int threads, size_t smem,
                           int blocks_per_sm, int64_t output_tiles, int64_t k_steps) {
  if (d.major < 9) return 1;
  static const int fixed_steps = std::max(0, env_knob("SPARROW_TC_SPLIT_FIXED_STEPS",
                                                      kSplitFixedSteps));
  const int most = int(max_splits(k_steps));
  int64_t slots[kMaxSplits] = {};
  for (int s = 1; s <= most; ++s) {
    slots[s - 1] = s == 1 ? int64_t(std::max(blocks_per_sm, 1)) * d.sms
                          : int64_t(max_active_clusters(kernel, s, threads, smem)) * s;
  }
  return choose_splits_by_cost(slots, most, output_tiles, k_steps, fixed_steps);
}

// The host side every split-K launch of a tca_bme kernel shares: refuses more dynamic shared
// memory than the GPU gives a block (saying how much this K needs), raises the kernel's limit to
// `smem`, prefers shared memory over L1, and sets `splits` by choose_splits_by_waves.
template <class Kernel>
Status prepare_split_k(Kernel kernel, const char* name, int k, int threads, size_t smem,
                       int64_t output_tiles, int64_t k_steps, int& splits) {
  SPARROW_ASSIGN_OR_RETURN(const kernels::DeviceInfo info, current_device_info());
  if (smem > size_t(info.max_smem_per_block)) {
    return unsupported(std::string(name) + ": K = " + std::to_string(k) + " needs " +
                       std::to_string(smem) + " bytes of shared memory per block, more than the " +
                       std::to_string(info.max_smem_per_block) + " this GPU allows");
  }
  SPARROW_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  SPARROW_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
      kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  DeviceInfo d;
  SPARROW_RETURN_IF_ERROR(device_info(d));
  int per_sm = 0;
  SPARROW_CUDA_RETURN_IF_ERROR(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  splits = choose_splits_by_waves(d, kernel, threads, smem, per_sm, output_tiles, k_steps);
  return Status::success();
}

// SPARROW_TC_PDL=0 (an experiment knob): the kernels launched here ignore `dependent` and start
// only after the previous kernel has finished. Their grids are sized to fill the GPU's block
// slots once; under a dependent launch the previous kernel's blocks still hold some of those
// slots, and tca_bme.mma measured 1.19-1.32x slower following itself that way on split-K shapes
// (H100, session 22). In the 7B engine it does not pay that: with the knob at 0 batch 8 ran 4-6 %
// slower and batch 32 0-1 % (H100, session 23), so the knob stays for measuring what dependent
// launches are worth.
inline bool tc_dependent_launch() {
  static const bool on = env_knob("SPARROW_TC_PDL", 1) != 0;
  return on;
}

// Launches kernel<<<(splits, gy, gz), threads, smem, stream>>> with a (splits, 1, 1) cluster when
// splits > 1, and as a programmatic dependent launch when `dependent` (kernels/
// dependent_launch.cuh: the kernel must wait_for_previous() before it touches X or Y). The
// caller has raised the kernel's dynamic shared-memory limit to `smem`.
template <class Kernel, class... Args>
Status launch_split_k(Kernel kernel, int splits, unsigned gy, unsigned gz, int threads,
                      size_t smem, cudaStream_t stream, bool dependent, const char* name,
                      Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(unsigned(splits), gy, gz);
  cfg.blockDim = dim3(unsigned(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n_attr = 0;
  if (splits > 1) {
    attr[n_attr].id = cudaLaunchAttributeClusterDimension;
    attr[n_attr].val.clusterDim.x = unsigned(splits);
    attr[n_attr].val.clusterDim.y = 1;
    attr[n_attr].val.clusterDim.z = 1;
    ++n_attr;
  }
  add_dependent_attribute(dependent && tc_dependent_launch(), attr, n_attr);
  cfg.attrs = attr;
  cfg.numAttrs = n_attr;
  // SPARROW_TC_DEBUG: print the launch shape and how many clusters fit at once, when it changes.
  static const bool debug = std::getenv("SPARROW_TC_DEBUG") != nullptr;
  if (debug) {
    static thread_local size_t last = 0;
    const size_t key = size_t(splits) * 1000003u + gy * 7919u + gz * 31u + smem;
    if (key != last) {
      last = key;
      int clusters = -1, per_sm = -1;
      if (splits > 1) cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg);
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem);
      std::printf("[tc] %s grid (%d,%u,%u) x %d threads, smem %zu, blocks/SM %d, clusters %d\n",
                  name, splits, gy, gz, threads, smem, per_sm, clusters);
    }
  }
  return cuda_status(cudaLaunchKernelEx(&cfg, kernel, args...), name);
}

}  // namespace sparrow::kernels::tc
