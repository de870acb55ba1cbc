// What a rank learns about its own placement, read from the environment edprun gave it (the
// EDP_* variables, listed in docs/launch.md) or, under a plain `mpirun`, from Open MPI's own
// OMPI_COMM_WORLD_* variables. A rank calls placement_from_env() early (before creating CUDA
// contexts: it tells which GPU to use) and check_placement() once its device is set.
#pragma once
#include <string>
#include <vector>

namespace edp::launch {

struct Placement {
  bool from_edprun = false;   // EDP_LAUNCHER=edprun
  int rank = 0, world_size = 1;
  int local_rank = 0, local_size = 1;
  bool gpu_mode = false;
  int local_gpu = -1;         // GPU index on the host (nvidia-smi numbering); -1: CPU
  std::string gpu_uuid;
  int cuda_device = -1;       // CUDA ordinal to select (0 under edprun: one visible GPU)
  int ranks_per_gpu = 1;      // K asked for
  int gpu_rank = 0;           // position among the ranks sharing this GPU
  int gpu_ranks = 1;          // ranks sharing this GPU
  int num_threads = 0;        // EDP_NUM_THREADS (0: not set)
  bool mps = false;           // edprun set the rank up for MPS
  std::string mps_pipe_dir;
  std::string str() const;    // one line for logs
};

// Throws edp::Error naming the variable when one is malformed or contradicts Open MPI's.
Placement placement_from_env();

// Checks the placement against what the process can see and warns (once per process, on
// stderr) about what would make it slow: several ranks on one GPU without MPS active. In a CUDA
// build it also verifies that the current device is the GPU of EDP_GPU_UUID and whether
// cudaDevAttrMpsEnabled is set. Returns the warnings it printed (empty: all good).
std::string check_placement(const Placement& p);

// One host of an Open MPI hostfile and its slots (0: the line gave none).
struct HostSlots {
  std::string name;
  int slots = 0;
};
// Reads an Open MPI hostfile as edprun does ("host [slots=N] [max_slots=M]", # comments, repeated
// lines add up). Throws edp::Error naming the file and line of what it cannot read.
std::vector<HostSlots> read_hostfile(const std::string& path);

}  // namespace edp::launch
