// The live autoscaler's pure part (edp/autoscale/live.h): job specs, the fit of a job's own step
// times, and the planning round's guarantees. The controller with real processes is tested by
// live_e2e.sh.
#include "edp/autoscale/live.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <map>

#include <random>

#include "edp/core/error.h"

using namespace edp;
using namespace edp::autoscale;

namespace {

const char* kGood = R"({"name": "mlp", "command": ["/bin/prog", "--x"], "min_workers": 1, "max_workers": 4,
  "workers": 2, "min_batch": 64, "max_batch": 256, "batch": 128, "max_worker_batch": 128})";

std::string refusal(const std::string& text) {
  try {
    parse_job_spec(text, "spec.json");
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

// A running job measured at its size, with a linear step-time law, so that predictions are exact.
LiveJob measured_job(const std::string& id, int workers, int64_t batch, int max_workers, int64_t done, int64_t total) {
  LiveJob j;
  j.id = id;
  j.spec = parse_job_spec(R"({"name": ")" + id + R"(", "command": ["p"], "min_batch": 64, "max_batch": 256, "max_workers": )" +
                              std::to_string(max_workers) + "}",
                          id);
  j.running = true;
  j.workers = workers;
  j.batch = batch;
  j.settled = true;
  for (int w : {1, 2}) {
    for (int64_t b : {int64_t{64}, int64_t{128}}) {
      // compute 1 ms + 0.1 ms per local sample, exposed communication 0.5 ms per worker above 1
      const double comm = w > 1 ? 0.0005 * w : 0.0;
      j.measured.push_back({w, 1, b, 50, 0.001 + 0.0001 * (static_cast<double>(b) / w) + comm, comm});
    }
  }
  j.samples_done = done;
  j.samples_total = total;
  return j;
}

}  // namespace

TEST(JobSpec, ParsesAndRoundTrips) {
  const JobSpec s = parse_job_spec(kGood, "spec.json");
  EXPECT_EQ(s.name, "mlp");
  EXPECT_EQ(s.workers, 2);
  EXPECT_EQ(s.batch, 128);
  EXPECT_FALSE(s.preemptible);
  const JobSpec t = parse_job_spec(job_spec_json(s), "again");
  EXPECT_EQ(job_spec_json(t), job_spec_json(s));
}

TEST(JobSpec, RefusalsNameTheField) {
  EXPECT_NE(refusal(R"({"name": "x", "command": ["p"], "min_batch": 64, "nope": 1})").find("field 'nope'"), std::string::npos);
  EXPECT_NE(refusal(R"({"name": "x", "command": ["p"]})").find("field 'min_batch'"), std::string::npos);
  EXPECT_NE(refusal(R"({"name": "a b", "command": ["p"], "min_batch": 64})").find("field 'name'"), std::string::npos);
  EXPECT_NE(refusal(R"({"name": "x", "command": "p", "min_batch": 64})").find("field 'command'"), std::string::npos);
  EXPECT_NE(refusal(R"({"name": "x", "command": ["p"], "min_batch": 64, "max_batch": 32})").find("field 'max_batch'"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"name": "x", "command": ["p"], "min_batch": 64, "max_batch": 256, "workers": 3, "max_workers": 4, "batch": 100})")
                .find("does not split evenly"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"name": "x", "command": ["p"], "min_batch": 64, "min_workers": 0})").find("field 'min_workers'"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"name": "x", "command": ["p"], "min_batch": 1e30})").find("field 'min_batch'"), std::string::npos);
  EXPECT_NE(refusal(R"({"name": "x", "command": ["p"], "min_batch": 64, "weight": -1})").find("field 'weight'"), std::string::npos);
  EXPECT_NE(refusal(R"({"name": "x", "command": ["p"], "min_batch": 64, "max_worker_batch": 16})").find("field 'max_worker_batch'"),
            std::string::npos);
  EXPECT_NE(refusal("[1, 2]").find("JSON object"), std::string::npos);
  EXPECT_NE(refusal("{").find("not valid JSON"), std::string::npos);
}

