// One cluster state, asked of every caller of the autoscaler's decision: `plan` (the JSON
// contract), the pool simulator's policies, the node-level simulator's edp policies and the live
// controller. Each describes the state in its own terms (throughput tables, JobStates with
// configurations, progress rates per GPU count, LiveJobs with measured step times); every one must
// give the same option values (bit for bit: the same valuation on the same numbers) and the same
// plan. The numbers are chosen exact in binary (powers of two, step times that divide evenly), so
// that each caller's conversion of its own units (seconds left at the job's own rate, step time
// per batch) gives back exactly the state's numbers.
#include <gtest/gtest.h>

#include <memory>

#include "edp/autoscale/cluster_sim.h"
#include "edp/autoscale/live.h"
#include "edp/autoscale/plan.h"
#include "edp/autoscale/policy.h"

using namespace edp::autoscale;

namespace {

constexpr double kRef = 1024;    // samples/s at every job's own configuration
constexpr double kPause = 2.0;   // every change and every start
constexpr int kSlots = 5;

// A job of the state: its options (GPUs -> step time at the global batch), its current GPUs,
// its remaining work in seconds at kRef.
struct StateJob {
  std::string id;
  int current_gpus;  // 0: queued (it ran before: a start costs the pause everywhere)
  int64_t batch;
  double remaining_s;
  std::vector<std::pair<int, double>> steps;  // (GPUs, step time in s)
  int64_t samples_per_s_at(int g) const {
    for (const auto& [gg, s] : steps)
      if (gg == g) return static_cast<int64_t>(static_cast<double>(batch) / s);
    return 0;
  }
};

const std::vector<StateJob>& state() {
  // On 5 slots. a: runs on 1 GPU, scales well; b: queued, scales poorly; c: runs on 2 GPUs,
  // almost done.
  static const std::vector<StateJob> s = {
      {"a", 1, 128, 4096, {{1, 0.125}, {2, 0.0625}, {4, 0.03125}}},
      {"b", 0, 128, 2048, {{1, 0.125}, {2, 0.1}, {4, 0.09375}}},
      {"c", 2, 128, 8, {{1, 0.125}, {2, 0.0625}}},
  };
  return s;
}

double sps(const StateJob& j, double step) { return static_cast<double>(j.batch) / step; }

// The state as a plan.h request: what `edp-autoscale plan` reads.
PlanRequest reference() {
  PlanRequest r;
  r.gpus = kSlots;
  r.objective = Objective::RestartAware;
  r.hysteresis = 0.15;
  r.pause_s = r.start_s = kPause;
  for (const StateJob& j : state()) {
    PlanJob p;
    p.id = j.id;
    p.remaining = j.remaining_s * kRef;
    if (j.current_gpus > 0) p.current = Config{j.current_gpus, static_cast<int>(j.batch), 1, 0, 1.0};
    for (const auto& [g, step] : j.steps) p.options.push_back(Config{g, static_cast<int>(j.batch), 1, sps(j, step), 1.0});
    r.jobs.push_back(p);
  }
  return r;
}

void expect_same_values(const Plan& want, const Plan& got, const std::string& who) {
  ASSERT_EQ(want.values.size(), got.values.size()) << who;
  for (size_t j = 0; j < want.values.size(); ++j) {
    ASSERT_EQ(want.values[j].size(), got.values[j].size()) << who << " job " << j;
    for (size_t o = 0; o < want.values[j].size(); ++o)
      EXPECT_EQ(want.values[j][o], got.values[j][o]) << who << ": job " << j << " option " << o << " (bit for bit)";
  }
  ASSERT_EQ(want.choices.size(), got.choices.size()) << who;
  for (size_t j = 0; j < want.choices.size(); ++j) {
    EXPECT_EQ(want.choices[j].config.gpus, got.choices[j].config.gpus) << who << ": job " << j;
    EXPECT_EQ(want.choices[j].option, got.choices[j].option) << who << ": job " << j;
  }
  EXPECT_EQ(want.objective, got.objective) << who;
}

// The pool simulator's view: configurations per job, remaining seconds at the own rate.
struct PoolState {
  std::vector<std::vector<Config>> configs;
  std::vector<JobState> jobs;
};
PoolState pool_state() {
  PoolState p;
  for (const StateJob& j : state()) {
    std::vector<Config> c;
    for (const auto& [g, step] : j.steps) c.push_back(Config{g, static_cast<int>(j.batch), 1, sps(j, step), 1.0});
    p.configs.push_back(c);
  }
  for (size_t i = 0; i < state().size(); ++i) {
    const StateJob& j = state()[i];
    JobState s;
    s.index = static_cast<int>(i);
    s.req_gpus = 1;
    s.ref_batch = static_cast<int>(j.batch);
    s.ref_samples_per_s = kRef;
    s.elastic = s.elastic_goodput = s.fixed_batch = &p.configs[i];
    s.cur_gpus = j.current_gpus;
    s.cur_batch = j.current_gpus > 0 ? static_cast<int>(j.batch) : 0;
    s.started = true;  // b ran before: its restart costs the pause, as a start does for the others
    s.remaining_s = j.remaining_s;
    p.jobs.push_back(s);
  }
  return p;
}

PolicyConfig pool_config() {
  PolicyConfig c;
  c.restart_aware = true;
  c.hysteresis = 0.15;
  c.pause_s = kPause;
  return c;
}

// The live controller's view: specs, measured step times at every option, progress in samples.
std::vector<LiveJob> live_state() {
  std::vector<LiveJob> out;
  for (const StateJob& j : state()) {
    LiveJob l;
    l.id = j.id;
    int maxw = 0;
    for (const auto& s : j.steps) maxw = std::max(maxw, s.first);
    l.spec = parse_job_spec(R"({"name": ")" + j.id + R"(", "command": ["p"], "min_batch": 128, "max_batch": 128,
                               "workers": 1, "max_workers": )" + std::to_string(maxw) + R"(, "preemptible": true})",
                            j.id);
    l.running = j.current_gpus > 0;
    l.workers = j.current_gpus;
    l.batch = l.running ? j.batch : 0;
    l.settled = true;
    for (const auto& [g, step] : j.steps) l.measured.push_back(Measured{g, 1, j.batch, 100, step, 0.0});
    l.samples_total = static_cast<int64_t>(j.remaining_s * kRef) + 1000;
    l.samples_done = 1000;
    l.pause_s = kPause;
    out.push_back(l);
  }
  return out;
}

