// edprun's entry point, in the library so that tools/edprun stays a one-line main; the
// supervisor (restarts after a rescale or a failure, docs/elastic.md) lives behind it.
//
//   edprun [options] -- program args...          plan, start MPS daemons, run mpirun, clean up
//   edprun --rank-exec -- program args...        (internal) per-rank shim mpirun starts
//   edprun --mps-host start|stop JOBDIR ...      (internal) MPS daemons on a remote host
//
// Exit codes: the program's (mpirun's) exit code is passed through; 2 for edprun's own errors
// (bad option, impossible plan, MPS required but unavailable); 128+N when edprun itself was
// stopped by signal N (after stopping the job and the daemons). A job that exits 75
// (elastic::kRescaleExitCode) under --control-file is restarted at its new size, not passed
// through; with --max-restarts N a failed job is restarted up to N times first.
#pragma once

namespace edp::launch {

int edprun_main(int argc, char** argv);

}  // namespace edp::launch
