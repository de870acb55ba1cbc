// Fuzz target: `edp-autoscale plan` — a request of version 1 or 2 parsed, decided and answered.
// Requests for more than 65536 GPUs are parsed but not decided (the DP's time grows with the
// GPUs; the fuzzer would spend its budget on a few slow inputs).
#include <string>

#include "edp/autoscale/plan.h"
#include "edp/core/error.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const edp::autoscale::PlanRequest req = edp::autoscale::parse_plan_request(text, "fuzz");
    // The request written back reads back to the same request.
    const std::string again = edp::autoscale::plan_request_json(req);
    if (edp::autoscale::plan_request_json(edp::autoscale::parse_plan_request(again, "again")) != again) std::abort();
    if (req.gpus > 65536) return 0;
    const edp::autoscale::Plan p = edp::autoscale::decide(req);
    if (p.choices.size() != req.jobs.size() || p.gpus_used > req.gpus) std::abort();
    (void)edp::autoscale::plan_json(req, p, 0.0, req.version);
  } catch (const edp::Error&) {
  }
  return 0;
}
