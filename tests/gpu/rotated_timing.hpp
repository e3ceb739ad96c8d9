// The timing loop of the GPU timing tests (kernel authors' notes; the official numbers come from
// `sparrow bench`): `call(copy, stream)` for every rotated weight copy captured in one CUDA graph
// (copies sized by the caller to >= 3x the L2, so each call reads its weights from DRAM), a warm-up
// and one untimed replay, then CUDA events around each of `replays` replays. Returns the median
// microseconds per call, or -1 after a CUDA error (printed).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

namespace sparrow::test {

inline double time_rotated(int copies, const std::function<void(int, cudaStream_t)>& call,
                           int replays = 50) {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  for (int c = 0; c < copies; ++c) call(c, s);  // warm-up (module load, handles)
  cudaStreamSynchronize(s);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
  for (int c = 0; c < copies; ++c) call(c, s);
  cudaStreamEndCapture(s, &g);
  cudaGraphInstantiate(&ge, g, 0);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaGraphLaunch(ge, s);
  std::vector<float> ms;
  for (int i = 0; i < replays; ++i) {
    cudaEventRecord(a, s);
    cudaGraphLaunch(ge, s);
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  const cudaError_t e = cudaGetLastError();
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(s);
  if (e != cudaSuccess) {
    std::printf("CUDA error while timing: %s\n", cudaGetErrorString(e));
    return -1;
  }
  return 1000.0 * ms[ms.size() / 2] / copies;
}

}  // namespace sparrow::test
