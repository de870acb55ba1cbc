// edp-autoscale: command-line front end of the autoscaler. Each subcommand has its own options
// and --help (options.cpp holds the one table of them; every option is also EDP_AUTOSCALE_<NAME>):
//
//   plan      a cluster state in, every job's configuration out (JSON, docs/plan.md)
//   simulate  the policies on a trace (pool simulator) or the Pollux workloads (node-level, with
//             --compare-published); simulate.cpp
//   workload  a trace's load and what each policy's options allow; simulate.cpp
//   serve | submit | status | cancel   the live autoscaler; serve.cpp
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include "commands.h"
#include "edp/autoscale/plan.h"
#include "edp/core/error.h"
#include "edp/core/files.h"

using namespace edp;
using namespace edp::autoscale;

namespace edp::autoscale_tool {

int cmd_plan(int argc, char** argv) {
  cli::Options o = options_for("plan",
                               "Reads a plan request (JSON, version 2 or 1: docs/plan.md) and prints the decision: "
                               "every job's configuration and its options' values. Exit 2 on invalid input.",
                               {"input", "example", "gpus"});
  if (const int rc = parse(o, argc, argv); rc >= 0) return rc;
  if (o.flag("example")) {
    std::fputs(example_plan_request().c_str(), stdout);
    return 0;
  }
  if (o.str("input").empty()) throw DataError("plan needs --input FILE (or --example)");
  const std::string path = o.str("input");
  std::string text;
  if (path == "-") {
    // Standard input, with the same size limit as a file.
    char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) {
      text.append(buf, n);
      if (text.size() > files::kRequestLimit)
        throw DataError("stdin: more than the " + std::to_string(files::kRequestLimit) +
                        " bytes a plan request may have");
    }
  } else {
    text = files::read_file(path, files::kRequestLimit);
  }
  const int gpus = o.given("gpus") ? static_cast<int>(o.i64("gpus")) : -1;
  const PlanRequest req = parse_plan_request(text, path == "-" ? "stdin" : path, gpus);
  text = std::string();  // the request is parsed: its text is not needed any more
  const auto t0 = std::chrono::steady_clock::now();
  const Plan p = decide(req);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  print_plan_json(stdout, req, p, ms, req.version);  // a v1 request gets the v1 answer
  return 0;
}

}  // namespace edp::autoscale_tool

namespace {

const char* kUsage =
    "usage: edp-autoscale COMMAND [options]     (edp-autoscale COMMAND --help for its options)\n"
    "  plan      a cluster state in, every job's configuration out (JSON, docs/plan.md)\n"
    "  simulate  the policies on a trace, or --compare-published (node-level simulator)\n"
    "  workload  a trace's load and what each policy's options allow\n"
    "  serve     the live controller: starts and rescales elastic jobs through edprun\n"
    "  submit    hands a job spec to the controller (prints its id)\n"
    "  status    the controller's jobs (--json: with measurements and fits)\n"
    "  cancel    stops a job\n"
    "Every option is also read from EDP_AUTOSCALE_<NAME> (--max-scale: EDP_AUTOSCALE_MAX_SCALE).\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace edp::autoscale_tool;
  if (argc < 2 || std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  // The subcommand sees argv from its own name on.
  const int sub_argc = argc - 1;
  char** sub_argv = argv + 1;
  try {
    if (cmd == "plan") return cmd_plan(sub_argc, sub_argv);
    if (cmd == "simulate") return cmd_simulate(sub_argc, sub_argv, argv[0]);
    if (cmd == "workload") return cmd_workload(sub_argc, sub_argv);
    if (cmd == "serve") return cmd_serve(sub_argc, sub_argv);
    if (cmd == "submit") return cmd_submit(sub_argc, sub_argv);
    if (cmd == "status") return cmd_status(sub_argc, sub_argv);
    if (cmd == "cancel") return cmd_cancel(sub_argc, sub_argv);
    if (cmd == "keeper") return cmd_keeper(sub_argc, sub_argv);
    std::fprintf(stderr, "edp-autoscale: unknown command '%s'\n%s", cmd.c_str(), kUsage);
    return 2;
  } catch (const edp::DataError& e) {
    std::fprintf(stderr, "edp-autoscale %s: invalid input: %s\n", cmd.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "edp-autoscale %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}
