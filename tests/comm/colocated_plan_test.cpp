// The colocated communicator's pure half: grouping ranks by (host, GPU), the per-rank step
// program, and chunking. The step programs are executed here over host arrays by a small
// simulator (group barriers as phase boundaries, the leaders' allreduce as a global point), and
// the result must equal the flat reduction exactly (integer-valued data: tolerance 0).
#include <gtest/gtest.h>

#include <map>
#include <numeric>

#include "edp/comm/colocated.h"
#include "edp/core/error.h"

using namespace edp::comm;

namespace {

std::vector<ColocationKey> layout(const std::vector<std::pair<std::string, std::string>>& v) {
  std::vector<ColocationKey> k;
  for (const auto& [h, g] : v) k.push_back({h, g});
  return k;
}

// Runs every rank's step program for one chunk over host arrays and returns each rank's output.
std::vector<std::vector<double>> simulate(const std::vector<ColocationKey>& keys, ReduceOp op,
                                          const std::vector<std::vector<double>>& in) {
  const int n = static_cast<int>(keys.size());
  const size_t len = in[0].size();
  std::vector<ColocatedGroups> g;
  std::vector<std::vector<ColocatedStep>> prog;
  for (int r = 0; r < n; ++r) {
    g.push_back(plan_colocated_groups(keys, r));
    prog.push_back(colocated_allreduce_steps(g[r], op));
  }
  std::vector<std::vector<double>> staging(n, std::vector<double>(len, -1)), out(n, std::vector<double>(len, -1));
  std::vector<size_t> pc(n, 0);
  auto combine = [&](double a, double b) {
    return op == ReduceOp::Max ? std::max(a, b) : op == ReduceOp::Min ? std::min(a, b) : a + b;
  };
  // Advance every rank until it blocks at a group barrier or the leaders' allreduce; then
  // release the barrier of each group whose ranks all wait there, or the allreduce once every
  // leader waits at it. Deadlock (nothing released) fails the test.
  for (int rounds = 0; rounds < 100; ++rounds) {
    for (int r = 0; r < n; ++r) {
      while (pc[r] < prog[r].size()) {
        const ColocatedStep s = prog[r][pc[r]];
        if (s == ColocatedStep::GroupBarrier || s == ColocatedStep::LeadersAllreduce) break;
        const int leader = g[r].leader;
        switch (s) {
          case ColocatedStep::CopyToStaging: staging[r] = in[r]; break;
          case ColocatedStep::LeaderReduce:
            for (size_t i = 0; i < len; ++i) {
              double acc = in[r][i];
              for (int m : g[r].members)
                if (m != r) acc = combine(acc, staging[m][i]);
              staging[r][i] = acc;
            }
            break;
          case ColocatedStep::Scale:
            for (auto& v : staging[r]) v /= g[r].world_size;
            break;
          case ColocatedStep::CopyResultOwn: out[r] = staging[r]; break;
          case ColocatedStep::CopyResultLeader: out[r] = staging[leader]; break;
          default: break;
        }
        ++pc[r];
      }
    }
    bool released = false, all_done = true;
    for (int r = 0; r < n; ++r) all_done = all_done && pc[r] == prog[r].size();
    if (all_done) return out;
    // Group barriers.
    std::map<int, std::vector<int>> waiting;
    for (int r = 0; r < n; ++r)
      if (pc[r] < prog[r].size() && prog[r][pc[r]] == ColocatedStep::GroupBarrier) waiting[g[r].group].push_back(r);
    for (auto& [grp, ranks] : waiting)
      if (static_cast<int>(ranks.size()) == g[ranks[0]].group_size) {
        for (int r : ranks) ++pc[r];
        released = true;
      }
    // The leaders' allreduce.
    std::vector<int> at_ar;
    for (int r = 0; r < n; ++r)
      if (pc[r] < prog[r].size() && prog[r][pc[r]] == ColocatedStep::LeadersAllreduce) at_ar.push_back(r);
    if (!at_ar.empty() && static_cast<int>(at_ar.size()) == g[0].num_groups) {
      std::vector<double> acc = staging[at_ar[0]];
      for (size_t k = 1; k < at_ar.size(); ++k)
        for (size_t i = 0; i < len; ++i) acc[i] = combine(acc[i], staging[at_ar[k]][i]);
      for (int r : at_ar) {
        staging[r] = acc;
        ++pc[r];
      }
      released = true;
    }
    if (!released) {
      ADD_FAILURE() << "the step programs deadlock";
      return out;
    }
  }
  ADD_FAILURE() << "the step programs do not finish";
  return out;
}

}  // namespace

