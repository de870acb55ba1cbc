// The launch plan: which rank runs on which host, GPU and cores, whether the GPUs are shared
// through MPS, and the exact mpirun command. make_plan() is a pure function of what edprun was
// asked (LaunchRequest) and what it found (the GPUs of this host, its cores, the hosts of the
// hostfile or the Slurm allocation), so it is tested over fake inventories; edprun only adds
// the side effects (discovery, MPS daemons, running mpirun).
//
// How ranks land on GPUs. mpirun places ranks on hosts; on each host the ranks with local rank
// 0..L-1 are spread over ceil(L/K) GPUs (K = --ranks-per-gpu) in contiguous blocks whose sizes
// differ by at most one (L=7, K=4 -> 4+3; L=6, K=4 -> 3+3). assign_local() is that rule; the
// per-rank shim (`edprun --rank-exec`) applies the same function on the rank's own host, so the
// placement stays right even where edprun cannot predict the host layout (Slurm).
//
// Remote hosts are assumed to look like this one (same GPU selection, same core count): edprun
// never logs into other hosts. The shim re-discovers GPUs on remote hosts and fails loudly if
// the selection does not exist there.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace edp::launch {

// One GPU as NVML or nvidia-smi reports it. Indices are NVML's (PCI bus order, as in
// nvidia-smi), not CUDA's default enumeration: ranks are pinned by UUID for that reason.
struct GpuInfo {
  int index = 0;
  std::string uuid;   // "GPU-8c6e..." (or "MIG-...")
  std::string name;   // "NVIDIA H100 80GB HBM3"
  int cc_major = 0;   // compute capability, 0 if unknown
  int cc_minor = 0;
  int64_t memory_mib = 0;
  std::string compute_mode = "Default";  // Default | Exclusive_Process | Prohibited
  // A MIG instance (a slice of a GPU in MIG mode, `edprun --mig`): its profile ("1g.10gb") and
  // the index of the GPU it belongs to; index is then the instance's place in nvidia-smi -L's list.
  std::string mig_profile;
  int parent = -1;
};

// One host line of an Open MPI hostfile ("node1 slots=4 max_slots=8"); slots 0 = not given.
struct HostSpec {
  std::string name;
  int slots = 0;
  int max_slots = 0;
};

enum class MpsMode { Auto, On, Off };
enum class BindMode { Auto, Core, None };
enum class HostSource { Local, Hostfile, Slurm };

struct LaunchRequest {
  int np = 0;                       // 0: fill every GPU slot (GPU mode) / see docs (CPU mode)
  int ranks_per_gpu = 1;            // K
  std::vector<std::string> gpus;    // selection: indices or UUIDs; empty = all; {"none"} = CPU
  HostSource host_source = HostSource::Local;
  std::vector<HostSpec> hosts;      // Hostfile/Slurm hosts; Local: ignored
  int slurm_ntasks = 0;             // SLURM_NTASKS, default -np inside an allocation
  std::string slurm_allocation;     // "job 12: edp-h[1-3], SLURM_TASKS_PER_NODE=2(x3)" (errors)
  MpsMode mps = MpsMode::Auto;
  int mps_thread_percentage = 0;    // 0: default_thread_percentage(K)
  std::string mps_mem_limit;        // "" or e.g. "8G" (per rank, pinned device memory)
  std::string mps_pipe_directory;   // reuse a daemon the user runs; "" = edprun starts its own
  bool mps_control_available = true;  // nvidia-cuda-mps-control found on PATH
  BindMode bind = BindMode::Auto;
  bool oversubscribe = false;
  // An elastic job (--control-file): on one host mpirun gets --oversubscribe, so that an in-place
  // grow can spawn ranks while the ranks of a shrink still hold their slots (docs/launch.md).
  bool elastic = false;
  // EDP_RESCALE_MODE=restart where edprun runs: the job never grows in place, so on several hosts
  // the MPS daemons follow the hosts with ranks instead of running on every host from the start.
  bool elastic_restart_only = false;
  bool allow_run_as_root = false;
  std::string mpirun = "mpirun";
  std::vector<std::string> mpirun_extra;  // passed to mpirun verbatim, before the program
  int term_grace_s = 0;  // mpirun's wait from SIGTERM to SIGKILL of the ranks (odls_base_sigkill_timeout)
  std::vector<std::pair<std::string, std::string>> extra_env;  // more variables for every rank (-x)
  std::string local_host = "localhost";
  int local_cores = 1;              // physical cores edprun may use on this host
  std::string gpu_source;           // "NVML", "nvidia-smi" or why none was found (for the plan)
  std::string job_dir;              // job-private directory (MPS pipes, logs, rank pid files)
  std::string ompi_session_dir;     // "" or Open MPI's orte_tmpdir_base (one host: <job>/ompi)
  std::string ompi_shm_dir;         // "" or btl_vader_backing_directory (one host: /dev/shm/edprun.*)
  std::string self_exe = "edprun";  // absolute path of edprun (the per-rank shim)
  std::vector<std::string> program; // program and its arguments
};

