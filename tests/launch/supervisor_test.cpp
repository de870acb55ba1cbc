// edprun's supervisor (src/launch/supervisor.h): what edprun does after each mpirun — finish,
// restart at a committed rescale's size, restart after a crash or a stall at the job's current
// size or without lost hosts — with bounded restarts and a doubling back-off. Pure: the "hosts"
// are a fit function the test gives.
#include "launch/supervisor.h"

#include <gtest/gtest.h>

#include <stdexcept>

using namespace edp::launch;

namespace {

RunEnd ended(int code, int workers = 2) {
  RunEnd e;
  e.code = code;
  e.workers = workers;
  e.np = 2;
  return e;
}

bool says(const Step& s, const std::string& part) {
  for (const auto& l : s.say)
    if (l.find(part) != std::string::npos) return true;
  return false;
}

Supervisor::Fit no_hosts_lost() {
  return [](const std::vector<std::string>&, int) -> int { throw std::logic_error("fit asked without a lost host"); };
}

}  // namespace

TEST(Supervisor, SuccessAndAStopAskedForFinish) {
  Supervisor sup({2, 5, 0, false}, no_hosts_lost());
  Step s = sup.after(ended(0));
  EXPECT_EQ(s.kind, Step::Finish);
  EXPECT_EQ(s.code, 0);
  EXPECT_TRUE(s.say.empty());
  s = sup.after(ended(78));
  EXPECT_EQ(s.kind, Step::Finish);
  EXPECT_EQ(s.code, 78);
  EXPECT_TRUE(says(s, "the job stopped as its control file asked (exit 78)"));
  EXPECT_EQ(sup.restarts(), 0);
}

TEST(Supervisor, ARescaleRestartsAtTheCommittedSizeWithoutCountingARestart) {
  Supervisor sup({1, 5, 0, false}, no_hosts_lost());
  RunEnd e = ended(75);
  e.rescale_record = true;
  e.rescale_workers = 4;
  Step s = sup.after(e);
  EXPECT_EQ(s.kind, Step::Rescale);
  EXPECT_EQ(s.np, 4);
  EXPECT_EQ(sup.restarts(), 0);
  // The hosts cannot run 4: a crash, restarted at the job's size (its one restart).
  s = sup.cannot(s, e, "4 ranks do not fit");
  EXPECT_EQ(s.kind, Step::Restart);
  EXPECT_EQ(s.np, 2);
  EXPECT_EQ(s.failure, "the job stopped for a rescale to a size the hosts cannot run (exit 75)");
  EXPECT_TRUE(says(s, "cannot be started at its new size: 4 ranks do not fit; treated as a crash"));
  // Without a record rank 0 should have written: a bug of the job, treated as a crash.
  e.rescale_record = false;
  e.rescale_error = "no such file";
  s = sup.after(e);
  EXPECT_EQ(s.kind, Step::Finish) << "its one restart is spent";
  EXPECT_TRUE(says(s, "at the size it committed: no such file"));
  EXPECT_TRUE(says(s, "without a usable rescale file (exit 75); no restart left (--max-restarts 1)"));
}

TEST(Supervisor, CrashesRestartAtTheCurrentSizeWithADoublingBackoffUpToTheLimit) {
  Supervisor sup({2, 5, 0, false}, no_hosts_lost());
  Step s = sup.after(ended(3, 1));  // an in-place shrink made it 1 worker
  EXPECT_EQ(s.kind, Step::Restart);
  EXPECT_EQ(s.np, 1);
  EXPECT_EQ(s.restart, 1);
  EXPECT_EQ(s.wait_s, 5);
  EXPECT_EQ(s.failure, "the job failed (exit code 3)");
  EXPECT_FALSE(s.stall);
  s = sup.after(ended(76));
  EXPECT_EQ(s.restart, 2);
  EXPECT_EQ(s.wait_s, 10);
  EXPECT_TRUE(s.stall);
  s = sup.after(ended(3));
  EXPECT_EQ(s.kind, Step::Finish);
  EXPECT_EQ(s.code, 3);
  EXPECT_TRUE(says(s, "the job failed (exit code 3); no restart left (--max-restarts 2)"));
  // No restarts allowed: a crash ends quietly, a stall says why.
  Supervisor none({0, 5, 0, false}, no_hosts_lost());
  EXPECT_TRUE(none.after(ended(3)).say.empty());
  EXPECT_TRUE(says(none.after(ended(76)), "the job stalled (a collective timed out, exit 76); no restart left"));
  // The size cannot be planned: it restarts at the size it ran at, saying so.
  Supervisor one({1, 0, 0, false}, no_hosts_lost());
  s = one.after(ended(3, 3));
  s = one.cannot(s, ended(3, 3), "3 ranks do not fit");
  EXPECT_EQ(s.kind, Step::Restart);
  EXPECT_EQ(s.np, 0);
  EXPECT_TRUE(says(s, "cannot restart at the job's current size of 3 worker(s) (3 ranks do not fit); restarting at 2"));
}

TEST(Supervisor, LostHostsAreLeftOutDownToMinNp) {
  std::vector<std::vector<std::string>> asked;
  int capacity_left = 2;
  Supervisor sup({2, 1, 2, true}, [&](const std::vector<std::string>& lost, int want) {
    asked.push_back(lost);
    return std::min(want, capacity_left);
  });
  RunEnd e = ended(76, 3);
  e.lost_hosts = {"h3"};
  e.silent_ranks = {2};
  Step s = sup.after(e);
  EXPECT_EQ(s.kind, Step::Restart);
  EXPECT_EQ(s.np, 2);
  EXPECT_EQ(s.without, std::vector<std::string>{"h3"});
  EXPECT_TRUE(s.stall);
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], std::vector<std::string>{"h3"});
  // A second host lost: every lost host is left out; 1 rank is below --min-np 2.
  capacity_left = 1;
  e.lost_hosts = {"h2"};
  e.silent_ranks = {1};
  e.workers = 2;
  s = sup.after(e);
  EXPECT_EQ(s.kind, Step::Finish);
  EXPECT_EQ(asked.back(), (std::vector<std::string>{"h3", "h2"}));
  EXPECT_TRUE(says(s, "host(s) h2 lost (rank(s) 1 did not answer); the other host(s) take 1 of the job's 2 rank(s), "
                      "fewer than --min-np 2 allows; not restarting"));
  // Without a hostfile edprun may not choose hosts; a failed restart without them ends the job.
  Supervisor slurm({2, 1, 0, false}, no_hosts_lost());
  EXPECT_TRUE(says(slurm.after(e), "restarting without them needs a hostfile"));
  Supervisor sup2({2, 1, 0, true}, [](const std::vector<std::string>&, int want) { return want; });
  s = sup2.after(e);
  s = sup2.cannot(s, e, "the hostfile names no host");
  EXPECT_EQ(s.kind, Step::Finish);
  EXPECT_TRUE(says(s, "error: cannot restart without host(s) h2: the hostfile names no host"));
  Supervisor sup3({2, 1, 0, true}, [](const std::vector<std::string>&, int) -> int { throw std::runtime_error("gone"); });
  EXPECT_TRUE(says(sup3.after(e), "error: cannot restart without host(s) h2: gone"));
}
