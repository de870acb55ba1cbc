// Fuzz target: the autoscaler's job specs (submit, serve's inbox), and its job table (jobs.json).
#include <string>

#include "autoscale/controller.h"
#include "edp/autoscale/live.h"
#include "edp/core/error.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const edp::autoscale::JobSpec s = edp::autoscale::parse_job_spec(text, "fuzz");
    const std::string back = edp::autoscale::job_spec_json(s);
    if (edp::autoscale::job_spec_json(edp::autoscale::parse_job_spec(back, "again")) != back) std::abort();
  } catch (const edp::Error&) {
  }
  try {
    (void)edp::autoscale::parse_table(text, "fuzz");
  } catch (const edp::Error&) {
  }
  return 0;
}