// A spec that can never start is refused when it is parsed (submit), naming the field: a
// NAME=value or an argument exec(2) cannot pass on, or too many of them (100,000 arguments).
TEST(JobSpec, SpecsThatCouldNeverStartAreRefused) {
  nlohmann::json j = nlohmann::json::parse(kGood);
  j["env"] = {{"BIG", std::string(10 << 20, 'x')}};
  std::string m = refusal(j.dump());
  EXPECT_NE(m.find("field 'env': 'BIG' is 10485764 bytes as NAME=value, more than the 131071 exec(2) passes on"),
            std::string::npos)
      << m.substr(0, 300);
  j = nlohmann::json::parse(kGood);
  j["command"] = std::vector<std::string>(100000, "x");
  m = refusal(j.dump());
  EXPECT_NE(m.find("field 'command': 100000 arguments, more than the 4096"), std::string::npos) << m.substr(0, 300);
  j = nlohmann::json::parse(kGood);
  j["env"] = nlohmann::json::object();
  for (int i = 0; i < 12; ++i) {
    std::string name = "V";  // appended, not "V" + ...: GCC 12 warns (-Wrestrict) on the operator+
    name += std::to_string(i);
    j["env"][name] = std::string(100000, 'v');
  }
  m = refusal(j.dump());
  EXPECT_NE(m.find("a job's exec(2) can be given"), std::string::npos) << m.substr(0, 300);
  j = nlohmann::json::parse(kGood);
  j["env"] = {{"OK", std::string(1000, 'v')}};
  EXPECT_EQ(refusal(j.dump()), "");
}

// The fit recovers an exact law: compute a + c*b, communication s0 + s1*w (tolerance 1e-9
// relative: a least-squares solve of consistent equations, only rounding error).
TEST(FitMeasured, RecoversAnExactLaw) {
  std::vector<Measured> m;
  for (int w : {1, 2, 4})
    for (int64_t b : {int64_t{64}, int64_t{256}}) {
      const double comm = w > 1 ? 0.002 + 0.0005 * w : 0.0;
      m.push_back({w, 1, b, 20, 0.003 + 0.00002 * (static_cast<double>(b) / w) + comm, comm});
    }
  const StepTimeModel f = fit_measured(m);
  EXPECT_NEAR(f.a, 0.003, 1e-9 * 0.003 * 10);
  EXPECT_NEAR(f.c, 0.00002, 1e-9);
  EXPECT_NEAR(f.s0, 0.002, 1e-9);
  EXPECT_NEAR(f.s1, 0.0005, 1e-9);
}

TEST(FitMeasured, OnePointMeansLinearScalingUntilMeasured) {
  const StepTimeModel f = fit_measured({{1, 1, 64, 10, 0.064, 0.0}});
  EXPECT_EQ(f.a, 0.0);
  EXPECT_NEAR(f.c, 0.001, 1e-12);
  EXPECT_EQ(f.s0, 0.0);
  EXPECT_EQ(f.s1, 0.0);
  EXPECT_NEAR(f.samples_per_s(4, 256), 1000.0 * 4, 1e-6);
}

// An unmeasured configuration is predicted from the measured one nearest to it, shrunk toward it:
// the model's speedup raised to trust = n / (n + 1). Measured at 1 worker only (1,000 samples/s,
// a model through the origin: linear scaling), 2 workers are predicted at 1000 * 2^(1/2), not the
// model's 2,000; 4 workers at 1000 * 4^(1/2). A measured configuration is its measurement.
// (Tolerance 1e-9 relative: pow and one division of exact inputs.)
TEST(Predictor, UnmeasuredConfigurationsAreShrunkTowardTheMeasured) {
  LiveJob j = measured_job("a", 1, 64, 4, 0, 1'000'000);
  j.measured = {{1, 1, 64, 50, 0.064, 0.0}};
  LivePolicy p;
  const Predictor pred(j, p, 500.0);
  EXPECT_DOUBLE_EQ(pred.trust(), 0.5);
  bool was_measured = false;
  EXPECT_NEAR(pred.samples_per_s(1, 1, 64, &was_measured), 1000.0, 1e-9 * 1000);
  EXPECT_TRUE(was_measured);
  EXPECT_NEAR(pred.samples_per_s(2, 1, 128, &was_measured), 1000.0 * std::sqrt(2.0), 1e-9 * 1414);
  EXPECT_FALSE(was_measured);
  EXPECT_NEAR(pred.samples_per_s(4, 1, 256), 2000.0, 1e-9 * 2000);
  // A step below the warm-up count is not a measurement: the prior (500 per rank) is all there is.
  j.measured = {{1, 1, 64, p.measured_steps() - 1, 0.064, 0.0}};
  const Predictor early(j, p, 500.0);
  EXPECT_DOUBLE_EQ(early.trust(), 0.0);
  EXPECT_NEAR(early.samples_per_s(2, 1, 128), 1000.0, 1e-9 * 1000);
}

