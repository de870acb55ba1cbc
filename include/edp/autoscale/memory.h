// What a job needs in each GPU's memory, and so the fewest GPUs it can run on: the autoscaler's
// job specs ("memory" in `plan` requests and in `submit` specs; docs/autoscaler.md).
//
// Every rank holds `model_bytes` whatever the job's size (parameters, gradients, activations,
// workspace) and the optimizer's state: all of it (`zero_stage` 0), or its share over the job's
// ranks (`zero_stage` 1, edp's sharded optimizer state: ceil(state / ranks); 2, the gradients
// sharded too: a job states them in optimizer_state_bytes, the part that is spread). With several ranks
// on one GPU (ranks_per_gpu), the GPU holds each of them.
#pragma once
#include <cstdint>
#include <string>

namespace edp::autoscale {

struct MemoryNeed {
  int64_t model_bytes = 0;
  int64_t optimizer_state_bytes = 0;
  int zero_stage = 0;
  bool given() const { return model_bytes > 0 || optimizer_state_bytes > 0; }
};

// Bytes on each GPU when the job runs on `gpus` GPUs with `ranks_per_gpu` ranks on each.
int64_t bytes_per_gpu(const MemoryNeed& m, int gpus, int ranks_per_gpu = 1);
// Whether it fits GPUs of `device_bytes` there (always, when either is not given: <= 0 / empty).
bool fits(const MemoryNeed& m, int64_t device_bytes, int gpus, int ranks_per_gpu = 1);
// The fewest GPUs (one rank each) up to `max_gpus` on which it fits; 0 when none does. 1 when the
// need or the device's memory is not given.
int min_gpus_for_memory(const MemoryNeed& m, int64_t device_bytes, int max_gpus);
// "model 1.2 GiB + optimizer state 9.6 GiB sharded (zero 1)": the need in words, for messages.
std::string describe(const MemoryNeed& m);

}  // namespace edp::autoscale
