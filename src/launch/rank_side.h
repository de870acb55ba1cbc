// edprun's helpers that run on the ranks' side (src/launch/edprun.cpp dispatches to them): the
// per-rank shim (`edprun --rank-exec`) and the MPS daemons of a remote host (`edprun --mps-host`).
#pragma once

namespace edp::launch {

// `edprun --rank-exec -- PROGRAM ARGS`: places this rank (GPU, cores, MPS pipe) and becomes PROGRAM.
int rank_exec(int argc, char** argv);
// `edprun --mps-host start|stop ...`: starts or stops this host's MPS daemon for a job.
int mps_host(int argc, char** argv);
// Exit status of a command line edprun refuses.
constexpr int kUsageError = 2;

}  // namespace edp::launch
