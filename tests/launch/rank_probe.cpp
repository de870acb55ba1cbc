// A rank program for the edprun tests (no MPI needed: mpirun runs any program). Each rank
// reads its placement with edp::launch::placement_from_env() and writes it, one line, to
// $PROBE_OUT/rank.<R>; then, by mode:
//   ok                  exit 0
//   fail R CODE         rank R exits with CODE, the others 0
//   sleep               write $PROBE_OUT/ready.<R> (its pid) and sleep until killed
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "edp/launch/placement.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "ok";
  const char* out = std::getenv("PROBE_OUT");
  const edp::launch::Placement p = edp::launch::placement_from_env();
  if (out) {
    std::ofstream f(std::string(out) + "/rank." + std::to_string(p.rank));
    f << p.str() << " | threads=" << (std::getenv("EDP_NUM_THREADS") ? std::getenv("EDP_NUM_THREADS") : "-")
      << " cvd=" << (std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "-")
      << " pipe=" << (std::getenv("CUDA_MPS_PIPE_DIRECTORY") ? std::getenv("CUDA_MPS_PIPE_DIRECTORY") : "-")
      << " pct=" << (std::getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") ? std::getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") : "-")
      << "\n";
  }
  if (mode == "fail" && argc > 3 && p.rank == std::atoi(argv[2])) return std::atoi(argv[3]);
  if (mode == "sleep") {
    if (out) {
      std::ofstream f(std::string(out) + "/ready." + std::to_string(p.rank));
      f << getpid() << "\n";
    }
    std::this_thread::sleep_for(std::chrono::minutes(5));
    return 9;
  }
  return 0;
}
