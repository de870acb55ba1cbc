// The divergence guard's rule alone (src/elastic/divergence_guard.h), on window means chosen here;
// tests/elastic/job_guard_test.cpp runs it inside a job under mpirun. Every mean is a small binary
// fraction or integer, so the level's update 0.9 l + 0.1 m is checked to the last bit where it
// is exact in double and with a relative 1e-15 (one rounding of each product) where it is not.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "edp/elastic/job.h"
#include "elastic/divergence_guard.h"

namespace edp::elastic {
namespace {

using W = DivergenceGuard::Window;

// Feeds windows of the given means (one sample a step, kGuardWindow steps each), from step 1;
// returns each window's verdict.
std::vector<W> feed(DivergenceGuard& g, const std::vector<double>& means, int64_t* step) {
  std::vector<W> out;
  for (double m : means) {
    for (int64_t i = 0; i < kGuardWindow; ++i) g.add(m, 1.0);
    *step += kGuardWindow;
    const auto v = g.local();
    out.push_back(g.end_window(*step, v[0], v[1]));
  }
  return out;
}

TEST(DivergenceGuard, TheFirstWindowSetsTheLevelAndGoodWindowsMoveIt) {
  DivergenceGuard g(2.0);
  int64_t step = 0;
  EXPECT_EQ(feed(g, {4.0}, &step), std::vector<W>{W::kFirst});
  EXPECT_EQ(g.level(), 4.0);
  EXPECT_EQ(g.good_step(), kGuardWindow);
  EXPECT_EQ(feed(g, {2.0}, &step), std::vector<W>{W::kGood});
  EXPECT_NEAR(g.level(), 0.9 * 4.0 + 0.1 * 2.0, 1e-15 * 4.0);
  EXPECT_EQ(g.good_step(), 2 * kGuardWindow);
  EXPECT_EQ(g.last_mean(), 2.0);
}

TEST(DivergenceGuard, PatienceWindowsAboveTheLimitDiverge) {
  DivergenceGuard g(2.0);
  int64_t step = 0;
  feed(g, {1.0, 1.0}, &step);
  const int64_t good = step;
  std::vector<W> want{W::kDoubtBegins};
  for (int i = 1; i + 1 < kGuardPatience; ++i) want.push_back(W::kDoubt);
  want.push_back(W::kDiverged);
  EXPECT_EQ(feed(g, std::vector<double>(static_cast<size_t>(kGuardPatience), 3.0), &step), want);
  EXPECT_EQ(g.good_step(), good);  // the last good window, whose checkpoint the job keeps
  const std::string what = g.diverged_what(step);
  EXPECT_NE(what.find("more than 2 times its running level 1"), std::string::npos) << what;
  EXPECT_NE(what.find("since step " + std::to_string(good + 1)), std::string::npos) << what;
}

TEST(DivergenceGuard, ARiseThatEndsBeforeThePatienceIsForgiven) {
  DivergenceGuard g(2.0);
  int64_t step = 0;
  std::vector<double> means{1.0};
  for (int i = 0; i + 1 < kGuardPatience; ++i) means.push_back(2.5);  // above 2x, not above 4x
  means.push_back(1.5);  // below the limit: a milder rise may come back slowly
  const std::vector<W> got = feed(g, means, &step);
  EXPECT_EQ(got.back(), W::kGood);
  EXPECT_EQ(g.good_step(), step);
  // The doubt starts over: patience - 1 more windows above the limit do not stop the job.
  for (W w : feed(g, std::vector<double>(static_cast<size_t>(kGuardPatience - 1), 3.0), &step))
    EXPECT_NE(w, W::kDiverged);
}

TEST(DivergenceGuard, ABlowUpThatDoesNotComeBackDiverges) {
  DivergenceGuard g(2.0);
  int64_t step = 0;
  feed(g, {1.0}, &step);
  // Above factor² (4): a blow-up. Then under the limit (2) but above kGuardRecovered (1.2): not back.
  std::vector<double> means{8.0};
  for (int i = 1; i < kGuardPatience; ++i) means.push_back(1.5);
  const std::vector<W> got = feed(g, means, &step);
  EXPECT_EQ(got.front(), W::kDoubtBegins);
  EXPECT_EQ(got.back(), W::kDiverged);
  const std::string what = g.diverged_what(step);
  EXPECT_NE(what.find("rose to 8"), std::string::npos) << what;
  EXPECT_NE(what.find("did not come back"), std::string::npos) << what;
}

TEST(DivergenceGuard, ABlowUpThatComesBackIsForgiven) {
  DivergenceGuard g(2.0);
  int64_t step = 0;
  feed(g, {1.0}, &step);
  const std::vector<W> got = feed(g, {8.0, 1.1}, &step);  // back within 1.2x of the level
  EXPECT_EQ(got, (std::vector<W>{W::kDoubtBegins, W::kGood}));
}

TEST(DivergenceGuard, FactorZeroFollowsTheLevelAndNeverDoubts) {
  DivergenceGuard g(0.0);
  int64_t step = 0;
  for (W w : feed(g, {1.0, 100.0, 1e6, 1e9}, &step)) EXPECT_TRUE(w == W::kFirst || w == W::kGood);
  EXPECT_GT(g.level(), 1.0);
  g.add(1e12, 1.0);
  EXPECT_EQ(g.judge_partial(step + 1, g.local(), "the end of the training"), "");
}

TEST(DivergenceGuard, AnEmptyWindowJudgesNothing) {
  DivergenceGuard g(2.0);
  EXPECT_EQ(g.end_window(kGuardWindow, 0.0, 0.0), W::kEmpty);
  EXPECT_LT(g.level(), 0);
}

TEST(DivergenceGuard, TheLastStepsAreJudgedAgainstTheLevel) {
  DivergenceGuard g(2.0);
  int64_t step = 0;
  feed(g, {1.0}, &step);
  for (int i = 0; i < 3; ++i) g.add(5.0, 1.0);  // 3 steps after the last full window
  const std::string what = g.judge_partial(step + 3, g.local(), "the stop");
  EXPECT_NE(what.find("steps " + std::to_string(step + 1) + "-" + std::to_string(step + 3)), std::string::npos) << what;
  EXPECT_NE(what.find("its running level 1"), std::string::npos) << what;
  DivergenceGuard fine(2.0);
  step = 0;
  feed(fine, {1.0}, &step);
  fine.add(1.5, 1.0);
  EXPECT_EQ(fine.judge_partial(step + 1, fine.local(), "the stop"), "");
}

TEST(DivergenceGuard, AJobShorterThanAWindowIsJudgedAgainstItsFirstStep) {
  DivergenceGuard g(2.0);
  g.add(2.0, 2.0);  // the first step: mean 1
  g.add(9.0, 1.0);
  g.add(9.0, 1.0);  // mean over the three steps: 20 / 4 = 5 > 2 x 1
  const std::string what = g.judge_partial(3, g.local(), "the end of the training");
  EXPECT_NE(what.find("the loss of the job's first step, 1"), std::string::npos) << what;
  DivergenceGuard fine(2.0);
  fine.add(2.0, 2.0);
  fine.add(2.0, 2.0);
  EXPECT_EQ(fine.judge_partial(2, fine.local(), "the end of the training"), "");
}

TEST(DivergenceGuard, ALastWindowInDoubtIsJudgedAtTheEnd) {
  // No step after the last full window, but that window was in doubt: it is judged alone.
  DivergenceGuard g(2.0);
  int64_t step = 0;
  feed(g, {1.0, 3.0}, &step);
  const std::string what = g.judge_partial(step, g.local(), "the end of the training");
  EXPECT_NE(what.find("steps " + std::to_string(step - kGuardWindow + 1) + "-" + std::to_string(step)),
            std::string::npos)
      << what;
}

TEST(DivergenceGuard, AResumeStartsTheWindowsAfterIt) {
  DivergenceGuard g(2.0);
  g.resume_at(40);
  EXPECT_EQ(g.good_step(), 40);
  g.add(1.0, 1.0);
  g.add(9.0, 1.0);  // judged against the first step's loss 1: steps 41-42
  const std::string what = g.judge_partial(42, g.local(), "the stop");
  EXPECT_NE(what.find("steps 41-42"), std::string::npos) << what;
}

}  // namespace
}  // namespace edp::elastic