LivePolicy live_policy() {
  LivePolicy p;
  p.name = "goodput";
  p.slots = kSlots;
  p.hysteresis = 0.15;
  p.default_pause_s = kPause;
  p.start_s = kPause;
  return p;
}

}  // namespace

TEST(Agreement, TheStateDecidesSomethingWorthChecking) {
  const Plan p = decide(reference());
  // Not a trivial state: one job grows, one starts, one holds (so hysteresis, the change pause, the
  // start pause and the current configuration's value all take part).
  EXPECT_EQ(p.choices[0].config.gpus, 2) << plan_json(reference(), p, 0);
  EXPECT_EQ(p.choices[1].config.gpus, 1) << plan_json(reference(), p, 0);
  EXPECT_EQ(p.choices[2].config.gpus, 2) << plan_json(reference(), p, 0);
}

TEST(Agreement, PlanJsonGivesTheSameDecision) {
  const PlanRequest r = reference();
  const PlanRequest back = parse_plan_request(plan_request_json(r), "round trip");
  expect_same_values(decide(r), decide(back), "plan (JSON)");
}

TEST(Agreement, PoolSimulatorGivesTheSameDecision) {
  PoolState ps = pool_state();
  const Plan want = decide(reference());
  expect_same_values(want, decide(pool_request(ps.jobs, kSlots, "goodput", pool_config())), "pool simulator");
  // And the policy object the simulator runs assigns exactly that.
  const auto policy = make_policy("goodput", pool_config());
  const std::vector<Assignment> a = policy->plan(ps.jobs, kSlots, 0);
  for (size_t j = 0; j < a.size(); ++j) EXPECT_EQ(a[j].gpus, want.choices[j].config.gpus) << "job " << j;
}

TEST(Agreement, NodeLevelSimulatorGivesTheSameDecision) {
  std::vector<ClusterDpJob> jobs;
  for (const StateJob& j : state()) {
    ClusterDpJob d;
    d.remaining = j.remaining_s * kRef;
    d.current_gpus = j.current_gpus;
    for (const auto& [g, step] : j.steps) d.rates.emplace_back(g, sps(j, step));
    jobs.push_back(d);
  }
  ClusterPolicyConfig cfg;
  cfg.restart_s = kPause;
  cfg.hysteresis = 0.15;
  cfg.margin_s = cfg.pause_per_gpu = 0;  // the reference state's valuation
  PlanRequest req;
  fill_cluster_request(req, jobs, kSlots, cfg, true);
  // The node-level simulator lets a job pick its batch (batch 0); values and choices are the same.
  expect_same_values(decide(reference()), decide(req), "node-level simulator");
}

TEST(Agreement, LiveControllerGivesTheSameDecision) {
  const std::vector<LiveJob> jobs = live_state();
  const Plan want = decide(reference());
  expect_same_values(want, decide(live_request(jobs, live_policy())), "live controller");
  const LivePlan lp = plan_live(jobs, live_policy());
  for (size_t j = 0; j < jobs.size(); ++j) {
    EXPECT_EQ(lp.choices[j].slots, want.choices[j].config.gpus) << "job " << j << ": " << lp.choices[j].reason;
    if (lp.choices[j].slots > 0) EXPECT_EQ(lp.choices[j].batch, want.choices[j].config.batch);
  }
}