// Where one rank runs and what it is told.
struct RankPlan {
  int rank = 0;
  int host = 0;            // index into Plan::hosts
  int local_rank = 0;
  int local_size = 1;
  int gpu = -1;            // GPU index on its host; -1 in CPU mode
  std::string gpu_uuid;    // as known on edprun's host (remote hosts: re-resolved by the shim)
  int gpu_rank = 0;        // position among the ranks sharing that GPU
  int gpu_ranks = 1;       // ranks sharing that GPU
  int threads = 1;         // EDP_NUM_THREADS
  std::string mps_pipe_dir;  // "" without MPS
};

struct HostPlan {
  std::string name;
  int ranks = 0;
  int capacity = 0;         // the most ranks this host takes (0: unbounded, --oversubscribe)
  int threads_per_rank = 1;
  int gpus_used = 0;
};

// One MPS control daemon (one per used GPU per host) and the commands that start/stop it.
struct MpsDaemonPlan {
  int host = 0;
  int gpu = 0;
  std::string gpu_uuid;
  std::string pipe_dir, log_dir;
};

struct Plan {
  bool gpu_mode = false;
  int np = 0;
  int ranks_per_gpu = 1;
  std::vector<GpuInfo> gpus;  // the selected GPUs of edprun's host, in selection order
  std::vector<HostPlan> hosts;
  HostSource host_source = HostSource::Local;
  std::vector<RankPlan> ranks;
  bool mps = false;                // ranks go through MPS
  bool mps_started_by_edprun = false;
  std::string mps_reason;          // why MPS is on/off (one line, for the plan and warnings)
  int mps_thread_percentage = 100;
  std::string mps_mem_limit;
  std::vector<MpsDaemonPlan> daemons;  // empty when MPS is off or reused
  // Several hosts: the daemons are started/stopped on every host by `edprun --mps-host`, run
  // once per host through mpirun (edprun never logs into hosts itself). Empty on one host.
  std::vector<std::string> mps_host_start_argv, mps_host_stop_argv;
  std::vector<std::string> mps_hosts;  // the hosts those commands reach (the hosts with ranks)
  std::string mps_gpus;                // the GPU indices they start daemons for ("0,1")
  BindMode bind = BindMode::None;      // resolved: Core or None
  int pe = 1;                          // cores per rank when bound (mpirun --map-by slot:PE=n)
  std::vector<std::pair<std::string, std::string>> env;  // exported to every rank (-x)
  std::vector<std::string> mpirun_argv;                  // the exact command
  std::vector<std::string> notes;                        // human-readable decisions
};

// Throws edp::Error with a message saying what is impossible and what to change.
Plan make_plan(const LaunchRequest& req, const std::vector<GpuInfo>& local_gpus);

// The worker counts this request can be started at (elastic rescales): every np in
// 1..bound for which make_plan succeeds, bound being the larger of the request's own size and
// the slots of its hosts (GPUs x K, hostfile slots or cores), at most
// elastic::kMaxAllowedWorkers. With --oversubscribe a CPU job may grow past its cores only up
// to the size it was started at. Throws what make_plan throws for the request itself.
std::vector<int> allowed_worker_counts(const LaunchRequest& req, const std::vector<GpuInfo>& local_gpus);

// `edprun --mps-host start|stop` once on each of `hosts`, through mpirun (one process per host).
// start: `gpus` names the GPU indices. with_hosts false: no --host (inside Slurm, where mpirun's
// first nodes of the allocation are the hosts with ranks). An elastic rescale that adds or
// removes hosts stops and starts daemons on just those hosts with it.
std::vector<std::string> mps_host_argv(const LaunchRequest& req, const std::vector<std::string>& hosts,
                                       const std::string& action, const std::string& gpus, bool with_hosts = true);

