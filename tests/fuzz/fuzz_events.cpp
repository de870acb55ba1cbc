// Fuzz target: what a running job leaves for edprun and the autoscaler to read: the events file
// (JSON lines), the status file and the rescale record.
#include <string>

#include "edp/core/error.h"
#include "edp/elastic/events.h"
#include "fuzz_util.h"
#include "launch/jobdir.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)edp::elastic::parse_events(text);  // skips what it cannot read; never throws
  const std::string path = edp_fuzz::as_file(data, size);
  (void)edp::elastic::read_status(path);  // nullopt for what it cannot read; never throws
  try {
    const edp::launch::RescaleRecord r = edp::launch::read_rescale_record(path);
    if (r.workers < 1 || r.global_batch < 1 || r.global_batch % r.workers != 0 || r.step < 0 || r.checkpoint.empty())
      std::abort();
  } catch (const edp::Error&) {
  }
  return 0;
}
