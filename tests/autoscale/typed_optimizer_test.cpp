// The optimizer over several GPU types (edp/autoscale/typed_optimizer.h) against brute force on
// small random instances, against the one-type solver where there is one type, and its rules:
// a job spans types only when that is worth more, ties go to the current option, the jobs that
// must run are kept or refused by name. Values are random doubles: the DP and brute force add a
// solution's values in the same job order, so equal solutions give equal bits; a different
// solution of equal value may differ in the last bits, hence 1e-12 relative.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "edp/autoscale/optimizer.h"
#include "edp/autoscale/typed_optimizer.h"
#include "edp/core/error.h"
#include "edp/core/random.h"

namespace edp::autoscale {
namespace {

// K types of capacity up to max_cap; J jobs with options on one type (most) or spanning two.
struct Instance {
  std::vector<TypedJob> jobs;
  std::vector<int> cap;
};

Instance random_instance(Rng& rng, int K, int J, int max_cap, bool spanning, bool must_run) {
  Instance in;
  for (int t = 0; t < K; ++t) in.cap.push_back(1 + static_cast<int>(rng.next_u64() % uint64_t(max_cap)));
  for (int j = 0; j < J; ++j) {
    TypedJob job;
    job.may_wait = !(must_run && rng.next_u64() % 4 == 0);
    const int n = 1 + static_cast<int>(rng.next_u64() % 5);
    for (int i = 0; i < n; ++i) {
      TypedOption o;
      o.gpus.assign(static_cast<size_t>(K), 0);
      const size_t t = rng.next_u64() % uint64_t(K);
      o.gpus[t] = 1 + static_cast<int>(rng.next_u64() % uint64_t(max_cap));
      if (spanning && K > 1 && rng.next_u64() % 4 == 0) o.gpus[(t + 1) % size_t(K)] = 1;
      o.batch = 32 * (1 + i);
      o.value = rng.uniform() * o.gpus[t];
      o.tag = 100 * j + i;
      job.options.push_back(o);
    }
    if (!job.may_wait) {  // a running job: small enough to fit alone
      job.options[0].gpus.assign(static_cast<size_t>(K), 0);
      job.options[0].gpus[0] = 1;
      job.options[0].current = true;
    }
    in.jobs.push_back(job);
  }
  return in;
}

void expect_feasible(const Instance& in, const TypedSolution& s) {
  ASSERT_EQ(s.choices.size(), in.jobs.size());
  std::vector<int> used(in.cap.size(), 0);
  double sum = 0;
  for (size_t j = 0; j < in.jobs.size(); ++j) {
    const TypedChoice& c = s.choices[j];
    if (c.option < 0) {
      EXPECT_TRUE(in.jobs[j].may_wait) << "job #" << j << " must run but waits";
      continue;
    }
    const TypedOption& o = in.jobs[j].options[static_cast<size_t>(c.option)];
    EXPECT_EQ(c.gpus, o.gpus);
    EXPECT_EQ(c.tag, o.tag);
    sum += o.value;
    for (size_t t = 0; t < used.size(); ++t) used[t] += o.gpus[t];
  }
  for (size_t t = 0; t < used.size(); ++t) EXPECT_LE(used[t], in.cap[t]) << "type " << t;
  EXPECT_EQ(used, s.gpus_used);
  EXPECT_NEAR(sum, s.objective, 1e-12 * std::max(1.0, sum));
}

TEST(TypedOptimizer, ExactMatchesBruteForce) {
  Rng rng(2024);
  int tried = 0;
  for (int K : {1, 2, 3})
    for (int round = 0; round < 150; ++round) {
      const Instance in = random_instance(rng, K, 2 + round % 4, 4, true, true);
      TypedSolution brute;
      try {
        brute = solve_typed_brute_force(in.jobs, in.cap);
      } catch (const Error&) {
        EXPECT_THROW(solve_typed(in.jobs, in.cap, "exact"), Error);  // both refuse
        EXPECT_THROW(solve_typed(in.jobs, in.cap, "exact-dense"), Error);
        continue;
      }
      SCOPED_TRACE(testing::Message() << "K=" << K << " round " << round);
      for (const std::string m : {"exact", "exact-dense"}) {
        const TypedSolution s = solve_typed(in.jobs, in.cap, m);
        EXPECT_TRUE(s.exact) << m;
        EXPECT_EQ(s.method, "exact") << m;
        EXPECT_NEAR(s.objective, brute.objective, 1e-12 * std::max(1.0, brute.objective)) << m;
        expect_feasible(in, s);
      }
      ++tried;
    }
  EXPECT_GT(tried, 300);
}

TEST(TypedOptimizer, DecomposedIsFeasibleAndBoundsTheOptimum) {
  Rng rng(77);
  int optimal = 0, tried = 0;
  double gap = 0;
  for (int round = 0; round < 200; ++round) {
    const Instance in = random_instance(rng, 2 + round % 2, 3 + round % 4, 5, false, false);
    const TypedSolution brute = solve_typed_brute_force(in.jobs, in.cap);
    const TypedSolution s = solve_typed(in.jobs, in.cap, "decomposed");
    SCOPED_TRACE(testing::Message() << "round " << round);
    EXPECT_EQ(s.method, "decomposed");
    expect_feasible(in, s);
    EXPECT_LE(s.objective, brute.objective * (1 + 1e-12) + 1e-12);
    EXPECT_GE(s.bound, brute.objective * (1 - 1e-9) - 1e-9);  // a true upper bound
    if (s.exact) {
      EXPECT_NEAR(s.objective, brute.objective, 1e-9 * std::max(1.0, brute.objective));
    }
    if (s.objective >= brute.objective * (1 - 1e-12)) ++optimal;
    gap += (brute.objective - s.objective) / std::max(1e-9, brute.objective);
    ++tried;
  }
  // Not a guarantee of the method (the decomposition is not exact), a fence for this seed: when
  // written, 191 of 200 instances were solved to optimality and the mean loss was 0.34 %.
  EXPECT_GE(optimal, tried * 9 / 10);
  EXPECT_LT(gap / tried, 0.01);
}

// The exact method prunes its tables by a bound and a plan's value (docs/autoscaler.md, "Several
// GPU types"). That must change nothing: the DP without pruning ("exact-dense") gives the same
// choices and the same bits, on instances too large for brute force, with ties (integer values:
// the readback then decides) and current options (which it prefers), two to four types.
TEST(TypedOptimizer, PruningChangesNothing) {
  Rng rng(99);
  int tried = 0, pruned = 0;
  for (int round = 0; round < 150; ++round) {
    const int K = 2 + round % 3;
    Instance in = random_instance(rng, K, 10 + round % 30, 10, round % 4 == 0, round % 3 == 0);
    for (TypedJob& j : in.jobs) {
      if (round % 2)
        for (TypedOption& o : j.options) o.value = std::round(2 * o.value);
      if (j.may_wait && rng.next_u64() % 3 == 0) j.options[rng.next_u64() % j.options.size()].current = true;
    }
    SCOPED_TRACE(testing::Message() << "round " << round << ", " << in.jobs.size() << " jobs, " << K << " types");
    TypedSolution dense;
    try {
      dense = solve_typed(in.jobs, in.cap, "exact-dense");
    } catch (const Error&) {
      EXPECT_THROW(solve_typed(in.jobs, in.cap, "exact"), Error);  // both refuse
      continue;
    }
    const TypedSolution s = solve_typed(in.jobs, in.cap, "exact");
    EXPECT_EQ(s.objective, dense.objective);
    for (size_t j = 0; j < in.jobs.size(); ++j) EXPECT_EQ(s.choices[j].option, dense.choices[j].option) << "job #" << j;
    expect_feasible(in, s);
    pruned += s.cells < dense.cells;
    ++tried;
  }
  EXPECT_GT(tried, 120);
  EXPECT_GT(pruned, tried * 3 / 4);  // and it does prune
}

TEST(TypedOptimizer, OneTypeIsTheOneTypeSolver) {
  Rng rng(5);
  for (int round = 0; round < 100; ++round) {
    const Instance in = random_instance(rng, 1, 6, 16, false, false);
    std::vector<DpJob> dp;
    for (const TypedJob& j : in.jobs) {
      DpJob d;
      for (const TypedOption& o : j.options) d.options.push_back(Option{o.gpus[0], o.batch, o.value, o.tag});
      dp.push_back(d);
    }
    const Solution one = solve(dp, in.cap[0]);
    const TypedSolution s = solve_typed(in.jobs, in.cap);
    EXPECT_NEAR(s.objective, one.objective, 1e-12 * std::max(1.0, one.objective)) << "round " << round;
  }
}

TypedOption opt(std::vector<int> gpus, double value, int tag, bool current = false) {
  TypedOption o;
  o.gpus = std::move(gpus);
  o.value = value;
  o.tag = tag;
  o.current = current;
  return o;
}

TEST(TypedOptimizer, SpansTypesOnlyWhenThatIsWorthMore) {
  // Two GPUs of type 0 are worth 1.0; one of each type 0.9.
  TypedJob a;
  a.options = {opt({2, 0}, 1.0, 1), opt({1, 1}, 0.9, 2)};
  EXPECT_EQ(solve_typed({a}, {2, 1}).choices[0].tag, 1);  // both fit: the one type
  EXPECT_EQ(solve_typed({a}, {1, 1}).choices[0].tag, 2);  // only the span fits: it pays
  a.options[1].value = 1.1;
  EXPECT_EQ(solve_typed({a}, {2, 1}).choices[0].tag, 2);  // the span is worth more
}

TEST(TypedOptimizer, TiesGoToTheCurrentOption) {
  TypedJob a;
  a.options = {opt({1, 0}, 1.0, 1), opt({0, 1}, 1.0, 2, true)};
  EXPECT_EQ(solve_typed({a}, {1, 1}).choices[0].tag, 2);
  a.options[0].current = true;
  a.options[1].current = false;
  EXPECT_EQ(solve_typed({a}, {1, 1}).choices[0].tag, 1);
}

TEST(TypedOptimizer, TheJobsThatMustRunAreKeptOrRefused) {
  TypedJob run, other;
  run.may_wait = false;
  run.options = {opt({0, 2}, 0.1, 1, true)};
  other.options = {opt({0, 2}, 5.0, 2), opt({2, 0}, 1.0, 3)};
  for (const std::string m : {"exact", "decomposed"}) {
    const TypedSolution s = solve_typed({run, other}, {2, 2}, m);
    EXPECT_EQ(s.choices[0].tag, 1) << m;
    EXPECT_EQ(s.choices[1].tag, 3) << m;  // the other job goes to the other type
    try {
      solve_typed({run, run}, {2, 2}, m);
      FAIL() << m << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("job #0 job #1 must run"), std::string::npos) << e.what();
    }
  }
}

TEST(TypedOptimizer, MalformedOptionsAreNamed) {
  TypedJob a;
  a.options = {opt({1}, 1.0, 1)};
  try {
    solve_typed({a}, {1, 1});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("job #0 option #0 gives GPUs of 1 types, the cluster has 2"),
              std::string::npos)
        << e.what();
  }
  a.options = {opt({0, 0}, 1.0, 1)};
  EXPECT_THROW(solve_typed({a}, {1, 1}), Error);
  EXPECT_THROW(solve_typed({a}, {}), Error);
}

}  // namespace
}  // namespace edp::autoscale
