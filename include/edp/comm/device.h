// The communicator that reduces a rank's gradients where they live.
#pragma once
#include <memory>

#include "edp/comm/communicator.h"
#include "edp/core/tensor.h"

namespace edp::comm {

// Collective over `world`. CPU: nullptr (reduce over `world` itself). GPU: NCCL over one rank per
// GPU, or — when the launcher put several ranks on each GPU (edprun --ranks-per-gpu K, which sets
// EDP_GPU_RANKS = K) — the colocated communicator (CUDA IPC inside a GPU, NCCL between GPUs).
// Call it again with the new world after a membership change.
std::unique_ptr<Communicator> make_device_communicator(Communicator& world, Device device);

}  // namespace edp::comm
