// The node-level simulator with GPU types (cluster_sim.h: ClusterProfiles::load_sia,
// sia_cluster, simulate_cluster over types) on made-up tables written in the Sia artifact's layout
// to a temporary folder (the tests need no artifact): each type's tables and the models' facts,
// the per-placement micro-batch limit and the memory correction of the split, jobs on one type at
// a time, a type change counted, each model's restart delay and calibration slowdown.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <set>

#include "edp/autoscale/cluster_sim.h"
#include "edp/autoscale/policy.h"
#include "edp/core/error.h"

using namespace edp::autoscale;
namespace fs = std::filesystem;

namespace {

// Step and sync time of the made-up models on a type `speed` times as fast as the reference.
double toy_step(int nodes, int gpus, double b, double speed) {
  return (0.02 + 0.001 * b + (gpus > 1 ? 0.004 + 0.01 * (nodes - 1) : 0.0)) / speed;
}
double toy_sync(int nodes, int gpus, double speed) { return (gpus > 1 ? 0.004 + 0.01 * (nodes - 1) : 0.0005) / speed; }

// traces/<model>/ for "cifar10" and "imagenet" (names the artifact's facts are keyed by) on "aws"
// (4 GPUs per node, speed 1) and "rtx" (8, speed 2): every placement of 1-2 nodes, one GPU up to a
// micro-batch of 64 and more GPUs up to 32, scalability rows of 3 and 4 whole nodes up to 64 (so
// that a placement over 3 nodes that was not profiled may take 64 there, cut by the limit of its
// GPU count), and identical epochs (100 rows: the same progress and gradient statistics in each,
// B_noise = 320).
fs::path write_tables(const std::string& tag) {
  const fs::path d = fs::temp_directory_path() / ("edp_sia_tables_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  for (const char* model : {"cifar10", "imagenet"}) {
    const fs::path m = d / "traces" / model;
    fs::create_directories(m);
    for (const auto& [type, gpn, speed] : {std::tuple{"aws", 4, 1.0}, std::tuple{"rtx", 8, 2.0}}) {
      std::ofstream p(m / (std::string("placements-") + type + ".csv"));
      p << "placement,local_bsz,step_time,sync_time\n";
      for (int a = 1; a <= gpn; ++a)
        for (int b = 0; b <= gpn; ++b) {
          if (b > a) continue;
          const int g = a + b, n = b > 0 ? 2 : 1;
          const std::string key = std::to_string(a) + (b > 0 ? std::to_string(b) : "");
          const int top = g == 1 ? 64 : 32;
          for (int x : {8, 16, 32, 64})
            if (x <= top) p << key << "," << x << "," << toy_step(n, g, x, speed) << "," << toy_sync(n, g, speed) << "\n";
        }
      std::ofstream s(m / (std::string("scalability-") + type + ".csv"));
      s << "num_nodes,num_replicas,local_bsz,step_time,sync_time\n";
      for (int n : {3, 4})
        for (int x : {8, 16, 32, 64})
          s << n << "," << n * gpn << "," << x << "," << toy_step(n, n * gpn, x, speed) << "," << toy_sync(n, n * gpn, speed)
            << "\n";
    }
    for (int B = 32; B <= 1024; B *= 2) {
      std::ofstream v(m / ("validation-" + std::to_string(B) + ".csv"));
      v << "progress,iteration,metric,grad_sqr,grad_var\n";
      for (int e = 1; e <= 100; ++e) v << 4000.0 * e + (B == 32 ? 0 : 1) << "," << 4000.0 * e * 32 / B << ",0.5,1.0,10.0\n";
    }
  }
  return d;
}

const fs::path& tables() {
  static const fs::path d = write_tables("ok");
  return d;
}

struct Typed {
  ClusterProfiles aws = ClusterProfiles::load_sia(tables().string(), "aws");
  ClusterProfiles rtx = ClusterProfiles::load_sia(tables().string(), "rtx");
  std::vector<const ClusterProfiles*> both() const { return {&aws, &rtx}; }
};
const Typed& typed() {
  static const Typed t;
  return t;
}

std::vector<ClusterJob> workload(int n) {
  std::vector<ClusterJob> jobs;
  for (int i = 0; i < n; ++i)
    jobs.push_back(ClusterJob{"j" + std::to_string(i), i % 3 == 0 ? "imagenet" : "cifar10", 97.0 * i, 1 + i % 4, 64});
  return jobs;
}

}  // namespace

