// A job's memory need per GPU (edp/autoscale/memory.h).
#include "edp/autoscale/memory.h"

#include <cstdio>

namespace edp::autoscale {

int64_t bytes_per_gpu(const MemoryNeed& m, int gpus, int ranks_per_gpu) {
  const int64_t ranks = static_cast<int64_t>(gpus > 0 ? gpus : 1) * (ranks_per_gpu > 0 ? ranks_per_gpu : 1);
  const int64_t state = m.zero_stage >= 1 ? (m.optimizer_state_bytes + ranks - 1) / ranks : m.optimizer_state_bytes;
  return (ranks_per_gpu > 0 ? ranks_per_gpu : 1) * (m.model_bytes + state);
}

bool fits(const MemoryNeed& m, int64_t device_bytes, int gpus, int ranks_per_gpu) {
  return device_bytes <= 0 || !m.given() || bytes_per_gpu(m, gpus, ranks_per_gpu) <= device_bytes;
}

int min_gpus_for_memory(const MemoryNeed& m, int64_t device_bytes, int max_gpus) {
  if (device_bytes <= 0 || !m.given()) return 1;
  if (m.zero_stage < 1) return fits(m, device_bytes, 1) ? 1 : 0;
  // Sharded: the state per rank falls as ranks are added; the model part does not.
  const int64_t room = device_bytes - m.model_bytes;
  if (room < 0 || (room == 0 && m.optimizer_state_bytes > 0)) return 0;
  const int64_t need = room == 0 ? 1 : (m.optimizer_state_bytes + room - 1) / room;
  const int64_t g = need < 1 ? 1 : need;
  return g <= max_gpus ? static_cast<int>(g) : 0;
}

std::string describe(const MemoryNeed& m) {
  auto gib = [](int64_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0));
    return std::string(buf);
  };
  return "model " + gib(m.model_bytes) + " + optimizer state " + gib(m.optimizer_state_bytes) +
         (m.zero_stage >= 1 ? " sharded over the ranks (zero " + std::to_string(m.zero_stage) + ")" : " on every rank (zero 0)");
}

}  // namespace edp::autoscale
