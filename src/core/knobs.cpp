// The knob registry (include/edp/core/knobs.h): the one table of EDP_* environment variables.
#include "edp/core/knobs.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/text.h"
#include "edp/core/error.h"

namespace edp::knobs {

namespace {

constexpr int64_t kNoMin = INT64_MIN, kNoMax = INT64_MAX;

// The table. Keep each area together; docs/knobs.md follows this order.
const std::vector<Knob> kKnobs = {
    // ---- core -------------------------------------------------------------------------------
    {"EDP_LOG_LEVEL", Type::Enum, "info",
     "Least severe diagnostic written to stderr; every line carries the rank (`edp[r1/4]`).", "core",
     "trace|debug|info|warn|error|off"},
    {"EDP_NUM_THREADS", Type::Int, "",
     "Threads per rank for OpenMP loops and Eigen's GEMM (empty: every core the process may run on; "
     "edprun sets it to the rank's share of the host's cores). An elastic job given no count re-derives it "
     "from the ranks on the host after every rescale; a count the user sets here is kept.",
     "core", "", 1, 4096},
    {"EDP_HOST_CACHE_MB", Type::Int, "2048",
     "Upper bound in MiB of the host allocator's cache of freed blocks (0: no cache).", "core", "", 0, kNoMax},
    {"EDP_TIMELINE", Type::String, "",
     "Write a Chrome trace (chrome://tracing, Perfetto) of the run to this path; with several ranks "
     "each writes `<path>.rankN.json` (empty: no trace).",
     "core", ""},
    // ---- cuda -------------------------------------------------------------------------------
    {"EDP_CUDA_SYNC", Type::Bool, "0",
     "Synchronise after every edp kernel launch so that a failing kernel is reported where it was "
     "launched (slow; for debugging).",
     "cuda", ""},
    {"EDP_CUDA_POISON", Type::Bool, "0",
     "Fill new device allocations with NaN to find reads of uninitialised memory (for debugging).", "cuda", ""},
    {"EDP_TF32", Type::Bool, "1",
     "Allow TF32 tensor-core math for FP32 matrix products and convolutions on GPUs that have it.", "cuda", ""},
    // ---- backend ----------------------------------------------------------------------------
    {"EDP_DETERMINISTIC", Type::Bool, "0",
     "Use only deterministic cuDNN convolution algorithms (bitwise reproducible runs, maybe slower).",
     "backend", ""},
    {"EDP_CUDNN_VERBOSE", Type::Bool, "0",
     "Log each cuDNN convolution algorithm chosen (shape, pass, algorithm, workspace, time).", "backend", ""},
    {"EDP_CPU_CONV", Type::Enum, "auto",
     "CPU float32 convolution: oneDNN's direct convolutions (`dnnl`, the default where the build "
     "has oneDNN) or im2col + Eigen GEMMs (`eigen`, the reference; always used for float64).",
     "backend", "auto|dnnl|eigen"},
    {"EDP_CPU_ISA", Type::Enum, "host",
     "Instruction set oneDNN's CPU kernels may use: the best the host has (`host`: AVX-512, "
     "AVX512-BF16, AMX where present) or at most the build's (`build`: the same bits on every host "
     "of a cluster for a portable build; DNNL_MAX_CPU_ISA, oneDNN's own variable, beats both).",
     "backend", "host|build"},
    {"EDP_BF16", Type::Bool, "0",
     "Matrix products (Linear, attention) in bfloat16 with float32 accumulation and float32 master "
     "weights, where the CPU (AVX512-BF16/AMX, through oneDNN) or GPU supports it; elsewhere float32 "
     "with a one-line notice.",
     "backend", ""},
    {"EDP_FUSED_ATTENTION", Type::Bool, "0",
     "With EDP_BF16 on a GPU, 1: causal attention through cuDNN's fused flash-attention kernels where "
     "the build has cudnn-frontend and cuDNN supports the shape (0, the default until the path has "
     "run on a GPU: cuBLAS products and edp's softmax kernels, the float32 path's).",
     "backend", ""},
    {"EDP_CONV_GROUP", Type::Int, "0",
     "CPU convolution: images per im2col group (0: chosen from the cache size, 1 to 4). A tuning knob.",
     "backend", "", 0, kNoMax},
    // ---- comm -------------------------------------------------------------------------------
    {"EDP_COMM_MAX_CHUNK", Type::Int, "",
     "Largest number of elements in one MPI call; larger collectives are split (empty: the "
     "backend's limit, INT_MAX for MPI).",
     "comm", "", 1, kNoMax},
    {"EDP_COMM_THREAD_LEVEL", Type::Enum, "",
     "MPI thread level to request, overriding the program's choice (empty: the program's).", "comm",
     "single|funneled|serialized|multiple"},
    {"EDP_COLOCATED_CHUNK_BYTES", Type::Int, "",
     "Staging buffer of the colocated (ranks sharing a GPU) communicator in bytes (empty: "
     "ColocatedOptions::staging_bytes, 64 MiB).",
     "comm", "", 64, kNoMax},
    {"EDP_COMM_TIMEOUT", Type::Double, "300",
     "Seconds a collective may wait for the other ranks before the stall inspector reports who has "
     "not arrived (the collective, bucket and step) and ends the job with exit code 76 (0: wait forever).",
     "comm", "", 0, kNoMax},
    {"EDP_HOST_SHM", Type::Enum, "auto",
     "The MPI backend's data path between ranks on one host: edp's own shared memory (`auto`; the same for "
     "ranks started together and for ranks an in-place grow started later), or MPI's (`off`: Open MPI 4.1 "
     "then connects ranks of separate launches over TCP). Every rank must agree; a host whose /dev/shm cannot "
     "hold the segment falls back to MPI with a warning (docs/elastic.md, \"Which transport\").",
     "comm", "auto|off"},
    {"EDP_HOST_SHM_SPIN_US", Type::Int, "50",
     "Microseconds a rank waiting in a shared-memory collective spins before it sleeps (0: sleep at once, "
     "which leaves the core to computing threads on an oversubscribed host).",
     "comm", "", 0, 1000000},
    {"EDP_PMIX_GDS", Type::String, "hash",
     "The PMIx store of job data every process of the program asks for, as PMIX_MCA_gds before MPI starts "
     "(`auto`: PMIx's own choice; a PMIX_MCA_gds set by the user is kept). `hash` by default: with PMIx 4's "
     "shared-memory store, a rank started by an in-place grow now and then waited forever in its MPI "
     "initialisation (docs/elastic.md).",
     "comm", ""},
    // ---- ddp --------------------------------------------------------------------------------
    {"EDP_BUCKET_CAP_MB", Type::Int, "25",
     "DDP gradient bucket cap in MiB, used when DDPOptions::bucket_cap_bytes is 0 (its default); "
     "the examples' --bucket-cap-mb.",
     "ddp", "", 1, 1 << 20},
    // ---- launch: what edprun sets for each rank (docs/launch.md) ---------------------------
    {"EDP_HOSTNAME", Type::String, "",
     "This host's name as hostfiles use it (empty: gethostname); for containers.", "launch", ""},
    {"EDP_LAUNCHER", Type::String, "", "`edprun` when edprun started the rank.", "launch", "", kNoMin, kNoMax, true},
    {"EDP_RANK", Type::Int, "", "The rank (empty: Open MPI's OMPI_COMM_WORLD_RANK, else 0).", "launch", "", 0,
     kNoMax, true},
    {"EDP_WORLD_SIZE", Type::Int, "", "Number of ranks (empty: Open MPI's, else 1).", "launch", "", 1, kNoMax, true},
    {"EDP_LOCAL_RANK", Type::Int, "", "The rank's index on its host (empty: Open MPI's, else 0).", "launch", "", 0,
     kNoMax, true},
    {"EDP_LOCAL_SIZE", Type::Int, "", "Ranks on this host (empty: Open MPI's, else 1).", "launch", "", 1, kNoMax,
     true},
    {"EDP_RANKS_PER_GPU", Type::Int, "1", "Ranks sharing one GPU.", "launch", "", 1, kNoMax, true},
    {"EDP_LOCAL_GPU", Type::Int, "-1", "Index of the rank's GPU on its host (-1: CPU mode).", "launch", "", -1,
     kNoMax, true},
    {"EDP_GPU_UUID", Type::String, "", "UUID of the rank's GPU (required with EDP_LOCAL_GPU).", "launch", "",
     kNoMin, kNoMax, true},
    {"EDP_CUDA_DEVICE", Type::Int, "0", "CUDA device number of the rank's GPU within CUDA_VISIBLE_DEVICES.",
     "launch", "", 0, kNoMax, true},
    {"EDP_GPU_RANK", Type::Int, "0", "The rank's index among the ranks sharing its GPU.", "launch", "", 0, kNoMax,
     true},
    {"EDP_GPU_RANKS", Type::Int, "1", "Ranks sharing the rank's GPU.", "launch", "", 1, kNoMax, true},
    {"EDP_MPS_ACTIVE", Type::Int, "0", "1 when the rank's GPU is shared through an MPS daemon.", "launch", "", 0,
     kNoMax, true},
    {"EDP_CONTROL_FILE", Type::String, "",
     "Elastic control file of the job (edprun --control-file; the examples' --control-file).", "launch", "",
     kNoMin, kNoMax, true},
    {"EDP_ALLOWED_WORKERS", Type::String, "",
     "Worker counts the launcher can run this job at: counts and inclusive ranges, comma-separated, e.g. "
     "1-4,6,8 (edprun sets it; empty: any; edp/elastic/allowed.h parses it). A rescale request for another count "
     "is refused before any rank acts on it.",
     "launch", "", kNoMin, kNoMax, true},
    {"EDP_RESCALE_FILE", Type::String, "",
     "Where rank 0 records, after committing the rescale checkpoint, the size the job is to be restarted at "
     "(JSON {workers, global_batch, step, checkpoint}; edprun sets it and reads it when the job exits with 75).",
     "launch", "", kNoMin, kNoMax, true},
    {"EDP_EVENTS_FILE", Type::String, "",
     "Where rank 0 of an elastic job appends one JSON line per membership event: a start, and each rescale "
     "(in place or by restart) with the pause it cost (edp/elastic/events.h). edprun sets it to "
     "<job dir>/events.jsonl and reads it for the job's current size and its summary.",
     "launch", "", kNoMin, kNoMax, true},
    {"EDP_STATUS_FILE", Type::String, "",
     "Where rank 0 of an elastic job rewrites its measured progress (JSON, at most once a second): position, "
     "size, and the median step time at each size it ran at (edp/elastic/events.h). edp-autoscale serve sets "
     "it for the jobs it runs and learns their throughput from it.",
     "launch", "", kNoMin, kNoMax, true},
    {"EDP_JOB_DIR_BASE", Type::String, "",
     "Where edprun makes its job directory (rescale record, events, stall records, decoded data; empty: $TMPDIR, "
     "else /tmp). Across hosts rank 0 writes the rescale record there, so when rank 0 may run on another host than "
     "edprun it must be a directory every host sees (edp-autoscale serve --hostfile sets the job's own directory).",
     "launch", "", kNoMin, kNoMax, false},
    {"EDP_STALL_DIR", Type::String, "",
     "Directory where a rank whose collective timed out (EDP_COMM_TIMEOUT) leaves its stall record, "
     "<rank>.json: the silent ranks and their hosts. edprun sets it to <job dir>/stalls; a rank on another "
     "host, where that directory does not exist, writes nothing.",
     "launch", "", kNoMin, kNoMax, true},
    {"EDP_DATA_CACHE", Type::String, "",
     "An existing directory where the data readers keep decoded copies of gzip-compressed image files, so that a "
     "restart or the new ranks of a grow read them instead of decompressing again (empty: none; edprun sets its "
     "job directory's data/, removed with the job).",
     "elastic", "", kNoMin, kNoMax, false},
    {"EDP_BACKGROUND_GROW", Type::Bool, "1",
     "An in-place grow starts the new ranks while the job trains on and joins them once they are ready (0: the "
     "job waits for them at the step of the request).",
     "elastic", "", kNoMin, kNoMax, false},
    {"EDP_MIN_STEP_MS", Type::Double, "0",
     "Every step of an elastic job takes at least this long: the job sleeps the rest (0: no pacing). For tests and "
     "demonstrations of the autoscaler, whose decisions must land while the jobs still run however fast the "
     "machine trains.",
     "elastic", "", 0, kNoMax, false},
    {"EDP_FAULT", Type::String, "",
     "Fault injection, for edp's own tests of recovery: `reshard:<rank>` makes that rank of the old world kill "
     "itself (SIGKILL) in the next in-place move of a sharded optimizer state, after it packed its part and before "
     "it sent it (empty: none).",
     "elastic", "", kNoMin, kNoMax, false},
    {"EDP_RESCALE_MODE", Type::Enum, "auto",
     "How an elastic job changes size: in-place (shrink by splitting the communicator, grow by MPI_Comm_spawn; "
     "an error when that fails), restart (checkpoint, exit 75, edprun restarts the job), auto (in place when that "
     "gives the job the data path a restart would, else by restart when the rest of the run repays its pause; "
     "the restart path too when spawning new ranks fails; docs/elastic.md, \"Which transport\").",
     "elastic", "auto|in-place|restart", kNoMin, kNoMax, false},
    {"EDP_SPAWN_TIMEOUT", Type::Double, "120",
     "Seconds an in-place grow waits for MPI_Comm_spawn to start and connect its new ranks (not for their "
     "setup) before it gives the grow up: the job goes on at its size and grows by restart from then on "
     "(0: wait forever).",
     "elastic", "", 0, kNoMax, false},
    {"EDP_SPAWN_WRAPPER", Type::String, "",
     "A command the new ranks of an in-place grow are started through, words separated by spaces, followed by "
     "the program and its arguments (edprun sets its rank shim, `edprun --rank-exec --`; empty: the program "
     "itself). The new ranks also get EDP_SPAWN_RANK_BASE, their first rank in the grown job.",
     "launch", "", kNoMin, kNoMax, true},
    {"EDP_SPAWN_WORKER_BATCH", Type::Int, "0",
     "Set by an in-place grow on the ranks it starts: the per-rank batch they will train with, which they warm up on "
     "while they start.",
     "launch", "", 0, kNoMax, true},
    {"EDP_SPAWN_JOB_PROCESSES", Type::Int, "0",
     "Set by an in-place grow on the ranks it starts: the processes of the mpirun job after the grow (the "
     "slots it holds), so that a later grow under plain mpirun is refused before it cannot fit.",
     "launch", "", 0, kNoMax, true},
    {"EDP_SPAWN_RANK_BASE", Type::Int, "0",
     "Set by an in-place grow on the ranks it starts: the rank in the grown job of the first new rank (rank = "
     "base + OMPI_COMM_WORLD_RANK). The rank shim places them by it.",
     "launch", "", 0, kNoMax, true},
    {"EDP_LAUNCH_MODE", Type::Enum, "cpu", "edprun's rank shim: the job's mode.", "launch", "cpu|gpu", kNoMin,
     kNoMax, true},
    {"EDP_LAUNCH_HOST", Type::String, "", "edprun's rank shim: the host edprun ran on.", "launch", "", kNoMin,
     kNoMax, true},
    {"EDP_LAUNCH_HOSTS", Type::String, "",
     "edprun, for an elastic job on several hosts: the hosts in order and the most ranks each takes "
     "(`a:2,b:2,c:1`); an in-place grow spawns its new ranks onto the hosts a restart would use, and the "
     "shim places them there.",
     "launch", "", kNoMin, kNoMax, true},
    {"EDP_LAUNCH_INVENTORY", Type::String, "",
     "edprun's rank shim: edprun's GPU inventory (`index=uuid;...`).", "launch", "", kNoMin, kNoMax, true},
    {"EDP_LAUNCH_GPUS", Type::String, "", "edprun's rank shim: the GPUs selected (--gpus).", "launch", "", kNoMin,
     kNoMax, true},
    {"EDP_LAUNCH_JOB_DIR", Type::String, "", "edprun's rank shim: the job's scratch directory.", "launch", "",
     kNoMin, kNoMax, true},
    {"EDP_LAUNCH_MIG", Type::Bool, "0", "edprun's rank shim: the devices are MIG instances (--mig).", "launch", "",
     kNoMin, kNoMax, true},
    {"EDP_LAUNCH_THREADS", Type::Int, "", "edprun's rank shim: threads per rank (--threads-per-rank).", "launch", "",
     1, 4096, true},
    {"EDP_LAUNCH_BIND", Type::Enum, "none", "edprun's rank shim: bind ranks to cores.", "launch", "none|core",
     kNoMin, kNoMax, true},
    {"EDP_LAUNCH_CPUS", Type::String, "",
     "edprun's rank shim: the CPUs mpirun bound this rank to (a list, \"2,3\"); the rank starts on all of the "
     "job's cores of its host and edp binds it to these once it runs (edp/core/threads.h: the OpenMP runtime "
     "counts a process's cores once, when it starts).",
     "launch", "", kNoMin, kNoMax, true},
    {"EDP_LAUNCH_MPS", Type::Bool, "0", "edprun's rank shim: the GPUs are shared through MPS.", "launch", "",
     kNoMin, kNoMax, true},
    {"EDP_LAUNCH_MPS_PIPE_DIRECTORY", Type::String, "",
     "edprun's rank shim: an existing MPS daemon's pipe directory to reuse.", "launch", "", kNoMin, kNoMax, true},
    {"EDP_LAUNCH_MPS_THREAD_PERCENTAGE", Type::Int, "100",
     "edprun's rank shim: CUDA_MPS_ACTIVE_THREAD_PERCENTAGE for the ranks.", "launch", "", 1, 100, true},
    {"EDP_LAUNCH_MPS_MEM_LIMIT", Type::String, "",
     "edprun's rank shim: CUDA_MPS_PINNED_DEVICE_MEM_LIMIT for the ranks.", "launch", "", kNoMin, kNoMax, true},
};

std::string expectation(const Knob& k) {
  switch (k.type) {
    case Type::Bool: return "0/1/true/false/yes/no/on/off";
    case Type::Int:
      if (k.min != kNoMin && k.max != kNoMax) return detail::concat("an integer from ", k.min, " to ", k.max);
      if (k.min != kNoMin) return detail::concat("an integer >= ", k.min);
      return "an integer";
    case Type::Double:
      if (k.min != kNoMin && k.max != kNoMax) return detail::concat("a finite number from ", k.min, " to ", k.max);
      if (k.min != kNoMin) return detail::concat("a finite number >= ", k.min);
      return "a finite number";
    case Type::Enum: {
      std::string c = k.choices;
      for (auto& ch : c)
        if (ch == '|') ch = ',';
      return "one of " + c;
    }
    case Type::String: return "a string";
  }
  return "";
}

[[noreturn]] void bad(const Knob& k, const std::string& v) {
  throw Error(detail::concat(k.name, "='", v, "' is not valid: expected ", expectation(k), " (see docs/knobs.md)"));
}

const Knob& typed(std::string_view name, Type t) {
  const Knob& k = find(name);
  if (k.type != t && !(t == Type::String && k.type == Type::Enum))
    throw Error(detail::concat("knob ", k.name, " is a ", type_name(k.type), ", read as a ", type_name(t)));
  return k;
}

bool parse_bool(const Knob& k, const std::string& v) {
  if (v == "1" || v == "true" || v == "yes" || v == "on" || v == "TRUE" || v == "True") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off" || v == "FALSE" || v == "False") return false;
  bad(k, v);
}

int64_t parse_int(const Knob& k, const std::string& v) {
  int64_t r = 0;
  if (!text::parse_int(v, r) || r < k.min || r > k.max) bad(k, v);
  return r;
}

double parse_double(const Knob& k, const std::string& v) {
  double r = 0;
  if (!text::parse_double(v, r) || !std::isfinite(r)) bad(k, v);
  if ((k.min != kNoMin && r < static_cast<double>(k.min)) || (k.max != kNoMax && r > static_cast<double>(k.max))) bad(k, v);
  return r;
}

std::string check_enum(const Knob& k, const std::string& v) {
  if (k.type != Type::Enum) return v;
  std::string c = k.choices;
  std::istringstream is(c);
  std::string item;
  while (std::getline(is, item, '|'))
    if (item == v) return v;
  bad(k, v);
}

}  // namespace

const std::vector<Knob>& all() { return kKnobs; }

const Knob& find(std::string_view name) {
  for (const auto& k : kKnobs)
    if (name == k.name) return k;
  throw Error(detail::concat("no knob ", name, " is registered (src/core/knobs.cpp)"));
}

bool is_set(std::string_view name) { return !raw(name).empty(); }

std::string raw(std::string_view name) {
  const Knob& k = find(name);
  const char* v = std::getenv(k.name);
  return v ? std::string(v) : std::string();
}

bool get_bool(std::string_view name) {
  const Knob& k = typed(name, Type::Bool);
  const std::string v = raw(name);
  return parse_bool(k, v.empty() ? std::string(k.def) : v);
}

int64_t get_int(std::string_view name) {
  const Knob& k = typed(name, Type::Int);
  const std::string v = raw(name);
  if (!v.empty()) return parse_int(k, v);
  if (!*k.def) throw Error(detail::concat("knob ", k.name, " has no fixed default; read it with a fallback"));
  return parse_int(k, k.def);
}

int64_t get_int(std::string_view name, int64_t fallback) {
  const Knob& k = typed(name, Type::Int);
  const std::string v = raw(name);
  return v.empty() ? fallback : parse_int(k, v);
}

double get_double(std::string_view name) {
  const Knob& k = typed(name, Type::Double);
  const std::string v = raw(name);
  return parse_double(k, v.empty() ? std::string(k.def) : v);
}

std::string get_string(std::string_view name) {
  const Knob& k = typed(name, Type::String);
  const std::string v = raw(name);
  return v.empty() ? std::string(k.def) : check_enum(k, v);
}

std::string get_string(std::string_view name, const std::string& fallback) {
  const Knob& k = typed(name, Type::String);
  const std::string v = raw(name);
  return v.empty() ? fallback : check_enum(k, v);
}

void check_environment() {
  for (const Knob& k : kKnobs) {
    const std::string v = raw(k.name);
    if (v.empty()) continue;
    switch (k.type) {
      case Type::Bool: (void)parse_bool(k, v); break;
      case Type::Int: (void)parse_int(k, v); break;
      case Type::Double: (void)parse_double(k, v); break;
      case Type::Enum: (void)check_enum(k, v); break;
      case Type::String: break;
    }
  }
}

const char* type_name(Type t) {
  switch (t) {
    case Type::Bool: return "bool";
    case Type::Int: return "int";
    case Type::Double: return "double";
    case Type::String: return "string";
    case Type::Enum: return "enum";
  }
  return "?";
}

namespace {
// One knob's line of docs/knobs.md.
std::string row(const Knob& k) {
  std::string type = type_name(k.type);
  if (k.type == Type::Enum) {
    std::string c = k.choices;
    for (auto& ch : c)
      if (ch == '|') ch = ',';
    type += " (" + c + ")";
  } else if ((k.type == Type::Int || k.type == Type::Double) && (k.min != kNoMin || k.max != kNoMax)) {
    if (k.max == kNoMax)
      type += detail::concat(" (>= ", k.min, ")");
    else
      type += detail::concat(" (", k.min, "..", k.max, ")");
  }
  std::ostringstream os;
  os << "| `" << k.name << "` | " << type << " | " << (*k.def ? detail::concat("`", k.def, "`") : "") << " | "
     << (k.internal ? "*Set by edprun.* " : "") << k.help << " |\n";
  return os.str();
}
}  // namespace

std::string markdown() {
  std::ostringstream os;
  // One section per area, in the order the areas first appear; in it, the table's order.
  std::vector<std::string> areas;
  for (const auto& k : kKnobs)
    if (std::find(areas.begin(), areas.end(), k.area) == areas.end()) areas.push_back(k.area);
  for (const std::string& area : areas) {
    os << "\n## " << area << "\n\n| Variable | Type | Default | Description |\n|---|---|---|---|\n";
    for (const auto& k : kKnobs) {
      if (k.area != area) continue;
      os << row(k);
    }
  }
  return os.str();
}

OmpiWorld ompi_world() {
  auto read = [](const char* name, int min_value) {
    const char* s = std::getenv(name);
    if (!s || !*s) return -1;
    int64_t v = 0;
    if (!text::parse_int(s, v) || v < min_value || v > INT_MAX)
      throw Error(std::string("environment variable ") + name + "='" + s +
                  "' is not a rank number; was this process started by Open MPI's mpirun?");
    return static_cast<int>(v);
  };
  OmpiWorld w;
  w.rank = read("OMPI_COMM_WORLD_RANK", 0);
  w.size = read("OMPI_COMM_WORLD_SIZE", 1);
  w.local_rank = read("OMPI_COMM_WORLD_LOCAL_RANK", 0);
  w.local_size = read("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  return w;
}

std::vector<LaunchHost> launch_hosts() {
  std::vector<LaunchHost> out;
  const std::string v = get_string("EDP_LAUNCH_HOSTS");
  size_t pos = 0;
  while (pos < v.size()) {
    size_t comma = v.find(',', pos);
    if (comma == std::string::npos) comma = v.size();
    const std::string item = v.substr(pos, comma - pos);
    const size_t colon = item.rfind(':');
    int64_t cap = -1;
    if (colon == std::string::npos || colon == 0 || !text::parse_int(item.substr(colon + 1), cap) || cap < 1 ||
        cap > INT_MAX)
      throw Error("EDP_LAUNCH_HOSTS='" + v + "': '" + item + "' is not HOST:RANKS (set by edprun; e.g. a:2,b:2)");
    out.push_back({item.substr(0, colon), static_cast<int>(cap)});
    pos = comma + 1;
  }
  return out;
}

HostSlot fill_slot(const std::vector<LaunchHost>& hosts, int size, int rank) {
  HostSlot s;
  int first = 0, left = size;
  for (size_t h = 0; h < hosts.size() && left > 0; ++h) {
    const int here = std::min(hosts[h].capacity, left);
    if (rank >= first && rank < first + here) {
      s.host = static_cast<int>(h);
      s.local_rank = rank - first;
      s.local_size = here;
    }
    first += here;
    left -= here;
  }
  if (left > 0) s = HostSlot{};  // more ranks than the hosts take: no rule applies
  return s;
}

}  // namespace edp::knobs