TEST(PlanLive, GrowsIntoFreeSlotsAndHoldsWithoutGain) {
  LivePolicy p;
  p.name = "dp";
  p.slots = 4;
  // Lots of work left: growing pays for its pause. Measured at 1 worker only: it may go to 2.
  LiveJob one = measured_job("a", 1, 64, 4, 0, 1'000'000);
  std::erase_if(one.measured, [](const Measured& m) { return m.workers != 1; });
  LivePlan plan = plan_live({one}, p);
  ASSERT_EQ(plan.choices.size(), 1u);
  EXPECT_EQ(plan.choices[0].action, Action::Grow) << plan.choices[0].reason;
  EXPECT_EQ(plan.choices[0].workers, 2) << "explores at most explore_factor x the largest size measured (1)";
  plan = plan_live({measured_job("a", 1, 64, 4, 0, 1'000'000)}, p);  // measured at 2: may go to 4
  EXPECT_EQ(plan.choices[0].workers, 4) << plan.choices[0].reason;
  // Almost done: a rescale's pause outweighs its gain.
  plan = plan_live({measured_job("a", 1, 64, 4, 999'900, 1'000'000)}, p);
  EXPECT_EQ(plan.choices[0].action, Action::Hold) << plan.choices[0].reason;
  // Not measured at its size yet: it holds.
  LiveJob j = measured_job("a", 1, 64, 4, 0, 1'000'000);
  j.settled = false;
  plan = plan_live({j}, p);
  EXPECT_EQ(plan.choices[0].action, Action::Hold);
}

TEST(PlanLive, HysteresisKeepsNearEqualOptions) {
  LivePolicy p;
  p.name = "dp";
  p.slots = 2;
  p.default_pause_s = 0;
  LiveJob j = measured_job("a", 2, 128, 2, 0, 1'000'000);
  // Make 2 x 64 measured 10% faster than 2 x 128 per sample: below a 15% hysteresis.
  for (Measured& m : j.measured)
    if (m.workers == 2 && m.batch == 64) m.step_s = 64.0 / (1.10 * 128.0 / j.measured[3].step_s);
  p.hysteresis = 0.15;
  EXPECT_EQ(plan_live({j}, p).choices[0].action, Action::Hold);
  p.hysteresis = 0.0;
  EXPECT_NE(plan_live({j}, p).choices[0].action, Action::Hold);
}

TEST(PlanLive, StaticIsFifoAndNeverRescales) {
  LivePolicy p;
  p.name = "static";
  p.slots = 3;
  LiveJob a = measured_job("a", 2, 128, 4, 0, 1000000);
  LiveJob b, c;
  b.spec = parse_job_spec(R"({"name": "b", "command": ["p"], "min_batch": 64, "workers": 2, "max_workers": 2})", "b");
  c.spec = parse_job_spec(R"({"name": "c", "command": ["p"], "min_batch": 64})", "c");
  const LivePlan plan = plan_live({a, b, c}, p);
  EXPECT_EQ(plan.choices[0].action, Action::Hold);
  EXPECT_EQ(plan.choices[1].action, Action::Wait);  // 2 slots needed, 1 free
  EXPECT_EQ(plan.choices[2].action, Action::Wait);  // behind b, although it would fit
}

// Random instances: the plan never uses more slots than there are, keeps every running
// non-preemptible job running within its bounds, and gives started jobs sizes that divide their batch.
TEST(PlanLive, RandomInstancesRespectTheContract) {
  std::mt19937 rng(7);
  for (int it = 0; it < 200; ++it) {
    LivePolicy p;
    p.name = it % 2 ? "dp" : "goodput";
    p.slots = 1 + static_cast<int>(rng() % 8);
    std::vector<LiveJob> jobs;
    int running = 0;
    const int n = 1 + static_cast<int>(rng() % 6);
    for (int k = 0; k < n; ++k) {
      const int maxw = 1 + static_cast<int>(rng() % 4);
      if (rng() % 2 && running + 1 <= p.slots) {
        LiveJob j = measured_job(std::string("j") += std::to_string(k), 1, 64, maxw, static_cast<int64_t>(rng() % 1000), 1000);
        j.settled = rng() % 3 != 0;
        j.spec.grad_noise_scale = rng() % 2 ? 500 : 0;
        jobs.push_back(j);
        running += 1;
      } else {
        LiveJob j;
        j.id = std::string("q") += std::to_string(k);
        std::string text = R"({"name": "q", "command": ["p"], "min_batch": 32, "max_batch": 96, "max_workers": )";
        text += std::to_string(maxw);
        text += "}";
        j.spec = parse_job_spec(text, "q");
        jobs.push_back(j);
      }
    }
    const LivePlan plan = plan_live(jobs, p);
    int used = 0;
    for (size_t k = 0; k < jobs.size(); ++k) {
      const LiveChoice& c = plan.choices[k];
      used += c.slots;
      if (jobs[k].running) {
        EXPECT_GT(c.slots, 0) << "a running non-preemptible job was stopped";
      }
      if (c.slots > 0) {
        EXPECT_GE(c.workers, jobs[k].spec.min_workers);
        EXPECT_LE(c.workers, jobs[k].spec.max_workers);
        EXPECT_EQ(c.batch % c.workers, 0);
        EXPECT_GE(c.batch, jobs[k].spec.min_batch);
        EXPECT_LE(c.batch, jobs[k].spec.max_batch);
      }
    }
    EXPECT_LE(used, p.slots);
    EXPECT_EQ(used, plan.slots_used);
  }
}

TEST(PlanLive, GpuSlotsOfferSeveralRanksPerGpuWhenOneRankLeavesItIdle) {
  EXPECT_EQ(colocation_speed(1, 0.3), 1.0);
  EXPECT_EQ(colocation_speed(3, 0.3), 1.0);
  EXPECT_NEAR(colocation_speed(4, 0.5), 0.5, 1e-15);
  LivePolicy p;
  p.name = "dp";
  p.slots = 1;
  p.gpu_slots = true;
  p.max_ranks_per_slot = 4;
  LiveJob j = measured_job("a", 1, 64, 4, 0, 1'000'000);
  j.spec.gpu_busy = 0.3;  // one rank keeps its GPU busy 30% of its step
  const LivePlan plan = plan_live({j}, p);
  EXPECT_EQ(plan.choices[0].slots, 1);
  EXPECT_GT(plan.choices[0].ranks_per_slot, 1) << plan.choices[0].reason;
  j.spec.gpu_busy = 1.0;  // a busy GPU gains nothing from a second rank
  EXPECT_EQ(plan_live({j}, p).choices[0].ranks_per_slot, 1);
}

TEST(PlanLive, PreemptsOnlyPreemptibleJobsForWorthierOnes) {
  LivePolicy p;
  p.name = "dp";
  p.slots = 2;
  // A runs on both slots (it needs both); B, ten times its weight, needs both too.
  LiveJob a = measured_job("a", 2, 128, 2, 0, 1'000'000);
  a.spec = parse_job_spec(R"({"name": "a", "command": ["p"], "min_workers": 2, "max_workers": 2, "workers": 2,
    "min_batch": 64, "max_batch": 256, "batch": 128, "preemptible": true})", "a");
  LiveJob b;
  b.id = "b";
  b.spec = parse_job_spec(R"({"name": "b", "command": ["p"], "min_workers": 2, "max_workers": 2, "workers": 2,
    "min_batch": 64, "max_batch": 256, "batch": 128, "weight": 10})", "b");
  LivePlan plan = plan_live({a, b}, p);
  ASSERT_EQ(plan.choices.size(), 2u);
  EXPECT_EQ(plan.choices[0].action, Action::Stop) << plan.choices[0].reason;
  EXPECT_EQ(plan.choices[0].slots, 0);
  EXPECT_EQ(plan.choices[1].action, Action::Start) << plan.choices[1].reason;
  EXPECT_EQ(plan.choices[1].workers, 2);
  EXPECT_LE(plan.slots_used, 2);
  // The same job not preemptible keeps its slots; B waits.
  a.spec.preemptible = false;
  plan = plan_live({a, b}, p);
  EXPECT_EQ(plan.choices[0].action, Action::Hold) << plan.choices[0].reason;
  EXPECT_EQ(plan.choices[1].action, Action::Wait) << plan.choices[1].reason;
  // Static never preempts, whatever the weights.
  a.spec.preemptible = true;
  p.name = "static";
  plan = plan_live({a, b}, p);
  EXPECT_EQ(plan.choices[0].action, Action::Hold);
  EXPECT_EQ(plan.choices[1].action, Action::Wait);
}

// ---- several GPU types (LivePolicy::types, docs/autoscaler.md §9) --------------------------------

namespace {

// Two types of 2 slots each: "a", and "b" on which a job runs twice as fast before it was measured there.
LivePolicy two_types(const std::string& policy = "dp") {
  LivePolicy p;
  p.name = policy;
  p.slots = 4;
  p.gpu_slots = true;
  p.types = {{"a", 2, 1.0}, {"b", 2, 2.0}};
  return p;
}

LiveJob on_type(LiveJob j, const std::string& type) {
  if (j.running) j.type = type;
  for (Measured& m : j.measured) m.type = type;
  return j;
}

const Config* find_option(const PlanJob& j, const std::string& type, int gpus, int batch) {
  for (const Config& c : j.options)
    if (c.type == type && c.gpus == gpus && c.batch == batch && c.ranks_per_gpu == 1) return &c;
  return nullptr;
}

}  // namespace

// A job measured on "a" only (then queued again: preempted) is offered "b" too, its throughput
// there projected from "a" by the types' speeds (2x), the projection plan's learned jobs use. The
// projected option is no measurement. Exact: the measured rate times 2.
TEST(PlanLiveTypes, AJobMeasuredOnOneTypeGetsOptionsOnTheOther) {
  const LivePolicy p = two_types();
  LiveJob j = on_type(measured_job("q", 1, 64, 2, 0, 1'000'000), "a");
  j.running = false;
  const PlanRequest req = live_request({j}, p);
  ASSERT_EQ(req.types.size(), 2u);
  const double at_a = 64 / j.measured[0].step_s;  // measured_job's first row: 1 worker x 64
  ASSERT_EQ(j.measured[0].workers, 1);
  const Config* a = find_option(req.jobs[0], "a", 1, 64);
  const Config* b = find_option(req.jobs[0], "b", 1, 64);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr) << "no option on the type it was not measured on";
  EXPECT_DOUBLE_EQ(a->samples_per_s, at_a);
  EXPECT_DOUBLE_EQ(b->samples_per_s, 2 * at_a);
  const LivePlan plan = plan_live({j}, p);
  EXPECT_EQ(plan.choices[0].action, Action::Start);
  EXPECT_EQ(plan.choices[0].type, "b") << plan.choices[0].reason;
  EXPECT_FALSE(plan.choices[0].measured) << "a projection is no measurement";
  // Measured on "b" as well: b's own measurements decide there (here: as slow as a).
  LiveJob both = j;
  for (Measured m : j.measured) both.measured.push_back((m.type = "b", m));
  const Config* b_own = find_option(live_request({both}, p).jobs[0], "b", 1, 64);
  ASSERT_NE(b_own, nullptr);
  EXPECT_DOUBLE_EQ(b_own->samples_per_s, at_a);
}

