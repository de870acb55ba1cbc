// edprun's command line and what a launch needs from it (edprun_options.cpp), shared with the
// launcher (edprun.cpp).
#pragma once
#include <string>

#include "edp/core/cli.h"
#include "launch/launch_plan.h"
#include "launch/system.h"

namespace edp::launch {

// What a launch needs, from the flags on: the request, the GPUs found, the plan, the files.
struct Setup {
  LaunchRequest req;
  Discovery disc;
  Plan plan;
  std::string events_file, mps_control, hostfile;
  bool dry = false, verbose = false, reread = false;
};

// edprun's flags (their names, defaults, ranges and help).
cli::Options edprun_options();
// The request from the flags, the environment and this host (no file is created yet).
void fill_request(const cli::Options& o, Setup& s);

// Variables of other programs (SLURM_*, TMPDIR); EDP_* ones go through the knob registry.
std::string sys_env_or(const char* name, const std::string& fallback);
int sys_env_int(const char* name, int fallback);

}  // namespace edp::launch
