// decide() on a cluster of several GPU types (PlanRequest::types, docs/plan.md "Several GPU
// types"): the documented example, the decision against brute force over the same values, the
// JSON round trip, FIFO and memory per type, and each refusal naming its field.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "edp/autoscale/online.h"
#include "edp/autoscale/plan.h"
#include "edp/autoscale/typed_optimizer.h"
#include "edp/core/error.h"
#include "edp/core/random.h"

namespace edp::autoscale {
namespace {

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

PlanRequest example() {
  return parse_plan_request(read(std::string(EDP_SOURCE_DIR) + "/docs/plan_types_example.json"), "example");
}

TEST(PlanTypes, TheDocumentedExample) {
  const PlanRequest req = example();
  ASSERT_EQ(req.types.size(), 2u);
  EXPECT_EQ(req.gpus, 12);  // the types' sum
  const Plan p = decide(req);
  ASSERT_EQ(p.choices.size(), 2u);
  EXPECT_EQ(p.choices[0].option, 1);  // the running job moves to 4 A100s
  EXPECT_EQ(p.choices[0].config.type, "a100");
  EXPECT_EQ(p.choices[1].option, 1);  // the queued one starts on 2 A100s
  EXPECT_EQ(p.nodes[0], (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(p.nodes[1], (std::vector<int>{1, 1}));
  const std::string out = plan_json(req, p, 0.0);
  EXPECT_NE(out.find("\"action\": \"move\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"type\": \"a100\""), std::string::npos) << out;
}

TEST(PlanTypes, TheJsonRoundTripGivesTheSameDecision) {
  const PlanRequest req = example();
  const PlanRequest again = parse_plan_request(plan_request_json(req), "again");
  ASSERT_EQ(again.types.size(), req.types.size());
  EXPECT_EQ(again.types[0].nodes, req.types[0].nodes);
  const Plan a = decide(req), b = decide(again);
  for (size_t i = 0; i < a.choices.size(); ++i) {
    EXPECT_EQ(a.choices[i].option, b.choices[i].option);
    EXPECT_EQ(a.nodes[i], b.nodes[i]);
  }
  EXPECT_EQ(a.objective, b.objective);
}

// Random typed requests: decide()'s objective is brute force's over the values decide() reports.
TEST(PlanTypes, TheDecisionIsOptimalOverItsValues) {
  Rng rng(9);
  for (int round = 0; round < 60; ++round) {
    PlanRequest req;
    req.objective = Objective::RestartAware;
    req.types = {GpuType{"a", 1 + static_cast<int>(rng.below(4)), {}, 0},
                 GpuType{"b", 1 + static_cast<int>(rng.below(4)), {}, 0}};
    req.gpus = req.types[0].gpus + req.types[1].gpus;
    const int J = 2 + static_cast<int>(rng.below(3));
    for (int j = 0; j < J; ++j) {
      PlanJob p;
      p.id = "j" + std::to_string(j);
      p.remaining = 1000 * (1 + rng.uniform());
      for (const char* t : {"a", "b"})
        for (int g = 1; g <= 3; ++g) p.options.push_back(Config(g, 32 * g, 1, (t[0] == 'a' ? 2.0 : 1.0) * g * (0.5 + rng.uniform()), 1.0, t));
      req.jobs.push_back(p);
    }
    const Plan plan = decide(req);
    std::vector<TypedJob> jobs;
    for (size_t i = 0; i < req.jobs.size(); ++i) {
      TypedJob tj;
      for (size_t k = 0; k < req.jobs[i].options.size(); ++k) {
        const Config& o = req.jobs[i].options[k];
        TypedOption to;
        to.gpus = {o.type == "a" ? o.gpus : 0, o.type == "b" ? o.gpus : 0};
        to.value = plan.values[i][k];
        tj.options.push_back(to);
      }
      jobs.push_back(tj);
    }
    const TypedSolution brute = solve_typed_brute_force(jobs, {req.types[0].gpus, req.types[1].gpus});
    EXPECT_NEAR(plan.objective, brute.objective, 1e-12 * brute.objective) << "round " << round;
    int used_a = 0, used_b = 0;
    for (const PlanChoice& c : plan.choices) (c.config.type == "a" ? used_a : used_b) += c.config.gpus;
    EXPECT_LE(used_a, req.types[0].gpus);
    EXPECT_LE(used_b, req.types[1].gpus);
  }
}

TEST(PlanTypes, FifoStartsAJobWhereItsTypeHasRoom) {
  PlanRequest req;
  req.objective = Objective::Fifo;
  req.types = {GpuType{"a", 2, {}, 0}, GpuType{"b", 2, {}, 0}};
  req.gpus = 4;
  PlanJob run;
  run.id = "run";
  run.current = Config(2, 64, 1, 0, 1.0, "a");
  run.own = run.current;
  PlanJob next;
  next.id = "next";
  next.own = Config(2, 64, 1, 1.0, 1.0, "b");
  req.jobs = {run, next};
  const Plan p = decide(req);
  EXPECT_EQ(p.choices[1].config.gpus, 2);
  EXPECT_EQ(p.choices[1].config.type, "b");
  req.jobs[1].own.type = "a";  // its type is full: it waits
  EXPECT_EQ(decide(req).choices[1].config.gpus, 0);
}

TEST(PlanTypes, EachTypeHasItsOwnMemory) {
  PlanRequest req = example();
  req.types[0].gpu_memory_bytes = int64_t{8} << 30;   // a100: 8 GiB
  req.types[1].gpu_memory_bytes = int64_t{32} << 30;  // v100: 32 GiB
  req.jobs[1].memory.model_bytes = int64_t{12} << 30;  // the queued job fits only the V100s
  const Plan p = decide(req);
  EXPECT_EQ(p.choices[1].config.type, "v100");
  EXPECT_EQ(p.nodes[1], (std::vector<int>{2, 2}));  // the V100s' node: numbered after the A100s' two
}

void expect_refused(PlanRequest req, const std::string& what) {
  try {
    decide(req);
    ADD_FAILURE() << "no error, expected: " << what;
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(PlanTypes, RefusalsNameTheField) {
  PlanRequest r = example();
  r.jobs[1].options[0].type = "h100";
  expect_refused(r, "field 'options[0].type': type 'h100' is not one of the request's types (a100, v100)");
  r = example();
  r.jobs[1].options[0].type = "";
  expect_refused(r, "field 'options[0].type': names no type");
  r = example();
  r.gpus = 13;
  expect_refused(r, "the types hold 12 GPUs but gpus = 13");
  r = example();
  r.types[1].nodes.clear();
  expect_refused(r, "either every type gives its nodes or none does");
  r = example();
  r.types[1].name = "a100";
  expect_refused(r, "'a100' is listed twice");
  r = example();
  r.jobs[0].current_nodes = {0, 0, 0, 0};  // an A100 node for a job on V100s
  expect_refused(r, "node 0 is not one of type 'v100' (nodes 2 to 2)");
  r = example();
  r.jobs[1].learned = true;
  r.jobs[1].learn.init_batch = 32;
  r.jobs[1].learn.max_batch = 32;
  r.jobs[1].learn.max_local = 32;
  r.jobs[1].options.clear();
  r.jobs[1].learn.types = {TypeLearn{"h100", 0, 3.0}};
  expect_refused(r, "field 'learn.types': type 'h100' is not one of the request's types (a100, v100)");
  r.jobs[1].learn.types.clear();
  r.jobs[1].learn.observed = {StepObservation{1, 1, 32, 0.1, 0, "tpu"}};
  expect_refused(r, "field 'learn.observed[0].type': 'tpu' is not one of the request's types");
  PlanRequest untyped;
  untyped.gpus = 2;
  PlanJob j;
  j.id = "x";
  j.remaining = 1;
  j.options = {Config(1, 1, 1, 1.0, 1.0, "a100")};
  untyped.jobs = {j};
  expect_refused(untyped, "type 'a100' in a request without types");
  EXPECT_THROW(parse_plan_request(R"({"version": 2, "types": [], "jobs": []})", "x"), DataError);
  EXPECT_THROW(parse_plan_request(R"({"version": 2, "types": [{"name": "a", "gpus": 2}], "nodes": [2], "jobs": []})", "x"),
               DataError);
}

// ---- learned jobs: each type's speed from what the job reported there --------------------------

PlanRequest learned_request() {
  PlanRequest req;
  req.objective = Objective::RestartAware;
  req.types = {GpuType{"fast", 8, {}, 0}, GpuType{"slow", 8, {}, 0}};
  req.gpus = 16;
  PlanJob j;
  j.id = "j";
  j.remaining = 1e6;
  j.learned = true;
  j.learn.init_batch = 64;
  j.learn.max_batch = 64;  // one batch: the options differ by type and GPUs only
  j.learn.max_local = 64;
  j.learn.types = {TypeLearn{"fast", 0, 2.0}, TypeLearn{"slow", 0, 1.0}};
  req.jobs = {j};
  return req;
}

double rate(const PlanRequest& req, const std::string& type, int gpus) {
  for (const Config& c : req.jobs[0].options)
    if (c.type == type && c.gpus == gpus) return c.samples_per_s;
  return -1;
}

TEST(PlanTypes, AnUnseenTypeIsProjectedBySpeed) {
  PlanRequest req = learned_request();
  req.jobs[0].learn.observed = {StepObservation{1, 1, 64, 0.5, 0, "slow"}, StepObservation{1, 2, 32, 0.3, 0.05, "slow"}};
  expand_learned(req);
  ASSERT_GT(rate(req, "slow", 1), 0);
  // The fast type has no observation: the slow type's model, twice as fast (its stated speed).
  for (int g : {1, 2}) EXPECT_NEAR(rate(req, "fast", g), 2.0 * rate(req, "slow", g), 1e-9 * rate(req, "slow", g)) << g;
  // Exploration is shared: up to explore (4) x the most GPUs it ran at (2) on either type.
  EXPECT_GT(rate(req, "fast", 8), 0);
  EXPECT_GT(rate(req, "slow", 8), 0);
  PlanRequest again = learned_request();  // decide() expands the same
  again.jobs[0].learn.observed = req.jobs[0].learn.observed;
  EXPECT_EQ(decide(again).choices[0].config.type, "fast");
}

TEST(PlanTypes, ATypeItRanOnIsItsOwnModel) {
  PlanRequest req = learned_request();
  // On the fast type it was 5x faster than the slow one, not 2x as stated: what it measured counts.
  req.jobs[0].learn.observed = {StepObservation{1, 1, 64, 0.5, 0, "slow"}, StepObservation{1, 1, 64, 0.1, 0, "fast"}};
  expand_learned(req);
  EXPECT_NEAR(rate(req, "fast", 1), 5.0 * rate(req, "slow", 1), 1e-9 * rate(req, "fast", 1));
}

TEST(PlanTypes, AJobThatHasNotRunGetsOneGpuOfEachType) {
  PlanRequest req = learned_request();
  expand_learned(req);
  ASSERT_EQ(req.jobs[0].options.size(), 2u);
  EXPECT_EQ(req.jobs[0].options[0].gpus, 1);
  EXPECT_NEAR(rate(req, "fast", 1), 2.0 * rate(req, "slow", 1), 1e-12 * rate(req, "fast", 1));
}

}  // namespace
}  // namespace edp::autoscale
