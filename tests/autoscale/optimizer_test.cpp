// The DP optimizer against exhaustive enumeration on thousands of random small instances, plus
// its contract: feasibility of what it returns, ties toward the current allocation, jobs that
// must run, and make_problem's validation of the `plan` input.
#include <gtest/gtest.h>

#include <cmath>

#include "edp/autoscale/optimizer.h"
#include "edp/core/error.h"
#include "edp/core/random.h"

using namespace edp::autoscale;

namespace {

// Random instance: values either small integers (sums are exact, so objectives must match
// bit for bit) or arbitrary doubles (sums in a different order may differ in the last bits).
std::vector<DpJob> random_instance(edp::Rng& rng, int capacity, bool integer_values) {
  const int J = 1 + static_cast<int>(rng.below(6));
  std::vector<DpJob> jobs(J);
  for (auto& j : jobs) {
    const int K = 1 + static_cast<int>(rng.below(6));
    for (int k = 0; k < K; ++k) {
      Option o;
      o.gpus = 1 + static_cast<int>(rng.below(static_cast<uint64_t>(capacity + 3)));  // some exceed capacity
      o.batch = 32 * (1 + static_cast<int>(rng.below(4)));
      o.value = integer_values ? static_cast<double>(rng.below(10)) : rng.uniform(0.0, 5.0);
      j.options.push_back(o);
    }
    j.may_wait = rng.uniform() < 0.8;
    if (rng.uniform() < 0.5 && !j.options.empty()) {
      const Option& c = j.options[rng.below(j.options.size())];
      j.current_gpus = c.gpus;
      j.current_batch = c.batch;
    }
  }
  return jobs;
}

bool feasible_exists(const std::vector<DpJob>& jobs, int capacity) {
  int need = 0;
  for (const auto& j : jobs) {
    if (j.may_wait) continue;
    int m = capacity + 1;
    for (const auto& o : j.options) m = std::min(m, o.gpus);
    need += m;
  }
  return need <= capacity;
}

// Checks that `s` is a valid assignment for `jobs` whose values sum to s.objective.
void expect_feasible(const std::vector<DpJob>& jobs, int capacity, const Solution& s) {
  ASSERT_EQ(s.choices.size(), jobs.size());
  int used = 0;
  double sum = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const Choice& c = s.choices[j];
    used += c.gpus;
    sum += c.value;
    if (c.gpus == 0) {
      EXPECT_TRUE(jobs[j].may_wait) << "job " << j << " must run but was given 0 GPUs";
      EXPECT_EQ(c.value, 0.0);
      continue;
    }
    bool found = false;
    for (const auto& o : jobs[j].options) found |= o.gpus == c.gpus && o.batch == c.batch && o.value == c.value;
    EXPECT_TRUE(found) << "job " << j << " got (" << c.gpus << "," << c.batch << ") which is not one of its options";
  }
  EXPECT_LE(used, capacity);
  EXPECT_EQ(used, s.gpus_used);
  EXPECT_NEAR(sum, s.objective, 1e-9 * std::max(1.0, std::abs(sum)));
}

}  // namespace

TEST(AutoscaleOptimizer, MatchesBruteForceOnRandomSmallInstances) {
  edp::Rng rng(20240601);
  int solved = 0, infeasible = 0;
  for (int it = 0; it < 4000; ++it) {
    const int capacity = static_cast<int>(rng.below(17));  // 0..16 GPUs
    const bool integer_values = it % 2 == 0;
    const auto jobs = random_instance(rng, capacity, integer_values);
    if (!feasible_exists(jobs, capacity)) {
      EXPECT_THROW(solve(jobs, capacity), edp::Error) << "instance " << it;
      EXPECT_THROW(solve_brute_force(jobs, capacity), edp::Error);
      ++infeasible;
      continue;
    }
    const Solution dp = solve(jobs, capacity);
    const Solution bf = solve_brute_force(jobs, capacity);
    if (integer_values)
      ASSERT_EQ(dp.objective, bf.objective) << "instance " << it;  // exact: integer sums
    else
      ASSERT_NEAR(dp.objective, bf.objective, 1e-12 * std::max(1.0, bf.objective)) << "instance " << it;
    expect_feasible(jobs, capacity, dp);
    ++solved;
  }
  // The generator must exercise both branches, or the test proves little.
  EXPECT_GT(solved, 3000);
  EXPECT_GT(infeasible, 20);
}

