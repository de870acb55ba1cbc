// Fuzz target: the elastic control file ({"workers", "global_batch", "stop"}) and the launcher's
// list of worker counts (EDP_ALLOWED_WORKERS).
#include <string>

#include "edp/core/error.h"
#include "edp/elastic/allowed.h"
#include "edp/elastic/elastic.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const edp::elastic::RescaleRequest r = edp::elastic::parse_control(text, "fuzz");
    if (!r.stop && (r.workers < 1 || r.global_batch < 0 || (r.global_batch > 0 && r.global_batch % r.workers != 0)))
      std::abort();
  } catch (const edp::Error&) {
  }
  try {
    const std::vector<int> counts = edp::elastic::parse_allowed_workers(text);
    if (edp::elastic::parse_allowed_workers(edp::elastic::format_allowed_workers(counts)) != counts) std::abort();
  } catch (const edp::Error&) {
  }
  return 0;
}
