#include "edp/comm/device.h"

#include "edp/comm/colocated.h"
#include "edp/comm/nccl.h"

namespace edp::comm {

std::unique_ptr<Communicator> make_device_communicator(Communicator& world, Device device) {
  if (device.is_cpu()) return nullptr;
  // The kind follows the GPUs the ranks actually use, gathered from every rank, so that all of
  // them choose alike. A launcher's per-rank variables cannot decide it: after an in-place grow
  // the first ranks keep those of the size they started at (EDP_GPU_RANKS = 1 for one rank on
  // a GPU) while the spawned ones get those of the new size (2), and ranks that chose different
  // communicators would meet in different collectives.
  const bool shared = !duplicate_gpu_error(gather_gpu_identities(world, device.index)).empty();
  if (shared) return make_colocated_communicator(world);
  return make_nccl_communicator(world, device.index);
}

}  // namespace edp::comm