TEST(AutoscaleOptimizer, TiesGoToTheCurrentAllocation) {
  // Two jobs, 4 GPUs; either job at 4 GPUs is worth 2, both at 2 GPUs also 2 in total.
  std::vector<DpJob> jobs(2);
  for (auto& j : jobs) j.options = {{2, 64, 1.0}, {4, 64, 2.0}};
  jobs[1].current_gpus = 4;
  jobs[1].current_batch = 64;
  Solution s = solve(jobs, 4);
  EXPECT_EQ(s.objective, 2.0);
  EXPECT_EQ(s.choices[1].gpus, 4);
  EXPECT_EQ(s.choices[0].gpus, 0);
  jobs[1].current_gpus = 2;
  jobs[1].current_batch = 64;
  jobs[0].current_gpus = 2;
  jobs[0].current_batch = 64;
  s = solve(jobs, 4);
  EXPECT_EQ(s.choices[0].gpus, 2);
  EXPECT_EQ(s.choices[1].gpus, 2);
  // Same GPU count, equal value, different batch: the current batch is kept.
  std::vector<DpJob> one(1);
  one[0].options = {{2, 64, 1.5}, {2, 128, 1.5}};
  one[0].current_gpus = 2;
  one[0].current_batch = 128;
  EXPECT_EQ(solve(one, 2).choices[0].batch, 128);
  one[0].current_batch = 64;
  EXPECT_EQ(solve(one, 2).choices[0].batch, 64);
}

TEST(AutoscaleOptimizer, MustRunJobsGetTheirMinimumEvenAtALoss) {
  std::vector<DpJob> jobs(2);
  jobs[0].options = {{3, 30, 0.1}};
  jobs[0].may_wait = false;
  jobs[1].options = {{4, 32, 10.0}};
  const Solution s = solve(jobs, 4);  // job 1 alone would be worth 100x more
  EXPECT_EQ(s.choices[0].gpus, 3);
  EXPECT_EQ(s.choices[1].gpus, 0);
  EXPECT_DOUBLE_EQ(s.objective, 0.1);
  jobs[1].may_wait = false;
  EXPECT_THROW(solve(jobs, 4), edp::Error);
}

TEST(AutoscaleOptimizer, LargeInstanceIsFeasibleAndNotWorseThanGreedy) {
  // 300 jobs x 512 GPUs: no brute force possible; check feasibility and that the optimum is at
  // least as good as two simple heuristics (everyone at its best value per GPU, first fit).
  edp::Rng rng(7);
  std::vector<DpJob> jobs(300);
  for (auto& j : jobs)
    for (int g = 1; g <= 16; g *= 2) j.options.push_back({g, 32 * g, std::pow(g, rng.uniform(0.5, 0.95))});
  const int cap = 512;
  const Solution s = solve(jobs, cap);
  expect_feasible(jobs, cap, s);
  for (int g = 1; g <= 16; g *= 2) {
    double greedy = 0;
    int left = cap;
    for (const auto& j : jobs)
      for (const auto& o : j.options)
        if (o.gpus == g && left >= g) {
          greedy += o.value;
          left -= g;
        }
    EXPECT_GE(s.objective, greedy - 1e-9) << "all jobs at " << g << " GPUs";
  }
}

