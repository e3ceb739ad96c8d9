// Backend::decode_greedy against the loop it stands for (forward_greedy one step at a time), on
// any backend: the CPU tests run it on the CPU backend (the base class's loop), the GPU tests on
// the GPU backend (steps enqueued ahead of the host, picks fed to the next step on the device).
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "sparrow/engine/backend.hpp"

namespace sparrow::test {

// Picks of `steps` forward_greedy steps after `first`, each fed the previous picks (batch each).
inline std::vector<std::vector<int32_t>> greedy_loop(engine::Backend& b, std::vector<int32_t> fed,
                                                     int batch, int64_t steps) {
  std::vector<std::vector<int32_t>> picks;
  std::vector<int32_t> next;
  for (int64_t i = 0; i < steps; ++i) {
    const Status s = b.forward_greedy(fed.data(), batch, 1, next);
    EXPECT_TRUE(s.ok()) << "step " << i << ": " << s.to_string();
    if (!s.ok()) break;
    picks.push_back(next);
    fed = next;
  }
  return picks;
}

// `b` and `ref` hold the same model. After a prompt (batch x len ids), decode_greedy on b gives
// the picks of ref's forward_greedy loop, step by step; stopped after `stop_after` steps, b's
// position counts exactly those, and a branch from there (a token other than the last pick, so a
// step b ran past the stop and discarded would show) continues as ref's does.
inline void expect_decode_greedy_matches_loop(engine::Backend& b, engine::Backend& ref,
                                              const std::vector<int32_t>& prompt, int batch,
                                              int64_t steps, int64_t stop_after) {
  const int64_t len = int64_t(prompt.size()) / batch;
  const int32_t vocab = int32_t(b.model().config.vocab);
  std::vector<int32_t> first, ref_first;
  b.reset();
  ref.reset();
  ASSERT_TRUE(b.forward_greedy(prompt.data(), batch, len, first).ok());
  ASSERT_TRUE(ref.forward_greedy(prompt.data(), batch, len, ref_first).ok());
  ASSERT_EQ(first, ref_first);
  const auto expected = greedy_loop(ref, first, batch, steps);
  ASSERT_EQ(int64_t(expected.size()), steps);

  std::vector<std::vector<int32_t>> got;
  auto collect = [&](const int32_t* p) {
    got.emplace_back(p, p + batch);
    return true;
  };
  const Status all = b.decode_greedy(first.data(), batch, steps, collect);
  ASSERT_TRUE(all.ok()) << all.to_string();
  EXPECT_EQ(got, expected) << b.name() << ": decode_greedy against forward_greedy steps";
  EXPECT_EQ(b.position(), len + steps);

  // Stopped after stop_after steps, then a branch of 3 steps from another token.
  b.reset();
  ASSERT_TRUE(b.forward_greedy(prompt.data(), batch, len, first).ok());
  got.clear();
  auto until = [&](const int32_t* p) {
    got.emplace_back(p, p + batch);
    return int64_t(got.size()) < stop_after;
  };
  ASSERT_TRUE(b.decode_greedy(first.data(), batch, steps, until).ok());
  ASSERT_EQ(int64_t(got.size()), stop_after);
  EXPECT_EQ(got, std::vector<std::vector<int32_t>>(expected.begin(),
                                                   expected.begin() + stop_after));
  EXPECT_EQ(b.position(), len + stop_after) << "the position counts the steps seen";
  std::vector<int32_t> branch = got.back();
  for (int32_t& t : branch) t = (t + 1) % vocab;
  ref.reset();
  std::vector<int32_t> ignored;
  ASSERT_TRUE(ref.forward_greedy(prompt.data(), batch, len, ignored).ok());
  greedy_loop(ref, first, batch, stop_after);
  const auto ref_branch = greedy_loop(ref, branch, batch, 3);
  got.clear();
  ASSERT_TRUE(b.decode_greedy(branch.data(), batch, 3, collect).ok());
  EXPECT_EQ(got, ref_branch) << b.name() << ": the branch after a stop";

  // No steps: nothing runs. Too many for the context, or a bad id: an error, nothing runs.
  const int64_t pos = b.position();
  EXPECT_TRUE(b.decode_greedy(first.data(), batch, 0, collect).ok());
  const Status over = b.decode_greedy(first.data(), batch, b.context() - pos + 1, collect);
  EXPECT_EQ(over.code(), Code::invalid_argument) << over.to_string();
  std::vector<int32_t> bad(size_t(batch), vocab);
  EXPECT_EQ(b.decode_greedy(bad.data(), batch, 1, collect).code(), Code::invalid_argument);
  EXPECT_EQ(b.decode_greedy(first.data(), batch, -1, collect).code(), Code::invalid_argument);
  EXPECT_EQ(b.position(), pos);
  EXPECT_EQ(got.size(), size_t(3)) << "on_step ran for a call that should run no step";
}

}  // namespace sparrow::test
