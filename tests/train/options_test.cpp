// Options: flag > environment > default, and the EDP_* naming rule.
#include <gtest/gtest.h>

#include <cstdlib>

#include "edp/train/options.h"

using edp::train::Options;

TEST(Options, PrecedenceFlagEnvDefault) {
  setenv("EDP_BATCH", "32", 1);
  setenv("EDP_LR", "0.5", 1);
  Options o("prog", "test");
  o.add("batch", "64", "b").add("lr", "0.1", "l").add("epochs", "5", "e").add_flag("fast", "f");
  const char* argv[] = {"prog", "--lr", "0.2", "--fast", "--", "x"};
  o.parse(6, const_cast<char**>(argv));
  EXPECT_EQ(o.i64("batch"), 32);
  EXPECT_EQ(o.source("batch"), "env EDP_BATCH");
  EXPECT_DOUBLE_EQ(o.f64("lr"), 0.2);
  EXPECT_EQ(o.source("lr"), "flag");
  EXPECT_EQ(o.i64("epochs"), 5);
  EXPECT_TRUE(o.flag("fast"));
  ASSERT_EQ(o.rest().size(), 1u);
  EXPECT_EQ(Options::env_name("weight-decay"), "EDP_WEIGHT_DECAY");
  unsetenv("EDP_BATCH");
  unsetenv("EDP_LR");
}

TEST(Options, UnknownAndMalformedExitWithCode2) {
  Options o("prog", "test");
  o.add("batch", "64", "b");
  const char* bad1[] = {"prog", "--bogus"};
  EXPECT_EXIT(o.parse(2, const_cast<char**>(bad1)), ::testing::ExitedWithCode(2), "unknown option --bogus");
  const char* bad2[] = {"prog", "--batch", "sixty"};
  EXPECT_EXIT(o.parse(3, const_cast<char**>(bad2)), ::testing::ExitedWithCode(2), "expects a number");
}