// A type's speed not given (--gpu-speeds) is measured: job x ran on both types at the same sizes,
// every step on "b" twice as fast, so job y, measured on "a" only, is projected onto "b" at twice
// its rate (the geometric mean of the ratios: exact to rounding, 1e-12). Given speeds stand
// whatever was measured, a type not given is measured from them; with no size in common nothing
// is measured and the stated speed counts.
TEST(PlanLiveTypes, SpeedsNotGivenAreMeasuredWhereAJobRanOnBothTypes) {
  LivePolicy p = two_types();
  p.types[1].speed = 1.0;  // stated, not given: as serve states a type no --gpu-speeds names
  LiveJob x = on_type(measured_job("x", 1, 64, 2, 0, 1'000'000), "a");
  x.running = false;
  const std::vector<Measured> on_a = x.measured;
  for (Measured m : on_a) {
    m.type = "b";
    m.step_s /= 2;
    x.measured.push_back(m);
  }
  LiveJob y = on_type(measured_job("y", 1, 64, 2, 0, 1'000'000), "a");
  y.running = false;
  const double at_a = 64 / y.measured[0].step_s;
  const Config* b = find_option(live_request({x, y}, p).jobs[1], "b", 1, 64);
  ASSERT_NE(b, nullptr);
  EXPECT_NEAR(b->samples_per_s, 2 * at_a, 1e-12 * at_a);
  // Both given: they stand, whatever was measured.
  LivePolicy given = p;
  given.types[1].speed = 3.0;
  given.types[0].given = given.types[1].given = true;
  b = find_option(live_request({x, y}, given).jobs[1], "b", 1, 64);
  ASSERT_NE(b, nullptr);
  EXPECT_DOUBLE_EQ(b->samples_per_s, 3 * at_a);
  // Only b's given: a's is measured from it (1.5), the ratio is again the measured one.
  given.types[0].given = false;
  b = find_option(live_request({x, y}, given).jobs[1], "b", 1, 64);
  ASSERT_NE(b, nullptr);
  EXPECT_NEAR(b->samples_per_s, 2 * at_a, 1e-12 * at_a);
  // No size in common (x ran on "b" at another batch): the stated speed, 1.
  LiveJob apart = x;
  for (Measured& m : apart.measured)
    if (m.type == "b") m.batch += 32;
  b = find_option(live_request({apart, y}, p).jobs[1], "b", 1, 64);
  ASSERT_NE(b, nullptr);
  EXPECT_DOUBLE_EQ(b->samples_per_s, at_a);
}

