// StepStamps (SPARROW_ENGINE_STAMPS): slots, intervals per op name, the report.
#include "engine/step_stamps.hpp"

#include <gtest/gtest.h>

using sparrow::engine::StepStamps;

TEST(StepStamps, IntervalsGoToTheOpAfterThemAndRepeatPerLayer) {
  StepStamps st;
  st.begin_step();
  // start, embed, two layers of (qkv, attention), lm_head.
  for (const char* n : {"start", "embed", "qkv", "attention", "qkv", "attention", "lm_head"})
    EXPECT_GE(st.add(n, 16), 0);
  EXPECT_EQ(st.count(), 7);
  // ns: embed 1000, qkv 10000 and 12000, attention 5000 twice, lm_head 100000.
  st.record({0, 1000, 11000, 16000, 28000, 33000, 133000});
  st.record({500, 1500, 11500, 16500, 28500, 33500, 133500});
  EXPECT_EQ(st.steps(), 2);
  const std::string r = st.report("batch 1");
  EXPECT_NE(r.find("batch 1, 2 decode steps"), std::string::npos) << r;
  // qkv: 11 µs per launch, 2 per step, 22 µs per step of 133 (16.5 %).
  EXPECT_NE(r.find("qkv           11.00 µs x   2.0 per step =      22.0 µs ( 16.5 %)"),
            std::string::npos) << r;
  EXPECT_NE(r.find("attention      5.00 µs x   2.0 per step =      10.0 µs"), std::string::npos)
      << r;
  EXPECT_NE(r.find("step           133.0 µs"), std::string::npos) << r;
  // "start" has no interval of its own; embed comes first.
  EXPECT_EQ(r.find("start"), std::string::npos) << r;
  EXPECT_LT(r.find("embed"), r.find("qkv")) << r;
}

TEST(StepStamps, FullSlotsAndIncompleteStepsAreNotCounted) {
  StepStamps st;
  EXPECT_EQ(st.report("x"), "");  // nothing recorded
  st.begin_step();
  EXPECT_EQ(st.add("start", 2), 0);
  EXPECT_EQ(st.add("embed", 2), 1);
  EXPECT_EQ(st.add("qkv", 2), -1);  // no slot left: that op goes untimed
  EXPECT_EQ(st.count(), 2);
  st.record({10, 5});        // goes backwards: a step not run whole
  st.record({1, 2, 3});      // not one stamp per slot
  EXPECT_EQ(st.steps(), 0);
  st.record({10, 20});
  EXPECT_EQ(st.steps(), 1);
  // A new step's names restart (the backend captures each batch size's step once).
  st.begin_step();
  EXPECT_EQ(st.count(), 0);
}