// The placement rule inside one host (see the file comment).
struct LocalSlot {
  int gpu_slot = 0;   // index into the host's selected GPU list
  int gpu_rank = 0;
  int gpu_ranks = 1;
};
LocalSlot assign_local(int local_rank, int local_size, int ranks_per_gpu);
int gpus_needed(int local_size, int ranks_per_gpu);

// Resolves --gpus tokens (indices, UUIDs, "all", or empty = all) against a host's GPUs.
std::vector<GpuInfo> select_gpus(const std::vector<GpuInfo>& gpus,
                                 const std::vector<std::string>& selection);

// MPS clients per GPU: 48 from Volta (7.0) on, 16 before (NVIDIA's MPS documentation).
int mps_client_limit(int cc_major);
// Default CUDA_MPS_ACTIVE_THREAD_PERCENTAGE for K ranks per GPU: twice the fair share,
// ceil(200/K) capped at 100 (K=1,2: 100; K=4: 50; K=8: 25). A rank may then use the SMs its
// neighbours leave idle while they load data or communicate, but cannot take the whole GPU.
int default_thread_percentage(int ranks_per_gpu);

// Open MPI hostfile: "host [slots=N] [max_slots=M]", '#' comments, blank lines. Repeated hosts
// add up their slots, as Open MPI does. Throws with file:line on anything else.
std::vector<HostSpec> parse_hostfile_text(const std::string& text, const std::string& origin);
std::vector<HostSpec> parse_hostfile(const std::string& path);

// Slurm: "node[01-03,07],gpu5" -> node01 node02 node03 node07 gpu5.
std::vector<std::string> expand_slurm_nodelist(const std::string& list);
// Slurm: SLURM_TASKS_PER_NODE "4(x2),3" -> {4,4,3}.
std::vector<int> expand_slurm_tasks_per_node(const std::string& spec);
// Hosts of the Slurm allocation from the environment, or nullopt outside one.
std::optional<std::vector<HostSpec>> slurm_hosts_from_env();
// The allocation in words, for errors: "job 12: edp-h[1-3], SLURM_TASKS_PER_NODE=2(x3)".
std::string slurm_allocation_from_env();

// --gpus "0,2" / "GPU-a,GPU-b" / "all" / "none" -> tokens.
std::vector<std::string> split_list(const std::string& s, char sep = ',');
// --mps-mem-limit: digits with an optional K/M/G/T unit (optionally followed by B), the syntax
// of CUDA_MPS_PINNED_DEVICE_MEM_LIMIT; returns it unchanged or throws.
std::string check_mps_size(const std::string& s);

MpsMode parse_mps_mode(const std::string& s);
BindMode parse_bind_mode(const std::string& s);
const char* mps_mode_name(MpsMode m);
const char* bind_mode_name(BindMode m);

// What the per-rank shim knows on the rank's own host, and the environment it gives the rank
// (EDP_RANK, EDP_LOCAL_GPU, EDP_GPU_UUID, EDP_NUM_THREADS, CUDA_VISIBLE_DEVICES, CUDA_MPS_*...).
// Used by `edprun --rank-exec` and, with predicted inputs, by the dry-run. Throws when the host
// has fewer GPU slots than local ranks.
struct RankContext {
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  int ranks_per_gpu = 1;
  bool gpu_mode = false;
  std::vector<GpuInfo> gpus;    // the selected GPUs of this host
  bool mps = false;
  std::string job_dir;          // MPS pipes of daemons edprun started live under it
  std::string mps_pipe_directory;  // a reused daemon's pipe directory ("" = edprun's own)
  int mps_thread_percentage = 100;
  std::string mps_mem_limit;
  bool bound = false;           // mpirun bound the rank to its cores
  int cores = 1;                // physical cores: the rank's binding if bound, else the host's
  std::string host;
};
std::vector<std::pair<std::string, std::string>> rank_environment(const RankContext& ctx);
// MPS directories of the daemon edprun starts for GPU `gpu_index` under job_dir.
std::string mps_pipe_dir(const std::string& job_dir, int gpu_index);
std::string mps_log_dir(const std::string& job_dir, int gpu_index);

// The --dry-run text: stable layout, every environment variable, the daemons and the command.
std::string format_plan(const Plan& plan);
// POSIX shell quoting, for printing commands a user can paste.
std::string shell_quote(const std::string& s);
std::string shell_join(const std::vector<std::string>& argv);

}  // namespace edp::launch
