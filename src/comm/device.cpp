#include "edp/comm/device.h"

#include <vector>

#include "edp/comm/colocated.h"
#include "edp/comm/nccl.h"
#include "edp/core/process.h"
#include "edp/cuda/runtime.h"

namespace edp::comm {

std::unique_ptr<Communicator> make_device_communicator(Communicator& world, Device device) {
  if (device.is_cpu()) return nullptr;
  // The kind follows the GPUs the ranks actually use, gathered from every rank, so that all of
  // them choose alike. A launcher's per-rank variables cannot decide it: after an in-place grow
  // the first ranks keep those of the size they started at (EDP_GPU_RANKS = 1 for one rank on
  // a GPU) while the spawned ones get those of the new size (2), and ranks that chose different
  // communicators would meet in different collectives.
  const cuda::DeviceInfo info = cuda::device_info(device.index);
  GpuIdentity me;
  me.uuid = info.uuid;
  me.device = device.index;
  me.pci_bus_id = info.pci_bus_id;
  me.host = host_name();
  const auto packed = pack_gpu_identity(me);
  std::vector<uint8_t> all(static_cast<size_t>(kGpuIdentityBytes) * static_cast<size_t>(world.size()));
  world.allgather(packed.data(), all.data(), kGpuIdentityBytes, DType::U8);
  std::vector<GpuIdentity> ids;
  for (int r = 0; r < world.size(); ++r)
    ids.push_back(unpack_gpu_identity(all.data() + static_cast<size_t>(r) * kGpuIdentityBytes));
  const bool shared = !duplicate_gpu_error(ids).empty();
  if (shared) return make_colocated_communicator(world);
  return make_nccl_communicator(world, device.index);
}

}  // namespace edp::comm