// One type (or none) is the untyped plan: the same request, option for option, and the same choices.
TEST(PlanLiveTypes, OneTypeIsTheUntypedPlan) {
  LivePolicy untyped;
  untyped.name = "goodput";
  untyped.slots = 4;
  LivePolicy one = untyped;
  one.types = {{"h100", 4, 3.0}};
  const std::vector<LiveJob> jobs = {measured_job("a", 1, 64, 4, 0, 1'000'000), measured_job("b", 2, 128, 4, 10, 50'000)};
  const PlanRequest r0 = live_request(jobs, untyped), r1 = live_request(jobs, one);
  EXPECT_TRUE(r1.types.empty());
  ASSERT_EQ(r0.jobs.size(), r1.jobs.size());
  for (size_t i = 0; i < r0.jobs.size(); ++i) {
    ASSERT_EQ(r0.jobs[i].options.size(), r1.jobs[i].options.size());
    for (size_t k = 0; k < r0.jobs[i].options.size(); ++k) {
      EXPECT_EQ(r1.jobs[i].options[k].type, "");
      EXPECT_EQ(r0.jobs[i].options[k].samples_per_s, r1.jobs[i].options[k].samples_per_s);
    }
  }
  const LivePlan p0 = plan_live(jobs, untyped), p1 = plan_live(jobs, one);
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(p0.choices[i].workers, p1.choices[i].workers);
    EXPECT_EQ(p0.choices[i].batch, p1.choices[i].batch);
    EXPECT_EQ(p1.choices[i].type, "");
  }
}

// No job is ever placed across types: every option and choice is on one type and within it, no
// type's slots are over-used, a running job stays on its type; a job that needs more slots than
// any one type has never starts (4 slots in all, 2 of each type). Random instances, as above.
TEST(PlanLiveTypes, AJobIsNeverPlacedAcrossTypes) {
  std::mt19937 rng(11);
  for (int it = 0; it < 200; ++it) {
    LivePolicy p = two_types(it % 3 == 0 ? "static" : it % 2 ? "dp" : "goodput");
    p.types = {{"a", 1 + static_cast<int>(rng() % 3), 1.0}, {"b", 1 + static_cast<int>(rng() % 3), 0.5 + (rng() % 4)}};
    p.slots = p.types[0].slots + p.types[1].slots;
    std::map<std::string, int> used_by_running;
    std::vector<LiveJob> jobs;
    const int n = 1 + static_cast<int>(rng() % 5);
    for (int k = 0; k < n; ++k) {
      const std::string t = rng() % 2 ? "a" : "b";
      const int cap = t == "a" ? p.types[0].slots : p.types[1].slots;
      const int maxw = 1 + static_cast<int>(rng() % 4);
      if (rng() % 2 && used_by_running[t] + 1 <= cap) {
        LiveJob j = on_type(measured_job(std::string("j") += std::to_string(k), 1, 64, maxw, 0, 100'000), t);
        j.settled = rng() % 3 != 0;
        used_by_running[t] += 1;
        jobs.push_back(j);
      } else {
        LiveJob j;
        j.id = std::string("q") += std::to_string(k);
        const int w = 1 << (rng() % 3);  // 1, 2 or 4: the batch splits
        j.spec = parse_job_spec(R"({"name": "q", "command": ["p"], "min_batch": 64, "max_batch": 256, "workers": )" +
                                    std::to_string(w) + R"(, "min_workers": )" + std::to_string(w) +
                                    R"(, "max_workers": 4, "batch": 128})",
                                "q");
        if (rng() % 2) j = on_type(measured_job(j.id, 1, 64, 4, 0, 100'000), t), j.running = false;
        jobs.push_back(j);
      }
    }
    if (p.name != "static")
      for (const PlanJob& pj : live_request(jobs, p).jobs)
        for (const Config& c : pj.options) {
          ASSERT_TRUE(c.type == "a" || c.type == "b") << "option without a type";
          EXPECT_LE(c.gpus, c.type == "a" ? p.types[0].slots : p.types[1].slots) << "option over its type's slots";
        }
    const LivePlan plan = plan_live(jobs, p);
    std::map<std::string, int> used;
    for (size_t k = 0; k < jobs.size(); ++k) {
      const LiveChoice& c = plan.choices[k];
      if (c.slots == 0) continue;
      ASSERT_TRUE(c.type == "a" || c.type == "b") << p.name << ": a choice without a type: " << c.reason;
      used[c.type] += c.slots;
      if (jobs[k].running) {
        EXPECT_EQ(c.type, jobs[k].type) << "a running job moved to another type";
      }
    }
    EXPECT_LE(used["a"], p.types[0].slots) << p.name;
    EXPECT_LE(used["b"], p.types[1].slots) << p.name;
  }
  // 3 slots of each type, a job of 4 workers: it waits, under every policy.
  for (const char* policy : {"dp", "goodput", "static"}) {
    LivePolicy p = two_types(policy);
    p.types = {{"a", 3, 1.0}, {"b", 3, 1.0}};
    p.slots = 6;
    LiveJob big;
    big.id = "big";
    big.spec = parse_job_spec(R"({"name": "big", "command": ["p"], "min_batch": 64, "workers": 4, "min_workers": 4, "max_workers": 4})", "big");
    EXPECT_EQ(plan_live({big}, p).choices[0].slots, 0) << policy;
  }
}

TEST(PlanLiveTypes, UnknownTypesAreRefusedByName) {
  LivePolicy p = two_types();
  const LiveJob j = on_type(measured_job("a", 1, 64, 2, 0, 1'000'000), "v100");
  try {
    plan_live({j}, p);
    FAIL() << "a job on an unknown type was planned";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("job a runs on GPU type 'v100', which is not one of the slots' types (a, b)"),
              std::string::npos)
        << e.what();
  }
  p.types[1].slots = 3;  // 5 slots in the types, 4 in all
  try {
    plan_live({}, p);
    FAIL() << "types that do not add up were taken";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("the types hold 5 slot(s) but the slots are 4"), std::string::npos) << e.what();
  }
}
