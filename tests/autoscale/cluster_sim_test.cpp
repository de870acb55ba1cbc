// The node-level simulator (cluster_sim.h) and its policies, on a small made-up model written
// to a temporary profile folder (so the tests need no shared data): placement keys and table
// interpolation, the fixed-batch accumulation rule, Tiresias' queue demotion and gang
// scheduling, Optimus' marginal-gain order, the edp DP's capacity, bounds, placement and
// restart awareness, and the simulator's restart accounting.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "edp/autoscale/cluster_sim.h"
#include "edp/autoscale/policy.h"
#include "edp/core/error.h"

using namespace edp::autoscale;
namespace fs = std::filesystem;

namespace {

// Step time of the made-up model: compute grows with the per-GPU batch, sync with the nodes.
double toy_step(int nodes, int gpus, double b) { return 0.02 + 0.001 * b + (gpus > 1 ? 0.004 + 0.01 * (nodes - 1) : 0.0); }
double toy_sync(int nodes, int gpus) { return gpus > 1 ? 0.004 + 0.01 * (nodes - 1) : 0.0005; }

// Writes model_limits, placements (every placement of 1-4 nodes x 1-4 GPUs), scalability
// (6/8/12/16 nodes) and gradient statistics for two models: "toy" (elastic, batch 32..1024)
// and "ncf" (the name the artifact confines to one GPU).
fs::path write_profiles() {
  const fs::path d = fs::temp_directory_path() / ("edp_cluster_sim_" + std::to_string(::getpid()));
  fs::create_directories(d);
  const int grid[] = {8, 16, 32, 64};
  {
    std::ofstream f(d / "model_limits.csv");
    f << "model,init_batch_size,max_batch_size,min_local_bsz,max_local_bsz,max_epochs\n"
         "toy,32,1024,8,64,3\n"
         "ncf,32,1024,8,64,3\n";
  }
  {
    std::ofstream f(d / "throughput_placements.csv");
    f << "model,placement,local_bsz,step_time_s,sync_time_s\n";
    std::set<std::string> seen;
    for (int n = 1; n <= 4; ++n) {
      std::vector<int> p(size_t(n), 1);
      while (true) {
        const std::string key = placement_key(p);
        if (seen.insert(key).second)
          for (const char* m : {"toy", "ncf"})
            for (int b : grid) {
              const int g = std::accumulate(p.begin(), p.end(), 0);
              f << m << "," << key << "," << b << "," << toy_step(n, g, b) << "," << toy_sync(n, g) << "\n";
            }
        size_t i = 0;
        while (i < p.size() && p[i] == 4) p[i++] = 1;
        if (i == p.size()) break;
        ++p[i];
      }
    }
  }
  {
    std::ofstream f(d / "throughput_scalability.csv");
    f << "model,num_nodes,num_gpus,local_bsz,step_time_s,sync_time_s\n";
    for (const char* m : {"toy", "ncf"})
      for (int n : {6, 8, 12, 16})
        for (int g = n; g <= 4 * n; g += n)
          for (int b : grid) f << m << "," << n << "," << g << "," << b << "," << toy_step(n, g, b) << "," << toy_sync(n, g) << "\n";
  }
  {
    std::ofstream f(d / "convergence_gradstats.csv");
    f << "model,batch_size,epoch,progress,iteration,metric,grad_sqr,grad_var\n";
    // B_noise = 32 x var / sqr = 320: large batches pay. ncf's run is a tenth of toy's.
    for (const char* m : {"toy", "ncf"})
      for (int B = 32; B <= 1024; B *= 2)
        for (int e = 1; e <= 3; ++e) {
          const double per_epoch = std::string(m) == "toy" ? 20000.0 : 2000.0;
          f << m << "," << B << "," << e << "," << per_epoch * e + (B == 32 ? 0 : 1) << "," << per_epoch * e * 32 / B
            << ",0.5,1.0,10.0\n";
        }
  }
  return d;
}

const ClusterProfiles& profiles() {
  static const fs::path dir = write_profiles();
  static const ClusterProfiles p = ClusterProfiles::load(dir.string());
  return p;
}

ClusterJobView view(int id, const std::string& app, int replicas, int batch, std::vector<int> alloc = {}) {
  ClusterJobView v;
  v.id = id;
  v.app = &profiles().app(app);
  v.submit_s = 0;
  v.target_replicas = replicas;
  v.target_batch = batch;
  v.alloc = std::move(alloc);
  return v;
}

void check_plan(const std::vector<std::vector<int>>& plan, int nodes, int gpn, const std::string& what) {
  std::vector<int> used(size_t(nodes), 0);
  for (const auto& a : plan)
    for (int n : a) {
      ASSERT_GE(n, 0) << what;
      ASSERT_LT(n, nodes) << what;
      ASSERT_LE(++used[size_t(n)], gpn) << what << ": node " << n << " over-allocated";
    }
}

}  // namespace