namespace {
TableJob good_job(const std::string& id) {
  TableJob j;
  j.id = id;
  j.min_gpus = 0;
  j.max_gpus = 4;
  j.max_batch_per_gpu = 64;
  j.ref_gpus = 1;
  j.ref_batch = 32;
  j.throughput = {{1, 32, 100}, {2, 64, 190}, {4, 128, 350}, {4, 512, 500}, {3, 64, 200}};
  return j;
}
std::string error_of(const TableRequest& r) {
  try {
    make_problem(r);
  } catch (const edp::DataError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(AutoscaleOptimizer, MakeProblemAppliesTheContractsFeasibilityRules) {
  TableRequest r;
  r.gpus = 8;
  r.jobs = {good_job("a")};
  const auto p = make_problem(r);
  ASSERT_EQ(p.size(), 1u);
  // (4,512): 128 per GPU > 64; (3,64): not divisible. Left: (1,32), (2,64), (4,128).
  ASSERT_EQ(p[0].options.size(), 3u);
  EXPECT_DOUBLE_EQ(p[0].options[0].value, 1.0);
  EXPECT_DOUBLE_EQ(p[0].options[1].value, 1.9);
  EXPECT_DOUBLE_EQ(p[0].options[2].value, 3.5);
  r.jobs[0].weight = 2;
  r.jobs[0].current_gpus = 2;
  r.jobs[0].current_batch = 64;
  r.hysteresis = 0.1;
  const auto q = make_problem(r);
  EXPECT_DOUBLE_EQ(q[0].options[1].value, 3.8);        // current: no penalty
  EXPECT_DOUBLE_EQ(q[0].options[2].value, 7.0 * 0.9);  // others lose 10%
}

TEST(AutoscaleOptimizer, MakeProblemRejectsBadInputNamingJobAndField) {
  auto with = [](auto edit) {
    TableRequest r;
    r.gpus = 8;
    r.jobs = {good_job("a"), good_job("b")};
    edit(r);
    return error_of(r);
  };
  EXPECT_NE(with([](TableRequest& r) { r.gpus = -1; }).find("'gpus'"), std::string::npos);
  std::string e = with([](TableRequest& r) { r.jobs[1].ref_batch = 48; });
  EXPECT_NE(e.find("job 'b'"), std::string::npos) << e;
  EXPECT_NE(e.find("'ref'"), std::string::npos) << e;
  e = with([](TableRequest& r) { r.jobs[0].throughput[2].samples_per_s = -3; });
  EXPECT_NE(e.find("throughput[2].samples_per_s"), std::string::npos) << e;
  e = with([](TableRequest& r) { r.jobs[1].min_gpus = -1; });
  EXPECT_NE(e.find("job 'b'"), std::string::npos) << e;
  EXPECT_NE(e.find("min_gpus"), std::string::npos) << e;
  e = with([](TableRequest& r) { r.jobs[1].id = "a"; });
  EXPECT_NE(e.find("duplicate id"), std::string::npos) << e;
  e = with([](TableRequest& r) { r.jobs[0].throughput.push_back({2, 64, 1}); });
  EXPECT_NE(e.find("duplicate row"), std::string::npos) << e;
  e = with([](TableRequest& r) { r.jobs[0].max_gpus = 0; });
  EXPECT_NE(e.find("max_gpus"), std::string::npos) << e;
  // Non-preemptible jobs that cannot all fit: 3 jobs x min 4 GPUs on 8.
  e = with([](TableRequest& r) {
    r.jobs.push_back(good_job("c"));
    for (auto& j : r.jobs) j.min_gpus = 4;
  });
  EXPECT_NE(e.find("non-preemptible"), std::string::npos) << e;
  EXPECT_NE(e.find("'c'"), std::string::npos) << e;
  // A job that must run but has no feasible row at all.
  e = with([](TableRequest& r) {
    r.jobs[1].min_gpus = 1;
    r.jobs[1].max_batch_per_gpu = 1;
  });
  EXPECT_NE(e.find("job 'b'"), std::string::npos) << e;
  EXPECT_EQ(with([](TableRequest&) {}), "");
}
