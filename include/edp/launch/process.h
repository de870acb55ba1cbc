// Process identity across pid reuse for launchers' records (edprun's owner.json and mpirun.pid,
// edp-autoscale serve's keeper.json): edp/core/process.h, used here under launch's names.
#pragma once
#include "edp/core/process.h"

namespace edp::launch {

using edp::process_start_time;

}  // namespace edp::launch