TEST(ClusterSim, PlacementKeysAreCanonicalRotations) {
  EXPECT_EQ(placement_key({2, 1, 2, 1}), "1212");
  EXPECT_EQ(placement_key({2, 1, 1}), "112");
  EXPECT_EQ(placement_key({1, 2, 1}), "112");
  EXPECT_EQ(placement_key({0, 4, 0, 4}), "44");
  EXPECT_EQ(placement_of({3, 3, 5, 5, 5, 0}), (std::vector<int>{2, 3, 1}));
  EXPECT_TRUE(placement_of({}).empty());
}

TEST(ClusterSim, StepTimeIsTheTableAtGridPointsAndLinearBetween) {
  const ClusterApp& a = profiles().app("toy");
  // Profiled placement: exact at a grid point, linear between two.
  EXPECT_NEAR(a.step_sync({2, 2}, 16).first, toy_step(2, 4, 16), 1e-12);
  EXPECT_NEAR(a.step_sync({2, 2}, 24).first, 0.5 * (toy_step(2, 4, 16) + toy_step(2, 4, 32)), 1e-12);
  EXPECT_NEAR(a.step_sync({1}, 64).second, toy_sync(1, 1), 1e-12);
  // Six full nodes: a measured (nodes, GPUs) pair of the scalability table.
  EXPECT_NEAR(a.step_sync({4, 4, 4, 4, 4, 4}, 32).first, toy_step(6, 24, 32), 1e-12);
  // Five nodes were not measured: between the 4-node and 6-node levels.
  const double s5 = a.step_sync({4, 4, 4, 4, 4}, 32).first;
  EXPECT_GT(s5, toy_step(4, 16, 32) - 1e-12);
  EXPECT_LT(s5, toy_step(6, 24, 32) + 1e-12);
}

TEST(ClusterSim, FixedBatchAccumulatesAboveTheMemoryBound) {
  const ClusterApp& a = profiles().app("toy");
  BatchConfig c = fixed_batch_config(a, 4, 256, true);  // 64 per GPU: fits
  EXPECT_EQ(c.atomic, 64);
  EXPECT_EQ(c.accum, 0);
  c = fixed_batch_config(a, 2, 256, true);  // 128 per GPU: two micro-batches of 64
  EXPECT_EQ(c.atomic, 64);
  EXPECT_EQ(c.accum, 1);
  c = fixed_batch_config(a, 1, 64, true);  // one GPU above init_batch: forced accumulation
  EXPECT_EQ(c.accum, 1);
  EXPECT_EQ(c.atomic, 32);
  c = fixed_batch_config(a, 1, 64, false);
  EXPECT_EQ(c.accum, 0);
  c = fixed_batch_config(a, 3, 1024, true);  // ceil(1024/3) = 342 -> 6 x 57 = 342; 3 x 6 x 57 > 1024: cut to 56
  EXPECT_LE(3 * c.atomic * (c.accum + 1), 1024);
}

