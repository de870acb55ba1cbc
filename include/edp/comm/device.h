// The communicator that reduces a rank's gradients where they live.
#pragma once
#include <memory>

#include "edp/comm/communicator.h"
#include "edp/core/tensor.h"

namespace edp::comm {

// Collective over `world`. CPU: nullptr (reduce over `world` itself). GPU: NCCL over one rank per
// GPU, or — when two ranks of `world` use one GPU (its UUID, gathered from every rank; e.g.
// edprun --ranks-per-gpu K) — the colocated communicator (CUDA IPC inside a GPU, NCCL between
// GPUs). Call it again with the new world after a membership change: the choice follows the
// ranks' GPUs then, not the launcher's EDP_GPU_RANKS.
std::unique_ptr<Communicator> make_device_communicator(Communicator& world, Device device);

}  // namespace edp::comm
