// A job's "memory" object (edp/autoscale/memory.h), read the same way in `plan` requests and
// `submit` specs: {"model_bytes": N, "optimizer_state_bytes": N, "zero": 0|1|2}.
#pragma once
#include "core/json_fields.h"
#include "edp/autoscale/memory.h"

namespace edp::autoscale {

inline MemoryNeed parse_memory(const json_fields::Fields& f) {
  constexpr int64_t kMaxBytes = int64_t{1} << 50;  // 1 PiB
  f.allow({"model_bytes", "optimizer_state_bytes", "zero"});
  MemoryNeed m;
  m.model_bytes = f.integer("model_bytes", 0, kMaxBytes, 0);
  m.optimizer_state_bytes = f.integer("optimizer_state_bytes", 0, kMaxBytes, 0);
  m.zero_stage = static_cast<int>(f.integer("zero", 0, 2, 0));
  if (!m.given()) f.fail("model_bytes", "a memory need gives model_bytes or optimizer_state_bytes (or is left out)");
  return m;
}

}  // namespace edp::autoscale