TEST(ClusterSim, TiresiasDemotesAfterTheThresholdAndGangSchedules) {
  ClusterPolicyConfig cfg;
  cfg.tiresias_threshold_gpu_s = 4 * 600.0;  // 4 GPUs x 10 minutes
  auto pol = make_cluster_policy("tiresias", cfg);
  std::vector<ClusterJobView> jobs = {view(0, "toy", 4, 256)};
  auto plan = pol->plan(jobs, 1, 4, 60);
  ASSERT_EQ(plan[0].size(), 4u);  // gang: all of its GPUs at once
  EXPECT_EQ(pol->queue_of(0), 0);
  jobs[0].alloc = plan[0];
  for (double t = 120; t < 660 - 1; t += 60) {
    plan = pol->plan(jobs, 1, 4, t);
    EXPECT_EQ(pol->queue_of(0), 0) << "demoted too early at t=" << t;
  }
  plan = pol->plan(jobs, 1, 4, 660);  // executed 600 s x 4 GPUs = the threshold
  EXPECT_EQ(pol->queue_of(0), 1);
  EXPECT_EQ(plan[0], jobs[0].alloc);  // alone: keeps running, no restart
  // A new job in queue 0 preempts the demoted one; a job that does not fit is skipped, and a
  // smaller one behind it runs.
  jobs.push_back(view(1, "toy", 4, 256));
  jobs.push_back(view(2, "toy", 8, 256));
  plan = pol->plan(jobs, 1, 4, 720);
  check_plan(plan, 1, 4, "tiresias");
  EXPECT_TRUE(plan[0].empty());
  EXPECT_EQ(plan[1].size(), 4u);
  EXPECT_TRUE(plan[2].empty());
  EXPECT_EQ(pol->queue_of(1), 0);
}

TEST(ClusterSim, OptimusGivesEachJobOneGpuThenFollowsTheMarginalGain) {
  auto pol = make_cluster_policy("optimus");
  ClusterJobView shortj = view(0, "toy", 1, 256), longj = view(1, "toy", 1, 256), n = view(2, "ncf", 1, 256);
  longj.epoch = 0;
  shortj.epoch = 2;  // in its last epoch: "remaining" is 1 step, almost no gain from more GPUs
  const auto plan = pol->plan({shortj, longj, n}, 2, 4, 60);
  check_plan(plan, 2, 4, "optimus");
  EXPECT_GE(plan[0].size(), 1u);
  EXPECT_EQ(plan[2].size(), 1u);  // ncf: one GPU
  EXPECT_GT(plan[1].size(), plan[0].size());
  // Step time falls with every GPU here, so some job always gains: every GPU is handed out.
  EXPECT_EQ(plan[0].size() + plan[1].size() + plan[2].size(), 8u);
  // Without GPUs for everyone, the first jobs in submission order get one each.
  std::vector<ClusterJobView> many;
  for (int i = 0; i < 6; ++i) many.push_back(view(i, "toy", 1, 256));
  const auto p2 = pol->plan(many, 1, 4, 60);
  check_plan(p2, 1, 4, "optimus");
  for (int i = 0; i < 4; ++i) EXPECT_EQ(p2[size_t(i)].size(), 1u);
  EXPECT_TRUE(p2[4].empty() && p2[5].empty());
}

TEST(ClusterSim, EdpPoliciesRespectCapacityBoundsAndPackPlacements) {
  for (const std::string name : {"goodput", "goodput-oracle", "dp", "goodput-eager"}) {
    auto pol = make_cluster_policy(name);
    ASSERT_TRUE(pol->adaptive_batch());
    std::vector<ClusterJobView> jobs;
    for (int i = 0; i < 7; ++i) jobs.push_back(view(i, i == 3 ? "ncf" : "toy", 1, 256));
    for (int round = 0; round < 5; ++round) {
      const auto plan = pol->plan(jobs, 4, 4, 60.0 * (round + 1));
      check_plan(plan, 4, 4, name);
      for (size_t i = 0; i < plan.size(); ++i) {
        const int g = static_cast<int>(plan[i].size());
        // max_batch / min_local = 128 > cluster; ncf: 1 GPU.
        EXPECT_LE(g, jobs[i].app->name == "ncf" ? 1 : 16) << name;
        if (pol->chooses_batch() && g > 0) {  // a batch the job can run on its GPUs
          const int B = pol->batches()[i];
          EXPECT_GE(B, jobs[i].app->init_batch) << name;
          EXPECT_LE(B, jobs[i].app->name == "ncf" ? 32768 : jobs[i].app->max_batch) << name;
          jobs[i].batch = B;
        }
        if (g > 4) {
          EXPECT_EQ(g % 4, 0) << name << ": counts above a node are whole nodes";
          if (round == 0) {  // from an empty cluster, large jobs are placed first: on whole nodes
            std::map<int, int> per;
            for (int n : plan[i]) ++per[n];
            for (const auto& [n, k] : per) EXPECT_EQ(k, 4) << name << " node " << n;
          }
        }
        jobs[i].alloc = plan[i];
        jobs[i].goodput = 0;
      }
      jobs[size_t(round)].progress = profiles().app("toy").total_progress() * 0.9;  // shift the mix
    }
  }
}

