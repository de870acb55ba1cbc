// Fuzz target: hostfiles (Open MPI's `host slots=N max_slots=M`) and Slurm node lists
// ("node[01-04],gpu7"), the two ways edprun learns its hosts.
#include <string>

#include "edp/core/error.h"
#include "fuzz_util.h"
#include "launch/launch_plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    for (const auto& h : edp::launch::parse_hostfile_text(text, "fuzz"))
      if (h.name.empty() || h.slots < 0 || h.max_slots < 0) std::abort();
  } catch (const edp::Error&) {
  }
  try {
    (void)edp::launch::expand_slurm_nodelist(text);
  } catch (const edp::Error&) {
  }
  return 0;
}
