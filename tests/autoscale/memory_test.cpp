// A job's memory need (edp/autoscale/memory.h) and what the planner makes of it: the fewest GPUs
// against brute force over fits(), options a job does not fit in never chosen (but the one it runs
// in), a job that must run and fits nowhere refused naming the memory, a learned job that has not
// run started where it first fits, and the need read from and written back to plan JSON.
#include <gtest/gtest.h>

#include "edp/autoscale/memory.h"
#include "edp/autoscale/plan.h"
#include "edp/core/error.h"

using namespace edp;
using namespace edp::autoscale;

namespace {
constexpr int64_t kGiB = int64_t{1} << 30;

PlanJob job(const std::string& id, MemoryNeed m, bool may_wait = true) {
  PlanJob j;
  j.id = id;
  j.remaining = 1e6;
  j.may_wait = may_wait;
  j.memory = m;
  for (int g = 1; g <= 8; ++g) j.options.push_back(Config{g, 64 * g, 1, 100.0 * g, 1.0});
  return j;
}
}  // namespace

TEST(Memory, BytesPerGpuShareTheStateWhenSharded) {
  const MemoryNeed whole{2 * kGiB, 12 * kGiB, 0}, sharded{2 * kGiB, 12 * kGiB, 1};
  EXPECT_EQ(bytes_per_gpu(whole, 4), 14 * kGiB);
  EXPECT_EQ(bytes_per_gpu(sharded, 4), 5 * kGiB);
  EXPECT_EQ(bytes_per_gpu(sharded, 4, 2), 2 * (2 * kGiB + 12 * kGiB / 8)) << "two ranks per GPU: each holds its part";
  EXPECT_EQ(bytes_per_gpu(sharded, 5), 2 * kGiB + (12 * kGiB + 4) / 5) << "the share rounds up";
}

// The fewest GPUs is the first count fits() accepts, for every need and device size of a grid.
TEST(Memory, FewestGpusIsTheFirstThatFits) {
  for (int zero : {0, 1, 2})
    for (int64_t model : {int64_t{0}, 1 * kGiB, 7 * kGiB})
      for (int64_t state : {int64_t{0}, 3 * kGiB, 40 * kGiB + 17})
        for (int64_t device : {int64_t{0}, 8 * kGiB, 16 * kGiB, 80 * kGiB}) {
          const MemoryNeed m{model, state, zero};
          int want = 0;
          for (int g = 1; g <= 16 && want == 0; ++g)
            if (fits(m, device, g)) want = g;
          EXPECT_EQ(min_gpus_for_memory(m, device, 16), want)
              << "zero " << zero << " model " << model << " state " << state << " device " << device;
        }
}

TEST(Memory, ThePlanNeverChoosesAnOptionTheJobDoesNotFit) {
  PlanRequest r;
  r.gpus = 8;
  r.gpu_memory_bytes = 16 * kGiB;
  r.jobs.push_back(job("sharded", {2 * kGiB, 40 * kGiB, 1}));  // 2 + 40/g <= 16 from g = 3
  r.jobs.push_back(job("small", {1 * kGiB, 2 * kGiB, 0}));
  const Plan p = decide(r);
  EXPECT_GE(p.choices[0].config.gpus, 3);
  EXPECT_GE(p.choices[1].config.gpus, 1);
  // Without the GPUs' memory the need is not used: the DP splits the GPUs by value alone.
  r.gpu_memory_bytes = 0;
  r.gpus = 2;
  const Plan q = decide(r);
  EXPECT_EQ(q.choices[0].config.gpus + q.choices[1].config.gpus, 2);
  EXPECT_EQ(q.choices[0].config.gpus, 1);
}

TEST(Memory, AJobThatMustRunAndFitsNowhereIsRefusedNamingTheMemory) {
  PlanRequest r;
  r.gpus = 8;
  r.gpu_memory_bytes = 16 * kGiB;
  r.jobs.push_back(job("whole", {2 * kGiB, 40 * kGiB, 0}, false));  // unsharded: 42 GiB on every GPU
  try {
    decide(r);
    ADD_FAILURE() << "a job that fits no option was planned";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("'memory'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("none of its options fits"), std::string::npos) << e.what();
  }
  // Running where it does not fit by this arithmetic (the need was an estimate): it may stay.
  r.jobs[0].current = Config{2, 128, 1, 0, 1.0};
  EXPECT_EQ(decide(r).choices[0].config.gpus, 2);
}

TEST(Memory, ALearnedJobThatHasNotRunStartsWhereItFirstFits) {
  PlanRequest r;
  r.gpus = 8;
  r.gpu_memory_bytes = 16 * kGiB;
  PlanJob j;
  j.id = "new";
  j.remaining = 1e6;
  j.learned = true;
  j.learn.init_batch = 32;
  j.learn.max_batch = 1024;
  j.learn.min_local = 1;
  j.learn.max_local = 256;
  j.memory = {2 * kGiB, 40 * kGiB, 1};
  r.jobs.push_back(j);
  EXPECT_EQ(decide(r).choices[0].config.gpus, 3);
}

TEST(Memory, ThePlanJsonCarriesTheNeed) {
  const std::string text = R"({"version": 2, "gpus": 4, "gpu_memory_bytes": 17179869184, "jobs": [
    {"id": "a", "remaining": 1000, "memory": {"model_bytes": 2147483648, "optimizer_state_bytes": 42949672960, "zero": 1},
     "options": [{"gpus": 1, "batch": 64, "samples_per_s": 100}, {"gpus": 3, "batch": 192, "samples_per_s": 250}]}]})";
  const PlanRequest r = parse_plan_request(text, "req");
  EXPECT_EQ(r.gpu_memory_bytes, 16 * kGiB);
  EXPECT_EQ(r.jobs[0].memory.optimizer_state_bytes, 40 * kGiB);
  EXPECT_EQ(r.jobs[0].memory.zero_stage, 1);
  EXPECT_EQ(decide(r).choices[0].config.gpus, 3);
  const PlanRequest back = parse_plan_request(plan_request_json(r), "round trip");
  EXPECT_EQ(back.gpu_memory_bytes, r.gpu_memory_bytes);
  EXPECT_EQ(back.jobs[0].memory.model_bytes, r.jobs[0].memory.model_bytes);
  EXPECT_THROW(parse_plan_request(R"({"version": 2, "gpus": 1, "jobs": [{"id": "a", "remaining": 1, "memory": {"zero": 1},
    "options": [{"gpus": 1, "batch": 1, "samples_per_s": 1}]}]})", "req"), DataError) << "a need without bytes";
  EXPECT_THROW(parse_plan_request(R"({"version": 2, "gpus": 1, "jobs": [{"id": "a", "remaining": 1,
    "memory": {"model_bytes": 1, "zero": 3}, "options": [{"gpus": 1, "batch": 1, "samples_per_s": 1}]}]})", "req"), DataError);
}