TEST(ClusterSim, RestartAwareDpDoesNotRescaleAJobAboutToFinish) {
  // One job on 1 GPU with ~5 s of work left, 15 GPUs idle: growing it would cost a 30 s pause
  // to save seconds. The restart-aware DP keeps it; the eager one grows it.
  const ClusterApp& a = profiles().app("toy");
  ClusterJobView j = view(0, "toy", 1, 256, {0});
  j.epoch = a.max_epochs - 1;
  const NamedBatch nb = best_named_batch(a, {1}, j.epoch);
  j.batch = nb.batch;
  j.goodput = nb.run.goodput;
  j.progress = a.total_progress() - 5 * nb.run.goodput;
  auto aware = make_cluster_policy("goodput-oracle");
  EXPECT_EQ(aware->plan({j}, 4, 4, 60)[0], j.alloc);
  auto eager = make_cluster_policy("goodput-eager");
  EXPECT_GT(eager->plan({j}, 4, 4, 60)[0].size(), 1u);
  // With most of its work ahead, the restart-aware DP does grow it.
  j.epoch = 0;
  j.progress = 0;
  EXPECT_GT(aware->plan({j}, 4, 4, 60)[0].size(), 1u);
}

TEST(ClusterSim, LearningPolicyGrowsOnlyWhatItMeasuredAndNeverForLessThanThePause) {
  // The learning policy sees only what the job reported: one GPU measured, so it may try one node
  // (4 GPUs) at most; with ~5 s of work left it holds (a change costs 30 s), with all of it ahead
  // it grows.
  const ClusterApp& a = profiles().app("toy");
  ClusterJobView j = view(0, "toy", 1, 256, {0});
  const auto [step, sync] = a.step_sync({1}, 32);
  j.observed = {StepObservation{1, 1, 32, step, sync}};
  j.has_grad = true;
  std::tie(j.grad_sqr, j.grad_var) = a.grad_stats(32, 0);
  j.batch = 32;
  auto learn = make_cluster_policy("goodput");
  ASSERT_TRUE(learn->chooses_batch());
  const double rate = 32 / step * a.gain(32, 0) / 32;  // progress per second where it runs
  j.progress = a.total_progress() - 5 * rate;
  EXPECT_EQ(learn->plan({j}, 4, 4, 60)[0], j.alloc);
  j.progress = 0;
  const auto grown = learn->plan({j}, 4, 4, 60)[0];
  EXPECT_GT(grown.size(), 1u);
  EXPECT_LE(grown.size(), 4u) << "twice the GPUs it ran at or one node, no more";
}

