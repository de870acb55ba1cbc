// A rank's view of its placement (see placement.h): parsing the EDP_* variables edprun sets,
// cross-checking them with Open MPI's, and the once-per-process warnings about sharing a GPU
// without MPS.
#include "edp/launch/placement.h"

#include <atomic>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "edp/config.h"
#include "edp/core/error.h"
#include "edp/core/knobs.h"

#if EDP_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace edp::launch {

using ::edp::detail::concat;

namespace {

// EDP_* through the knob registry; CUDA's own variables (CUDA_MPS_PIPE_DIRECTORY) as they are.
bool get(const char* name, std::string& out) {
  if (std::strncmp(name, "EDP_", 4) != 0) {
    const char* v = std::getenv(name);
    if (!v || !*v) return false;
    out = v;
    return true;
  }
  if (!knobs::is_set(name)) return false;
  out = knobs::get_string(name);
  return true;
}

int get_int(const char* name, int fallback) { return static_cast<int>(knobs::get_int(name, fallback)); }

[[maybe_unused]] std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::string Placement::str() const {
  std::string s = concat("rank ", rank, "/", world_size, " local ", local_rank, "/", local_size);
  if (gpu_mode)
    s += concat(" gpu ", local_gpu, " (", gpu_uuid, ") shared by ", gpu_ranks, " [", gpu_rank, "]",
                mps ? " mps" : " time-sliced");
  else
    s += " cpu";
  if (num_threads > 0) s += concat(" threads ", num_threads);
  return s;
}

Placement placement_from_env() {
  Placement p;
  std::string launcher;
  p.from_edprun = get("EDP_LAUNCHER", launcher) && launcher == "edprun";
  // Open MPI's view first: it is what MPI_Init will report.
  const knobs::OmpiWorld o = knobs::ompi_world();
  // A rank spawned by an in-place grow: Open MPI numbers it within the spawned group; its place in
  // the grown job starts at EDP_SPAWN_RANK_BASE (edprun's shim offsets EDP_RANK etc. the same way).
  const int base = knobs::is_set("EDP_SPAWN_RANK_BASE") ? get_int("EDP_SPAWN_RANK_BASE", 0) : 0;
  const int o_rank = o.rank >= 0 ? base + o.rank : -1, o_size = o.size > 0 ? base + o.size : -1;
  p.rank = get_int("EDP_RANK", o_rank >= 0 ? o_rank : 0);
  p.world_size = get_int("EDP_WORLD_SIZE", o_size > 0 ? o_size : 1);
  p.local_rank = get_int("EDP_LOCAL_RANK", o.local_rank >= 0 ? base + o.local_rank : 0);
  p.local_size = get_int("EDP_LOCAL_SIZE", o.local_size > 0 ? base + o.local_size : 1);
  if (o_rank >= 0 && (p.rank != o_rank || p.world_size != o_size))
    throw Error(concat("EDP_RANK/EDP_WORLD_SIZE say rank ", p.rank, " of ", p.world_size, " but Open MPI says ",
                       o_rank, " of ", o_size, base > 0 ? concat(" (EDP_SPAWN_RANK_BASE=", base, " included)") : "",
                       ": EDP_* variables leaked from another job?"));
  if (p.rank >= p.world_size || p.local_rank >= p.local_size)
    throw Error(concat("inconsistent placement: rank ", p.rank, " of ", p.world_size, ", local rank ",
                       p.local_rank, " of ", p.local_size));
  p.num_threads = get_int("EDP_NUM_THREADS", 0);
  p.ranks_per_gpu = static_cast<int>(knobs::get_int("EDP_RANKS_PER_GPU"));
  p.local_gpu = static_cast<int>(knobs::get_int("EDP_LOCAL_GPU"));
  p.gpu_mode = p.local_gpu >= 0;
  if (p.gpu_mode) {
    if (!get("EDP_GPU_UUID", p.gpu_uuid))
      throw Error("EDP_LOCAL_GPU is set but EDP_GPU_UUID is not (set both, or start the job with edprun)");
    p.cuda_device = static_cast<int>(knobs::get_int("EDP_CUDA_DEVICE"));
    p.gpu_rank = static_cast<int>(knobs::get_int("EDP_GPU_RANK"));
    p.gpu_ranks = static_cast<int>(knobs::get_int("EDP_GPU_RANKS"));
    if (p.gpu_rank >= p.gpu_ranks)
      throw Error(concat("EDP_GPU_RANK=", p.gpu_rank, " is not below EDP_GPU_RANKS=", p.gpu_ranks));
    p.mps = knobs::get_int("EDP_MPS_ACTIVE") != 0;
    get("CUDA_MPS_PIPE_DIRECTORY", p.mps_pipe_dir);
  }
  return p;
}

std::string check_placement(const Placement& p) {
  static std::atomic<bool> warned{false};
  std::string w;
  if (p.gpu_mode && p.gpu_ranks > 1 && !p.mps)
    w += concat("edp: warning: ", p.gpu_ranks, " ranks share GPU ", p.local_gpu,
                " without MPS: their kernels are time-sliced, not run side by side (start the job with "
                "edprun --mps on, or see docs/launch.md)\n");
#if EDP_HAVE_CUDA
  if (p.gpu_mode) {
    int dev = -1, count = 0;
    if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0 && cudaGetDevice(&dev) == cudaSuccess) {
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, dev) == cudaSuccess && p.gpu_uuid.rfind("GPU-", 0) == 0) {
        const unsigned char* b = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
        char u[64];
        std::snprintf(u, sizeof u, "gpu-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                      b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
        if (lower(p.gpu_uuid) != u)
          w += concat("edp: warning: rank ", p.rank, " runs on CUDA device ", dev, " (", u, ") but edprun placed it on ",
                      p.gpu_uuid, "; select device EDP_CUDA_DEVICE=", p.cuda_device, "\n");
      }
      int mps_enabled = 0;
      if (p.gpu_ranks > 1 && p.mps && cudaDeviceGetAttribute(&mps_enabled, cudaDevAttrMpsEnabled, dev) == cudaSuccess &&
          !mps_enabled)
        w += concat("edp: warning: edprun set up MPS for GPU ", p.local_gpu,
                    " but CUDA reports MPS is not enabled for this context (cudaDevAttrMpsEnabled = 0): is the "
                    "daemon at ", p.mps_pipe_dir, " running?\n");
    }
    cudaGetLastError();  // a failed query must not leak into the caller's next error check
  }
#endif
  if (!w.empty() && !warned.exchange(true)) std::fputs(w.c_str(), stderr);
  return w;
}

}  // namespace edp::launch