TEST(SiaTables, EachTypesTablesWithTheModelsFacts) {
  const ClusterApp& c = typed().aws.app("cifar10");
  EXPECT_EQ(c.init_batch, 32);
  EXPECT_EQ(c.max_batch, 1024);
  EXPECT_EQ(c.min_local, 8);
  EXPECT_EQ(c.max_local, 64);
  EXPECT_EQ(c.max_epochs, 100);
  EXPECT_EQ(c.pause_s, 50);  // the artifact's restart delays and calibration slowdowns
  EXPECT_EQ(c.slowdown, 1.8);
  const ClusterApp& i = typed().rtx.app("imagenet");
  EXPECT_EQ(i.max_epochs, 90);
  EXPECT_EQ(i.pause_s, 250);
  EXPECT_EQ(i.slowdown, 1.2);
  EXPECT_EQ(c.total_progress(), 4000.0 * 100);  // the least progress any batch made after 100 epochs
  // Each type its own tables: rtx twice as fast at the same placement and micro-batch.
  const auto [sa, ya] = c.step_sync({2, 1}, 16);
  const auto [sr, yr] = typed().rtx.app("cifar10").step_sync({2, 1}, 16);
  EXPECT_DOUBLE_EQ(sa, toy_step(2, 3, 16, 1.0));
  EXPECT_DOUBLE_EQ(sr, sa / 2);
  EXPECT_DOUBLE_EQ(yr, ya / 2);
}

TEST(SiaTables, TheSplitTakesThePlacementsLimitAndTheMemoryCorrection) {
  const ClusterApp& c = typed().aws.app("cifar10");
  EXPECT_EQ(c.max_local_at({1}), 64);
  EXPECT_EQ(c.max_local_at({2}), 32);
  EXPECT_EQ(c.max_local_at({1, 1}), 32);
  EXPECT_EQ(c.max_local_at({4, 4, 4}), 64);  // not profiled: the scalability rows of >= 3 nodes, >= 12 GPUs
  // 256 on 2 GPUs of one node: 128 each, at most 32 per micro-batch: 4 micro-batches of 32.
  BatchSplit s = c.split({2}, 256);
  EXPECT_EQ(s.atomic, 32);
  EXPECT_EQ(s.accum, 3);
  // 320 on 5 GPUs over 3 nodes (not profiled): the scalability rows take 64 at once, but no 5-GPU
  // row goes above 32: the micro-batch is cut to 32 after the split (the batch run is 160, as in
  // the artifact).
  s = c.split({3, 1, 1}, 320);
  EXPECT_EQ(s.atomic, 32);
  EXPECT_EQ(s.accum, 0);
  // One GPU above the initial batch accumulates at least once.
  s = c.split({1}, 64);
  EXPECT_EQ(s.atomic, 32);
  EXPECT_EQ(s.accum, 1);
  // The Pollux tables (no per-placement limits): the model's max_local, no correction.
  ClusterApp plain = c;
  plain.local_max_by_placement.clear();
  plain.local_max_by_gpus.clear();
  EXPECT_EQ(plain.max_local_at({2}), 64);
  EXPECT_EQ(plain.split({3, 1, 1}, 320).atomic, 64);
}

TEST(SiaTables, BadTablesAndClustersAreRefusedWithTheReason) {
  EXPECT_THROW(ClusterProfiles::load_sia(tables().string(), "quad"), edp::Error);  // no model has its tables
  EXPECT_THROW(ClusterProfiles::load_sia((tables() / "nope").string(), "aws"), edp::Error);
  const fs::path bad = write_tables("bad");
  {
    std::ofstream p(bad / "traces" / "cifar10" / "placements-aws.csv", std::ios::app);
    p << "1x,8,0.1,0.01\n";
  }
  try {
    ClusterProfiles::load_sia(bad.string(), "aws");
    ADD_FAILURE() << "a placement '1x' was taken";
  } catch (const edp::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("placements-aws.csv"), std::string::npos) << e.what();
  }
  const fs::path bad2 = write_tables("bad2");
  std::ofstream(bad2 / "traces" / "imagenet" / "validation-abc.csv") << "progress,iteration,metric,grad_sqr,grad_var\n";
  EXPECT_THROW(ClusterProfiles::load_sia(bad2.string(), "aws"), edp::DataError);
  fs::remove_all(bad);
  fs::remove_all(bad2);

  const std::vector<ClusterNodeType> t = sia_cluster("aws:6,dgx-ext:2,rtx:3");
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].gpus_per_node, 4);
  EXPECT_EQ(t[0].max_job_nodes, 16);
  EXPECT_EQ(t[1].gpus_per_node, 8);
  EXPECT_EQ(t[1].max_job_nodes, 2);
  EXPECT_EQ(t[2].nodes, 3);
  for (const char* s : {"", "aws", "aws:0", "aws:x", "foo:1", "aws:1,aws:2", "aws:1,", ":3"})
    EXPECT_THROW(sia_cluster(s), edp::Error) << s;
}