TEST(ClusterSim, RestartAccountingCountsEveryAllocationChangeAfterTheFirstStart) {
  // One node: a long 4-GPU job is demoted after 10 minutes, a short 4-GPU job (a tenth of the
  // work, never demoted) arrives and preempts it; the first resumes when the second ends:
  // exactly one restart for it.
  std::vector<ClusterJob> jobs = {{"long", "toy", 0, 4, 256}, {"short", "ncf", 1000, 4, 256}};
  ClusterSimConfig cfg;
  cfg.nodes = 1;
  cfg.policy = "tiresias";
  cfg.policy_cfg.tiresias_threshold_gpu_s = 4 * 600.0;
  const ClusterSimResult r = simulate_cluster(jobs, profiles(), cfg);
  ASSERT_EQ(r.finished, 2);
  EXPECT_EQ(r.jobs[0].restarts, 1);
  EXPECT_EQ(r.jobs[1].restarts, 0);
  EXPECT_EQ(r.restarts, 1);
  EXPECT_EQ(r.jobs[0].start_s, 60);    // seen at the end of the first interval
  EXPECT_EQ(r.jobs[1].start_s, 1020);  // submitted at 1000, seen at 1020
  EXPECT_GT(r.jobs[0].finish_s, r.jobs[1].finish_s);
  // Alone, each job runs its solo time: the pause (30 s) plus its epochs; the preempted one
  // pays the pause twice, so it ends at least its solo time + the other's run + one pause late.
  ClusterSimConfig solo = cfg;
  const ClusterSimResult s = simulate_cluster({jobs[0]}, profiles(), solo);
  const double solo_run = s.jobs[0].finish_s - s.jobs[0].start_s;
  EXPECT_GE(solo_run, 30.0);
  EXPECT_GE(r.jobs[0].finish_s - r.jobs[0].start_s,
            solo_run + (r.jobs[1].finish_s - r.jobs[1].start_s) + 30.0 - 60.0 - 1e-9);
  EXPECT_NEAR(r.restarts_per_job, 0.5, 1e-12);
}

TEST(ClusterSim, EverySimulatedPolicyFinishesEveryJobWithinCapacity) {
  std::vector<ClusterJob> jobs;
  for (int i = 0; i < 24; ++i)
    jobs.push_back(ClusterJob{std::string("j").append(std::to_string(i)), i % 5 == 0 ? "ncf" : "toy", 37.0 * i, 1 + i % 4 * 2, 64 << (i % 4)});
  for (const std::string& p : policy_names(PolicyScope::Cluster)) {
    ClusterSimConfig cfg;
    cfg.nodes = 2;
    cfg.policy = p;
    const ClusterSimResult r = simulate_cluster(jobs, profiles(), cfg);  // throws on over-allocation
    EXPECT_EQ(r.finished, 24) << p;
    EXPECT_LE(r.utilisation, 1.0 + 1e-12) << p;
    int restarts = 0;
    for (const ClusterJobResult& j : r.jobs) {
      restarts += j.restarts;
      EXPECT_GE(j.start_s, j.submit_s) << p;
      EXPECT_GE(j.finish_s, j.start_s + cfg.restart_s) << p << ": the first start pauses too";
    }
    EXPECT_EQ(restarts, r.restarts) << p;
  }
}

TEST(ClusterSim, UnknownPolicyAndModelAreErrors) {
  EXPECT_THROW(make_cluster_policy("pollux"), edp::Error);
  EXPECT_THROW(profiles().app("nope"), edp::Error);
}

TEST(PoolPolicy, RestartAwareDpKeepsAJobAboutToFinishAndGrowsALongOne) {
  // The pool simulator's dp with restart awareness: a running job at 1 GPU whose remaining time
  // (10 s) is below the pause keeps its allocation although 8 GPUs would be 4x faster; with
  // hours left it grows. Without restart awareness it grows in both cases.
  const std::vector<Config> cfgs = {{1, 64, 1, 100.0, 1.0}, {8, 512, 1, 400.0, 1.0}};
  JobState j;
  j.req_gpus = 1;
  j.ref_batch = 64;
  j.ref_samples_per_s = 100.0;
  j.elastic = j.elastic_goodput = j.fixed_batch = &cfgs;
  j.cur_gpus = 1;
  j.cur_batch = 64;
  j.started = true;
  PolicyConfig pc;
  pc.weighting = Weighting::Remaining;
  pc.restart_aware = true;
  pc.pause_s = 30;
  for (const char* name : {"dp", "goodput"}) {
    auto aware = make_policy(name, pc);
    j.remaining_s = 10;
    EXPECT_EQ(aware->plan({j}, 8, 0)[0].gpus, 1) << name;
    j.remaining_s = 3600;
    EXPECT_EQ(aware->plan({j}, 8, 0)[0].gpus, 8) << name;
    PolicyConfig eager = pc;
    eager.restart_aware = false;
    j.remaining_s = 10;
    EXPECT_EQ(make_policy(name, eager)->plan({j}, 8, 0)[0].gpus, 8) << name;
  }
}