// With a choice of batch and statistical efficiency: plan, the pool simulator (goodput) and the
// live controller (goodput, from grad_noise_scale) agree. (The node-level simulator picks its
// batch inside the job and has no such option.)
TEST(Agreement, BatchAndEfficiencyAgreeToo) {
  const double noise = 512;
  auto eff = [&](int64_t b) { return (noise + 64) / (noise + static_cast<double>(b)); };
  LiveJob l;
  l.id = "e";
  l.spec = parse_job_spec(R"({"name": "e", "command": ["p"], "min_batch": 64, "max_batch": 256, "max_workers": 2,
                             "grad_noise_scale": 512})", "e");
  l.running = true;
  l.workers = 1;
  l.batch = 64;
  l.settled = true;
  l.pause_s = kPause;
  l.samples_total = 1 << 22;
  PlanRequest r;
  r.gpus = 2;
  r.hysteresis = 0.15;
  r.pause_s = r.start_s = kPause;
  PlanJob p;
  p.id = "e";
  p.remaining = 1 << 22;
  p.current = Config{1, 64, 1, 0, 1.0};
  std::vector<Config> configs;
  // Options in the order the live controller generates them: per size, its start batch, its
  // largest, then the doublings from the smallest (64, 256, 128).
  for (int w : {1, 2})
    for (int64_t b : {64, 256, 128}) {
      const double step = 0.015625 * (static_cast<double>(b) / 64) / (w == 1 ? 1.0 : 1.5);
      l.measured.push_back(Measured{w, 1, b, 100, step, 0.0});
      const double x = static_cast<double>(b) / step;
      p.options.push_back(Config{w, static_cast<int>(b), 1, x, eff(b)});
      configs.push_back(Config{w, static_cast<int>(b), 1, x, eff(b)});
    }
  r.jobs = {p};
  const Plan want = decide(r);
  expect_same_values(want, decide(live_request({l}, [] {
                       LivePolicy lp = live_policy();
                       lp.slots = 2;
                       return lp;
                     }())),
                     "live controller");
  JobState s;
  s.req_gpus = 1;
  s.ref_batch = 64;
  s.ref_samples_per_s = kRef;
  s.elastic = s.elastic_goodput = s.fixed_batch = &configs;
  s.cur_gpus = 1;
  s.cur_batch = 64;
  s.started = true;
  s.remaining_s = static_cast<double>(1 << 22) / kRef;
  expect_same_values(want, decide(pool_request({s}, 2, "goodput", pool_config())), "pool simulator");
}

// The static policy is one FIFO: the pool simulator's static, the live controller's static and
// plan's policy fifo start the same jobs.
TEST(Agreement, StaticIsOneFifo) {
  PlanRequest r;
  r.gpus = 4;
  r.objective = Objective::Fifo;
  const int own[] = {2, 3, 1, 1};
  const int cur[] = {2, 0, 0, 0};  // the first runs; 2 free: the second (3) blocks the rest
  std::vector<Config> none;
  std::vector<JobState> pool;
  std::vector<LiveJob> live;
  for (int i = 0; i < 4; ++i) {
    PlanJob p;
    p.id = "j" + std::to_string(i);
    p.own = Config{own[i], 64 * own[i], 1, kRef, 1.0};
    if (cur[i] > 0) p.current = Config{cur[i], 64 * cur[i], 1, 0, 1.0};
    r.jobs.push_back(p);
    JobState s;
    s.req_gpus = own[i];
    s.ref_batch = 64 * own[i];
    s.ref_samples_per_s = kRef;
    s.cur_gpus = cur[i];
    s.cur_batch = cur[i] > 0 ? 64 * cur[i] : 0;
    pool.push_back(s);
    LiveJob l;
    l.id = p.id;
    l.spec = parse_job_spec(R"({"name": "x", "command": ["p"], "min_batch": 64, "max_batch": 256, "max_workers": 4,
                               "workers": )" + std::to_string(own[i]) + R"(, "batch": )" + std::to_string(64 * own[i]) + "}",
                            "x");
    l.running = cur[i] > 0;
    l.workers = cur[i];
    l.batch = cur[i] > 0 ? 64 * cur[i] : 0;
    live.push_back(l);
  }
  const Plan want = decide(r);
  const std::vector<Assignment> a = make_policy("static")->plan(pool, 4, 0);
  LivePolicy lp;
  lp.name = "static";
  lp.slots = 4;
  const LivePlan l = plan_live(live, lp);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(a[static_cast<size_t>(i)].gpus, want.choices[static_cast<size_t>(i)].config.gpus) << "pool, job " << i;
    EXPECT_EQ(l.choices[static_cast<size_t>(i)].slots, want.choices[static_cast<size_t>(i)].config.gpus) << "live, job " << i;
  }
  EXPECT_EQ(want.choices[1].config.gpus, 0);  // blocked
  EXPECT_EQ(want.choices[2].config.gpus, 0);  // behind it, although it would fit
}