TEST(ColocatedGroups, LeadersAndMembers) {
  // Two hosts; host a has GPUs x (ranks 0,1,4) and y (ranks 2,3); host b has GPU x (5) — the
  // same UUID string on another host is another GPU.
  const auto keys = layout({{"a", "x"}, {"a", "x"}, {"a", "y"}, {"a", "y"}, {"a", "x"}, {"b", "x"}});
  const auto g4 = plan_colocated_groups(keys, 4);
  EXPECT_EQ(g4.num_groups, 3);
  EXPECT_EQ(g4.group, 0);
  EXPECT_EQ(g4.members, (std::vector<int>{0, 1, 4}));
  EXPECT_EQ(g4.group_rank, 2);
  EXPECT_EQ(g4.leader, 0);
  EXPECT_FALSE(g4.is_leader());
  EXPECT_EQ(g4.leader_index, -1);
  EXPECT_EQ(g4.leaders, (std::vector<int>{0, 2, 5}));
  const auto g2 = plan_colocated_groups(keys, 2);
  EXPECT_TRUE(g2.is_leader());
  EXPECT_EQ(g2.leader_index, 1);
  EXPECT_EQ(plan_colocated_groups(keys, 5).group_size, 1);
  // Every rank computes the same groups.
  for (int r = 0; r < 6; ++r) EXPECT_EQ(plan_colocated_groups(keys, r).leaders, g4.leaders);
}

TEST(ColocatedGroups, Errors) {
  EXPECT_THROW(plan_colocated_groups(layout({{"a", ""}}), 0), edp::Error);
  std::vector<std::pair<std::string, std::string>> many(49, {"a", "x"});
  EXPECT_THROW(plan_colocated_groups(layout(many), 0), edp::Error);  // above the MPS client limit
  EXPECT_NO_THROW(plan_colocated_groups(layout(many), 0, 64));
  EXPECT_THROW(plan_colocated_groups(layout({{"a", "x"}}), 1), edp::Error);
}

TEST(ColocatedSteps, ProgramShape) {
  const auto keys = layout({{"a", "x"}, {"a", "x"}, {"a", "y"}});
  auto lead = colocated_allreduce_steps(plan_colocated_groups(keys, 0), ReduceOp::Avg);
  std::vector<std::string> names;
  for (auto s : lead) names.push_back(colocated_step_name(s));
  EXPECT_EQ(names, (std::vector<std::string>{"group-barrier", "leader-reduce", "leaders-allreduce", "scale",
                                             "copy-result-own", "group-barrier"}));
  // One GPU only: no NCCL step; Sum: no scaling.
  const auto one = layout({{"a", "x"}, {"a", "x"}});
  lead = colocated_allreduce_steps(plan_colocated_groups(one, 0), ReduceOp::Sum);
  EXPECT_EQ(std::count(lead.begin(), lead.end(), ColocatedStep::LeadersAllreduce), 0);
  EXPECT_EQ(std::count(lead.begin(), lead.end(), ColocatedStep::Scale), 0);
  // Leaders and members meet at the same number of group barriers.
  const auto member = colocated_allreduce_steps(plan_colocated_groups(keys, 1), ReduceOp::Avg);
  EXPECT_EQ(std::count(member.begin(), member.end(), ColocatedStep::GroupBarrier),
            std::count(lead.begin(), lead.end(), ColocatedStep::GroupBarrier));
}

TEST(ColocatedSteps, SimulatedResultEqualsFlatReduction) {
  // K = 1, 2, 4 ranks per GPU on 1-3 GPUs, uneven groups, every op; integer-valued inputs so the
  // sum and the average by the total rank count are exact.
  const std::vector<std::vector<std::pair<std::string, std::string>>> layouts = {
      {{"h", "g0"}},
      {{"h", "g0"}, {"h", "g0"}},
      {{"h", "g0"}, {"h", "g0"}, {"h", "g0"}, {"h", "g0"}},
      {{"h", "g0"}, {"h", "g0"}, {"h", "g1"}, {"h", "g1"}},
      {{"h", "g0"}, {"h", "g0"}, {"h", "g0"}, {"h", "g0"}, {"h", "g1"}, {"h", "g1"}, {"h", "g1"}, {"h", "g1"}},
      {{"h", "g0"}, {"h", "g0"}, {"h", "g0"}, {"h2", "g0"}, {"h", "g1"}, {"h", "g1"}},  // interleaved, uneven
  };
  for (const auto& l : layouts) {
    const auto keys = layout(l);
    const int n = static_cast<int>(keys.size());
    std::vector<std::vector<double>> in(n, std::vector<double>(17));
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < 17; ++i) in[r][i] = n * ((r * 7 + i * 3) % 11 - 5);  // sums divisible by n
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
      SCOPED_TRACE(testing::Message() << n << " ranks, op " << reduce_op_name(op));
      const auto out = simulate(keys, op, in);
      for (int i = 0; i < 17; ++i) {
        double want = in[0][i];
        for (int r = 1; r < n; ++r)
          want = op == ReduceOp::Max ? std::max(want, in[r][i]) : op == ReduceOp::Min ? std::min(want, in[r][i]) : want + in[r][i];
        if (op == ReduceOp::Avg) want /= n;
        for (int r = 0; r < n; ++r) ASSERT_EQ(out[r][i], want) << "rank " << r << " element " << i;
      }
    }
  }
}

TEST(ColocatedChunks, CoverEveryElementOnce) {
  EXPECT_TRUE(colocated_chunks(0, 4, 64).empty());
  const auto c = colocated_chunks(1000003, 4, 1 << 20);
  int64_t next = 0;
  for (const auto& [off, n] : c) {
    EXPECT_EQ(off, next);
    EXPECT_LE(n * 4, 1 << 20);
    next = off + n;
  }
  EXPECT_EQ(next, 1000003);
  EXPECT_EQ(c.size(), 4u);
  EXPECT_THROW(colocated_chunks(10, 8, 4), edp::Error);
}
