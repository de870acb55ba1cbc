// edp-autoscale's subcommands and the one table of their options (options.cpp). Every option is
// defined once there — one meaning, one default, one environment variable EDP_AUTOSCALE_<NAME> —
// and each subcommand lists the names it takes, so that `edp-autoscale <cmd> --help` shows its own.
#pragma once
#include <initializer_list>

#include "edp/core/cli.h"

namespace edp::autoscale_tool {

// The options of subcommand `cmd` (edp::cli::Options named "edp-autoscale <cmd>").
cli::Options options_for(const char* cmd, const char* description, std::initializer_list<const char*> names);
// Parses argv for a subcommand (argv[0] is the subcommand's name). Returns -1 to go on, else the
// exit code (0 after --help, 2 after an error, which it has printed).
int parse(cli::Options& o, int argc, char** argv);

int cmd_plan(int argc, char** argv);
int cmd_simulate(int argc, char** argv, const char* argv0);
int cmd_workload(int argc, char** argv);
int cmd_serve(int argc, char** argv);
int cmd_submit(int argc, char** argv);
int cmd_status(int argc, char** argv);
int cmd_cancel(int argc, char** argv);
int cmd_keeper(int argc, char** argv);  // internal: serve's per-job supervisor process

}  // namespace edp::autoscale_tool
