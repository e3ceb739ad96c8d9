// A Llama-family decoder layer's four engine matmuls (qkv, o, gate_up, down: the GPU engine's
// stacked shapes) at one density, for the dispatch tests that ask what a layer gets.
#pragma once

#include <array>
#include <cstdint>

#include "sparrow/dispatch.hpp"

namespace sparrow::test {

inline std::array<EngineMatmulLayers, 4> llama_layer(int64_t hidden, int64_t qkv_rows,
                                                     int64_t intermediate, double density) {
  const int64_t shapes[4][2] = {
      {qkv_rows, hidden}, {hidden, hidden}, {2 * intermediate, hidden}, {hidden, intermediate}};
  const EngineMatmul roles[4] = {EngineMatmul::qkv, EngineMatmul::o, EngineMatmul::gate_up,
                                 EngineMatmul::down};
  std::array<EngineMatmulLayers, 4> l;
  for (size_t i = 0; i < 4; ++i) {
    l[i].matmul = roles[i];
    l[i].add(shapes[i][0], shapes[i][1], density);
  }
  return l;
}

// Llama-2-7B: hidden 4096, q/k/v 3 x 4096 rows, intermediate 11008.
inline std::array<EngineMatmulLayers, 4> llama2_7b_layer(double density) {
  return llama_layer(4096, 12288, 11008, density);
}

}  // namespace sparrow::test
