// The command-line toolkit: flag > environment > default, the prefix rule, checks on every value
// wherever it came from (numbers, ranges, choices), positional arguments and per-program help.
#include "edp/core/cli.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "edp/core/error.h"

using edp::cli::Options;
using edp::cli::ParseResult;

namespace {
ParseResult parse(Options& o, std::vector<const char*> argv) {
  argv.insert(argv.begin(), "prog");
  return o.try_parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
}
}  // namespace

TEST(Cli, PrecedenceFlagEnvDefault) {
  setenv("EDP_BATCH", "32", 1);
  setenv("EDP_LR", "0.5", 1);
  Options o("prog", "test");
  o.add("batch", "64", "b").add("lr", "0.1", "l").add("epochs", "5", "e").add_flag("fast", "f");
  const char* argv[] = {"prog", "--lr", "0.2", "--fast", "--", "x"};
  o.parse(6, const_cast<char**>(argv));
  EXPECT_EQ(o.i64("batch"), 32);
  EXPECT_EQ(o.source("batch"), "env EDP_BATCH");
  EXPECT_TRUE(o.given("batch"));
  EXPECT_DOUBLE_EQ(o.f64("lr"), 0.2);
  EXPECT_EQ(o.source("lr"), "flag");
  EXPECT_EQ(o.i64("epochs"), 5);
  EXPECT_FALSE(o.given("epochs"));
  EXPECT_TRUE(o.flag("fast"));
  ASSERT_EQ(o.rest().size(), 1u);
  EXPECT_EQ(o.env_name("weight-decay"), "EDP_WEIGHT_DECAY");
  unsetenv("EDP_BATCH");
  unsetenv("EDP_LR");
}

TEST(Cli, UnknownAndMalformedExitWithCode2) {
  Options o("prog", "test");
  o.add("batch", "64", "b");
  const char* bad1[] = {"prog", "--bogus"};
  EXPECT_EXIT(o.parse(2, const_cast<char**>(bad1)), ::testing::ExitedWithCode(2), "unknown option --bogus");
  const char* bad2[] = {"prog", "--batch", "sixty"};
  EXPECT_EXIT(o.parse(3, const_cast<char**>(bad2)), ::testing::ExitedWithCode(2), "expects a number");
}

TEST(Cli, RangesAndChoicesAreCheckedForFlagsAndEnvironment) {
  Options o("tool sub", "t", "EDP_TOOL_");
  o.add("backoff", "5", "seconds").range(0, 3600).add("np", "1", "ranks").int_range(1, 64);
  o.add("kind", "auto", "slot kind").choices({"auto", "cpu", "gpu"});
  ParseResult r = parse(o, {"--backoff", "-1"});
  ASSERT_EQ(r.kind, ParseResult::Error);
  EXPECT_NE(r.message.find("--backoff (flag) must be a number in [0, 3600], got '-1'"), std::string::npos) << r.message;
  EXPECT_EQ(parse(o, {"--np", "2.5"}).kind, ParseResult::Error);
  EXPECT_EQ(parse(o, {"--np", "65"}).kind, ParseResult::Error);
  EXPECT_EQ(parse(o, {"--kind", "tpu"}).kind, ParseResult::Error);
  setenv("EDP_TOOL_KIND", "tpu", 1);
  r = parse(o, {});
  ASSERT_EQ(r.kind, ParseResult::Error);
  EXPECT_NE(r.message.find("(env EDP_TOOL_KIND) must be one of auto, cpu, gpu"), std::string::npos) << r.message;
  unsetenv("EDP_TOOL_KIND");
  r = parse(o, {"--np", "4", "--kind", "cpu", "--backoff", "0.5"});
  ASSERT_EQ(r.kind, ParseResult::Ok) << r.message;
  EXPECT_EQ(o.i64("np"), 4);
  EXPECT_EQ(o.str("kind"), "cpu");
  EXPECT_DOUBLE_EQ(o.f64("backoff"), 0.5);
}

TEST(Cli, PositionalsAndHelp) {
  Options o("tool cancel", "cancels a job", "EDP_TOOL_");
  o.add("root", "", "directory").add_positional("id", "the job");
  EXPECT_EQ(parse(o, {"--root", "r"}).kind, ParseResult::Error);
  ParseResult r = parse(o, {"--root", "r", "j0001"});
  ASSERT_EQ(r.kind, ParseResult::Ok) << r.message;
  EXPECT_EQ(o.positional("id"), "j0001");
  EXPECT_EQ(parse(o, {"--root", "r", "j1", "j2"}).kind, ParseResult::Error);
  EXPECT_EQ(parse(o, {"--help"}).kind, ParseResult::Help);
  const std::string u = o.usage();
  EXPECT_NE(u.find("usage: tool cancel id [options]"), std::string::npos) << u;
  EXPECT_NE(u.find("[EDP_TOOL_ROOT]"), std::string::npos) << u;
}

TEST(Cli, AnOptionIsDefinedOnce) {
  Options o("prog", "t");
  o.add("x", "1", "x");
  EXPECT_THROW(o.add("x", "2", "x again"), edp::Error);
}

// An option given twice on the command line is an error naming it (it once read "option --steps
// needs a value"); the environment and the flag together are not (the flag wins).
TEST(Cli, AnOptionGivenTwiceIsNamed) {
  Options o("prog", "test");
  o.add("steps", "0", "s").add_flag("fast", "f");
  ParseResult r = parse(o, {"--steps", "5", "--steps", "6"});
  EXPECT_EQ(r.kind, ParseResult::Error);
  EXPECT_EQ(r.message, "option --steps is given twice; give it once");
  r = parse(o, {"--steps=5", "--fast", "--fast"});
  EXPECT_EQ(r.message, "option --fast is given twice; give it once");
  setenv("EDP_STEPS", "3", 1);
  r = parse(o, {"--steps", "5"});
  EXPECT_EQ(r.kind, ParseResult::Ok) << r.message;
  EXPECT_EQ(o.i64("steps"), 5);
  unsetenv("EDP_STEPS");
  r = parse(o, {"--steps", "5", "--", "--steps", "6"});  // the program's own arguments after "--"
  EXPECT_EQ(r.kind, ParseResult::Ok) << r.message;
}

// Run settings (how long, how often, what to print) are listed for the job's resume rules;
// --accept-config-change is one of them.
TEST(Cli, RunSettingsAreListed) {
  Options o("prog", "test");
  o.add("lr", "0.1", "l").add("epochs", "1", "e").run_setting().add_accept_config_change();
  const std::vector<std::string> want = {"--epochs", "--accept-config-change"};
  EXPECT_EQ(o.run_settings(), want);
  EXPECT_EQ(parse(o, {"--accept-config-change"}).kind, ParseResult::Ok);
  EXPECT_TRUE(o.flag("accept-config-change"));
}
