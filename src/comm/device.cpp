#include "edp/comm/device.h"

#include "edp/comm/colocated.h"
#include "edp/comm/nccl.h"
#include "edp/core/knobs.h"

namespace edp::comm {

std::unique_ptr<Communicator> make_device_communicator(Communicator& world, Device device) {
  if (device.is_cpu()) return nullptr;
  if (knobs::get_int("EDP_GPU_RANKS") > 1) return make_colocated_communicator(world);
  return make_nccl_communicator(world, device.index);
}

}  // namespace edp::comm
