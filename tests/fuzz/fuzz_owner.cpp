// Fuzz target: edprun's owner record (owner.json in a job directory), which a later edprun reads
// to decide whether a directory is a dead job's, and what of it to remove.
#include <string>

#include "edp/core/error.h"
#include "fuzz_util.h"
#include "launch/jobdir.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const edp::launch::JobOwner o = edp::launch::parse_owner(text, "fuzz");
    if (o.pid < 0) std::abort();
    (void)edp::launch::owner_is_dead(o);
  } catch (const edp::Error&) {
  }
  return 0;
}