TEST(TypedClusterSim, EveryJobRunsOnOneTypeAtATimeAndFinishes) {
  // 2 aws nodes (8 T4-like GPUs) and 1 rtx node (8 GPUs twice as fast); the simulator refuses a
  // plan that puts a job on nodes of two types, so finishing is the check.
  const std::vector<ClusterJob> jobs = workload(14);
  for (const char* p : {"goodput", "goodput-oracle"}) {
    ClusterSimConfig cfg;
    cfg.types = sia_cluster("aws:2,rtx:1");
    cfg.policy = p;
    const ClusterSimResult r = simulate_cluster(jobs, typed().both(), cfg);
    EXPECT_EQ(r.finished, 14) << p;
    EXPECT_LE(r.utilisation, 1.0 + 1e-12) << p;
    int changes = 0;
    for (const ClusterJobResult& j : r.jobs) {
      EXPECT_LE(j.type_changes, j.restarts) << p << " " << j.name;
      changes += j.type_changes;
      EXPECT_GE(j.finish_s, j.start_s + (j.app == "imagenet" ? 250 : 50)) << p << ": the first start pauses the model's delay";
    }
    EXPECT_LE(changes, r.restarts) << p;
  }
}

TEST(TypedClusterSim, PoliciesWithoutTypesAreRefused) {
  const std::vector<ClusterNodeType> t = sia_cluster("aws:1,rtx:1");
  ClusterSimConfig cfg;
  cfg.types = t;
  cfg.policy = "tiresias";  // Tiresias, Optimus and the job-tuned DPs take no types
  EXPECT_THROW(simulate_cluster(workload(2), typed().both(), cfg), edp::Error);
  cfg.policy = "dp";
  EXPECT_THROW(simulate_cluster(workload(2), typed().both(), cfg), edp::Error);
  cfg.policy = "goodput";
  EXPECT_THROW(simulate_cluster(workload(2), {&typed().aws}, cfg), edp::Error);  // one profile, two types
  EXPECT_THROW(simulate_cluster(workload(2), typed().aws, cfg), edp::Error);
}

TEST(TypedClusterSim, EachModelPausesItsOwnDelayAndRunsSlowedByItsCalibration) {
  // One job alone on one rtx node, on the oracle: the same tables and identical epochs for both
  // models, so after its first start (at the first round, 60 s) and its pause, a job runs
  // epochs x slowdown x the same time per epoch: cifar10 100 epochs x 1.8, imagenet 90 x 1.2.
  // Epoch ends are whole seconds (as in the artifact): at most 1 s of rounding per epoch.
  ClusterSimConfig cfg;
  cfg.types = sia_cluster("rtx:1");
  cfg.policy = "goodput-oracle";
  const ClusterSimResult c = simulate_cluster({ClusterJob{"c", "cifar10", 0, 1, 64}}, {&typed().rtx}, cfg);
  const ClusterSimResult i = simulate_cluster({ClusterJob{"i", "imagenet", 0, 1, 64}}, {&typed().rtx}, cfg);
  ASSERT_EQ(c.finished, 1);
  ASSERT_EQ(i.finished, 1);
  EXPECT_EQ(c.jobs[0].start_s, 60);
  EXPECT_EQ(c.jobs[0].restarts, 0);
  EXPECT_EQ(i.jobs[0].restarts, 0);
  const double per_epoch_c = (c.jobs[0].finish_s - 60 - 50) / (100 * 1.8);
  const double per_epoch_i = (i.jobs[0].finish_s - 60 - 250) / (90 * 1.2);
  EXPECT_GT(per_epoch_c, 10.0);
  EXPECT_NEAR(per_epoch_c, per_epoch_i, 1.0);
}
