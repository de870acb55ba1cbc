// The launch planner (see launch_plan.h): pure functions from a request and an inventory to a
// plan. Its text inputs are read in host_lists.cpp; the plan is printed by plan_format.cpp.
#include "launch/launch_plan.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <set>

#include "core/text.h"
#include "edp/core/error.h"
#include "edp/core/files.h"
#include "edp/core/threads.h"
#include "edp/elastic/allowed.h"
#include "edp/launch/placement.h"

namespace edp::launch {

using ::edp::detail::concat;

using text::join;

// ---- placement rules --------------------------------------------------------------------------

int gpus_needed(int local_size, int ranks_per_gpu) {
  return (local_size + ranks_per_gpu - 1) / ranks_per_gpu;
}

LocalSlot assign_local(int local_rank, int local_size, int ranks_per_gpu) {
  EDP_CHECK(local_size >= 1 && local_rank >= 0 && local_rank < local_size && ranks_per_gpu >= 1,
            "assign_local(", local_rank, ", ", local_size, ", ", ranks_per_gpu, ")");
  const int g = gpus_needed(local_size, ranks_per_gpu);
  const int q = local_size / g, r = local_size % g;  // the first r GPUs take q+1 ranks
  LocalSlot s;
  if (local_rank < r * (q + 1)) {
    s.gpu_slot = local_rank / (q + 1);
    s.gpu_rank = local_rank % (q + 1);
    s.gpu_ranks = q + 1;
  } else {
    const int k = local_rank - r * (q + 1);
    s.gpu_slot = r + k / q;
    s.gpu_rank = k % q;
    s.gpu_ranks = q;
  }
  return s;
}

std::vector<GpuInfo> select_gpus(const std::vector<GpuInfo>& gpus, const std::vector<std::string>& selection) {
  if (selection.empty() || (selection.size() == 1 && selection[0] == "all")) return gpus;
  if (selection.size() == 1 && selection[0] == "none") return {};
  std::vector<GpuInfo> out;
  std::set<int> seen;
  std::string have;
  for (const auto& g : gpus) have += (have.empty() ? "" : ", ") + std::to_string(g.index) + " (" + g.uuid + ")";
  if (have.empty()) have = "none";
  for (const auto& tok : selection) {
    int index = -1;
    const bool by_index = text::parse_digits(tok, index);
    auto it = std::find_if(gpus.begin(), gpus.end(), [&](const GpuInfo& g) {
      return by_index ? g.index == index : g.uuid == tok;
    });
    if (it == gpus.end())
      throw Error("--gpus: no GPU '" + tok + "' on this host; it has: " + have);
    if (!seen.insert(it->index).second) throw Error("--gpus: GPU '" + tok + "' is listed twice");
    out.push_back(*it);
  }
  return out;
}

int mps_client_limit(int cc_major) { return cc_major >= 7 || cc_major == 0 ? 48 : 16; }

int default_thread_percentage(int k) { return k <= 2 ? 100 : std::min(100, (200 + k - 1) / k); }

std::string mps_pipe_dir(const std::string& job_dir, int gpu) {
  return job_dir + "/mps/" + std::to_string(gpu) + "/pipe";
}
std::string mps_log_dir(const std::string& job_dir, int gpu) {
  return job_dir + "/mps/" + std::to_string(gpu) + "/log";
}

std::vector<std::pair<std::string, std::string>> rank_environment(const RankContext& c) {
  std::vector<std::pair<std::string, std::string>> env;
  auto set = [&](const std::string& k, const std::string& v) { env.emplace_back(k, v); };
  const int threads = c.bound ? std::max(1, c.cores) : share_of_cores(c.cores, c.local_size);
  set("EDP_RANK", std::to_string(c.rank));
  set("EDP_WORLD_SIZE", std::to_string(c.size));
  set("EDP_LOCAL_RANK", std::to_string(c.local_rank));
  set("EDP_LOCAL_SIZE", std::to_string(c.local_size));
  set("EDP_NUM_THREADS", std::to_string(threads));
  if (!c.gpu_mode) {
    set("EDP_LOCAL_GPU", "-1");
    set("EDP_MPS_ACTIVE", "0");
    return env;
  }
  const int slots = static_cast<int>(c.gpus.size()) * c.ranks_per_gpu;
  if (c.local_size > slots)
    throw Error(concat("host ", c.host, " runs ", c.local_size, " ranks but has ", c.gpus.size(),
                       " selected GPU(s) x ", c.ranks_per_gpu, " rank(s) per GPU = ", slots,
                       " GPU slots: give this host fewer ranks (hostfile slots, Slurm "
                       "--ntasks-per-node) or raise --ranks-per-gpu"));
  const LocalSlot s = assign_local(c.local_rank, c.local_size, c.ranks_per_gpu);
  const GpuInfo& g = c.gpus[static_cast<size_t>(s.gpu_slot)];
  set("EDP_LOCAL_GPU", std::to_string(g.index));
  set("EDP_GPU_UUID", g.uuid);
  // The rank sees exactly its GPU (by UUID, immune to CUDA's enumeration order), as device 0.
  set("EDP_CUDA_DEVICE", "0");
  set("EDP_GPU_RANK", std::to_string(s.gpu_rank));
  set("EDP_GPU_RANKS", std::to_string(s.gpu_ranks));
  set("EDP_MPS_ACTIVE", c.mps ? "1" : "0");
  set("CUDA_VISIBLE_DEVICES", g.uuid);
  if (c.mps) {
    const bool own = c.mps_pipe_directory.empty();
    set("CUDA_MPS_PIPE_DIRECTORY", own ? mps_pipe_dir(c.job_dir, g.index) : c.mps_pipe_directory);
    if (own) set("CUDA_MPS_LOG_DIRECTORY", mps_log_dir(c.job_dir, g.index));
    set("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", std::to_string(c.mps_thread_percentage));
    if (!c.mps_mem_limit.empty()) set("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=" + c.mps_mem_limit);
  }
  return env;
}

std::vector<std::string> mps_host_argv(const LaunchRequest& req, const std::vector<std::string>& hosts,
                                       const std::string& action, const std::string& gpus, bool with_hosts) {
  std::vector<std::string> a = {req.mpirun};
  if (req.allow_run_as_root) a.push_back("--allow-run-as-root");
  a.insert(a.end(), {"-np", std::to_string(hosts.size())});
  if (with_hosts) {
    std::vector<std::string> hs;
    for (const auto& h : hosts) hs.push_back(h + ":1");
    a.insert(a.end(), {"--host", join(hs, ",")});
  }
  a.insert(a.end(), {"--map-by", "ppr:1:node", "--bind-to", "none", req.self_exe, "--mps-host", action, req.job_dir});
  if (action == "start") a.push_back(gpus);
  return a;
}

// ---- the planner ------------------------------------------------------------------------------

namespace {

// What the planner's steps share: the hosts, how many ranks each takes, the binding.
struct Layout {
  std::vector<HostSpec> hosts;
  std::vector<int> cap, ranks_on;
  int H = 0, G = 0, K = 1, np = 0;
  bool oversubscribed = false, cores_shared = false, reuse = false, all_gpus = false;
  BindMode bind = BindMode::Auto;
};

// The GPUs of the plan (none: CPU mode).
void plan_gpus(const LaunchRequest& req, const std::vector<GpuInfo>& local_gpus, Plan& p, Layout& L) {
  const int K = L.K;
  // GPUs.
  const bool forced_cpu = req.gpus.size() == 1 && req.gpus[0] == "none";
  const bool explicit_selection = !req.gpus.empty() && !forced_cpu && !(req.gpus.size() == 1 && req.gpus[0] == "all");
  if (explicit_selection && local_gpus.empty())
    throw Error("--gpus " + join(req.gpus, ",") + ": no GPU was found on this host (" + req.gpu_source +
                "); use --gpus none for CPU mode");
  p.gpus = forced_cpu ? std::vector<GpuInfo>{} : select_gpus(local_gpus, req.gpus);
  p.gpu_mode = !p.gpus.empty();
  const int G = L.G = static_cast<int>(p.gpus.size());
  for (const auto& g : p.gpus)
    if (g.compute_mode == "Prohibited")
      throw Error(concat("GPU ", g.index, " (", g.uuid, ") is in Prohibited compute mode: no process "
                         "may use it; leave it out with --gpus"));
  if (p.gpu_mode)
    p.notes.push_back(concat("GPU mode: ", G, " GPU(s) selected (", req.gpu_source, "), ", K,
                             " rank(s) per GPU"));
  else
    p.notes.push_back(forced_cpu ? "CPU mode: --gpus none"
                                 : "CPU mode: no GPU found (" + req.gpu_source + "); ranks share the cores");

}

// The hosts, their capacities, the ranks (-np or its default) and how they fill the hosts.
void plan_hosts(const LaunchRequest& req, Plan& p, Layout& L) {
  const int G = L.G, K = L.K;
  // Hosts and their capacities.
  std::vector<HostSpec>& hosts = L.hosts = req.host_source == HostSource::Local
                                    ? std::vector<HostSpec>{{req.local_host, 0, 0}}
                                    : req.hosts;
  if (hosts.empty()) throw Error("no host to run on (empty hostfile or Slurm allocation)");
  const int H = L.H = static_cast<int>(hosts.size());
  std::vector<int>& cap = L.cap;
  cap.assign(static_cast<size_t>(H), 0);
  for (int h = 0; h < H; ++h) {
    const int slots = hosts[h].slots;
    if (p.gpu_mode)
      cap[h] = (slots > 0 && !req.oversubscribe) ? std::min(slots, G * K) : G * K;
    else
      cap[h] = slots > 0 ? slots : req.local_cores;
  }
  int total_cap = 0;
  for (int c : cap) total_cap += c;

  int np = req.np;
  if (np == 0) {
    if (p.gpu_mode) {
      np = total_cap;
    } else if (req.host_source == HostSource::Slurm && req.slurm_ntasks > 0) {
      np = req.slurm_ntasks;
    } else if (req.host_source != HostSource::Local) {
      const bool all_slots = std::all_of(hosts.begin(), hosts.end(), [](const HostSpec& s) { return s.slots > 0; });
      np = all_slots ? total_cap : H;
    } else {
      np = 1;
    }
    p.notes.push_back(concat("-np not given: ", np, " rank(s)"));
  }
  p.np = L.np = np;

  // Fill hosts in order, as Open MPI's by-slot mapping does.
  std::vector<int>& ranks_on = L.ranks_on;
  ranks_on.assign(static_cast<size_t>(H), 0);
  int left = np;
  for (int h = 0; h < H && left > 0; ++h) {
    ranks_on[h] = std::min(cap[h], left);
    left -= ranks_on[h];
  }
  const bool slurm = req.host_source == HostSource::Slurm;
  if (left > 0) {
    if (p.gpu_mode)
      throw Error(concat("-np ", np, " needs more GPU slots than there are: ", H, " host(s) x ", G,
                         " GPU(s) x ", K, " rank(s) per GPU",
                         (total_cap < H * G * K ? (slurm ? " (limited by the Slurm allocation's task slots, " +
                                                               req.slurm_allocation + ")"
                                                         : std::string(" (limited by hostfile slots)"))
                                                : std::string()),
                         " = ", total_cap, "; raise --ranks-per-gpu, add GPUs or hosts, or lower -np"));
    // Inside Slurm the allocation is the limit: Open MPI's mpirun would refuse the same -np.
    if (slurm && !req.oversubscribe)
      throw Error(concat("-np ", np, " is more ranks than the Slurm allocation has task slots: ", total_cap, " on ", H,
                         " node(s) (", req.slurm_allocation, "); ask Slurm for at least ", np,
                         " tasks (sbatch -n ", np, ", or -N and --ntasks-per-node) or lower -np"));
    if (!req.oversubscribe)
      throw Error(concat("-np ", np, " is more ranks than the ", total_cap, " ",
                         req.host_source == HostSource::Local ? "core(s) of this host" : "slot(s) of the hosts",
                         "; pass --oversubscribe to let ranks share cores"));
    for (int h = 0; h < H; ++h) ranks_on[h] += left / H + (h < left % H ? 1 : 0);
    left = 0;
  }

}

// Cores per rank and the binding; the per-host part of the plan.
void plan_cores(const LaunchRequest& req, Plan& p, Layout& L) {
  const int H = L.H, K = L.K;
  const std::vector<HostSpec>& hosts = L.hosts;
  const std::vector<int>& ranks_on = L.ranks_on;
  const std::vector<int>& cap = L.cap;
  // Cores: remote hosts are assumed to have as many as this one.
  bool& oversubscribed = L.oversubscribed;
  for (int h = 0; h < H; ++h) {
    const int slot_limit = hosts[h].slots > 0 ? hosts[h].slots : req.local_cores;
    if (ranks_on[h] > slot_limit) oversubscribed = true;
  }
  if (oversubscribed && !req.oversubscribe)
    throw Error(concat("more ranks on a host than it has cores (", req.local_cores,
                       " on this host) or hostfile slots; pass --oversubscribe to let ranks share cores"));
  bool& cores_shared = L.cores_shared;
  for (int h = 0; h < H; ++h) cores_shared = cores_shared || ranks_on[h] > req.local_cores;
  BindMode& bind = L.bind;
  bind = req.bind;
  if (bind == BindMode::Auto) bind = cores_shared ? BindMode::None : BindMode::Core;
  if (bind == BindMode::Core && cores_shared)
    throw Error(concat("--bind-to core: more ranks on a host than its ", req.local_cores,
                       " core(s); use --bind-to none"));
  p.bind = bind;
  int pe = 1 << 30;
  for (int h = 0; h < H; ++h)
    if (ranks_on[h] > 0) pe = std::min(pe, share_of_cores(req.local_cores, ranks_on[h]));
  p.pe = pe == (1 << 30) ? 1 : pe;
  if (bind == BindMode::Core)
    p.notes.push_back(concat("binding: each rank bound to ", p.pe, " core(s)"));
  else
    p.notes.push_back(cores_shared ? "binding: none (more ranks than cores)" : "binding: none");

  for (int h = 0; h < H; ++h) {
    HostPlan hp;
    hp.name = hosts[h].name;
    hp.ranks = ranks_on[h];
    hp.capacity = cap[h];
    hp.threads_per_rank = bind == BindMode::Core ? p.pe : share_of_cores(req.local_cores, ranks_on[h]);
    hp.gpus_used = p.gpu_mode && ranks_on[h] > 0 ? gpus_needed(ranks_on[h], K) : 0;
    p.hosts.push_back(hp);
  }

}

// MPS: whether ranks share GPUs through it, and its daemons on each host.
void plan_mps(const LaunchRequest& req, Plan& p, Layout& L) {
  const int H = L.H, G = L.G, K = L.K;
  // MPS.
  int max_share = 1;
  for (const auto& hp : p.hosts)
    if (hp.ranks > 0 && p.gpu_mode) max_share = std::max(max_share, assign_local(0, hp.ranks, K).gpu_ranks);
  int limit = 1 << 30;
  const GpuInfo* limiting = nullptr;
  for (const auto& g : p.gpus)
    if (mps_client_limit(g.cc_major) < limit) {
      limit = mps_client_limit(g.cc_major);
      limiting = &g;
    }
  const bool reuse = L.reuse = !req.mps_pipe_directory.empty();
  p.mps_thread_percentage = req.mps_thread_percentage ? req.mps_thread_percentage : default_thread_percentage(K);
  if (p.mps_thread_percentage < 1 || p.mps_thread_percentage > 100)
    throw Error(concat("--mps-thread-percentage ", p.mps_thread_percentage, ": must be 1..100"));
  if (!req.mps_mem_limit.empty()) p.mps_mem_limit = check_mps_size(req.mps_mem_limit);
  if (!p.gpu_mode) {
    if (req.mps == MpsMode::On) throw Error("--mps on: there is no GPU to share (CPU mode)");
    p.mps_reason = "off (CPU mode)";
  } else if (req.mps == MpsMode::Off) {
    p.mps_reason = "off (--mps off): ranks sharing a GPU are time-sliced";
  } else {
    std::string why_not;
    if (max_share > limit)
      why_not = concat(max_share, " ranks per GPU exceed the MPS client limit of ", limit, " for GPU ",
                       limiting->index, " (compute capability ", limiting->cc_major, ".", limiting->cc_minor, ")");
    else if (!reuse && !req.mps_control_available)
      why_not = "nvidia-cuda-mps-control was not found on PATH";
    if (req.mps == MpsMode::On && !why_not.empty()) throw Error("--mps on: " + why_not);
    if (req.mps == MpsMode::Auto && max_share <= 1) {
      p.mps_reason = "off (auto: one rank per GPU, nothing to share)";
    } else if (!why_not.empty()) {
      p.mps_reason = "off (auto: " + why_not + "); ranks sharing a GPU are time-sliced";
      p.notes.push_back("warning: MPS not used: " + why_not);
    } else {
      p.mps = true;
      p.mps_started_by_edprun = !reuse;
      p.mps_reason = reuse ? "on (reusing the daemon at " + req.mps_pipe_directory + ")"
                           : "on (one control daemon per used GPU, started and stopped by edprun)";
    }
  }
  if (p.gpu_mode && !p.mps && max_share > 1)
    for (const auto& g : p.gpus)
      if (g.compute_mode == "Exclusive_Process")
        throw Error(concat("GPU ", g.index, " is in Exclusive_Process compute mode: ", max_share,
                           " ranks can share it only through MPS (", p.mps_reason, ")"));
  const bool all_gpus = L.all_gpus = req.elastic && (req.host_source == HostSource::Local || !req.elastic_restart_only);
  if (p.mps && p.mps_started_by_edprun) {
    // Unix socket paths hold 107 bytes; MPS's longest name in the pipe directory is
    // "control_privileged".
    if (mps_pipe_dir(req.job_dir, 99).size() + 20 > 107)
      throw Error("job directory '" + req.job_dir + "' is too long for MPS's socket paths; set TMPDIR to a shorter directory");
    // An elastic job on one host may grow in place onto GPUs its first ranks leave unused: every
    // selected GPU gets its daemon from the start (a control daemon costs nothing until a client
    // connects), so that spawned ranks find one (a restart then never needs to move daemons). On
    // several hosts the same, on every host, unless the job only rescales by restart: then the
    // daemons follow the hosts with ranks (edprun moves them at each restart).
    for (int h = 0; h < H; ++h)
      for (int s = 0; s < (all_gpus ? G : p.hosts[h].gpus_used); ++s)
        p.daemons.push_back({h, p.gpus[s].index, p.gpus[s].uuid, mps_pipe_dir(req.job_dir, p.gpus[s].index),
                             mps_log_dir(req.job_dir, p.gpus[s].index)});
  }

  if (!p.daemons.empty() && H > 1) {
    int used = 0;
    for (const auto& hp : p.hosts) {
      used = std::max(used, all_gpus ? G : hp.gpus_used);
      if (hp.ranks > 0 || all_gpus) p.mps_hosts.push_back(hp.name);
    }
    std::vector<std::string> idx;
    for (int s = 0; s < used; ++s) idx.push_back(std::to_string(p.gpus[s].index));
    p.mps_gpus = join(idx, ",");
    const bool with_hosts = req.host_source == HostSource::Hostfile;
    p.mps_host_start_argv = mps_host_argv(req, p.mps_hosts, "start", p.mps_gpus, with_hosts);
    p.mps_host_stop_argv = mps_host_argv(req, p.mps_hosts, "stop", "", with_hosts);
  }

}

// Each rank's host, local rank, threads and GPU.
void plan_ranks(const LaunchRequest& req, Plan& p, const Layout& L) {
  const int H = L.H, K = L.K;
  const bool reuse = L.reuse;
  const std::vector<int>& ranks_on = L.ranks_on;
  // Ranks.
  int rank = 0;
  for (int h = 0; h < H; ++h)
    for (int l = 0; l < ranks_on[h]; ++l, ++rank) {
      RankPlan r;
      r.rank = rank;
      r.host = h;
      r.local_rank = l;
      r.local_size = ranks_on[h];
      r.threads = p.hosts[h].threads_per_rank;
      if (p.gpu_mode) {
        const LocalSlot s = assign_local(l, ranks_on[h], K);
        r.gpu = p.gpus[s.gpu_slot].index;
        r.gpu_uuid = p.gpus[s.gpu_slot].uuid;
        r.gpu_rank = s.gpu_rank;
        r.gpu_ranks = s.gpu_ranks;
        if (p.mps) r.mps_pipe_dir = reuse ? req.mps_pipe_directory : mps_pipe_dir(req.job_dir, r.gpu);
      }
      p.ranks.push_back(r);
    }

}

// The variables every rank gets (the shim derives the per-rank ones from these).
void plan_env(const LaunchRequest& req, Plan& p, const Layout& L) {
  const int H = L.H, K = L.K;
  const bool reuse = L.reuse;
  const BindMode bind = L.bind;
  // Variables every rank gets (the shim derives the per-rank ones from these).
  auto env = [&](const std::string& k, const std::string& v) { p.env.emplace_back(k, v); };
  env("EDP_LAUNCHER", "edprun");
  env("EDP_LAUNCH_MODE", p.gpu_mode ? "gpu" : "cpu");
  env("EDP_RANKS_PER_GPU", std::to_string(K));
  if (p.gpu_mode) {
    std::vector<std::string> sel, inv;
    for (const auto& g : p.gpus) {
      sel.push_back(std::to_string(g.index));
      inv.push_back(concat(g.index, "=", g.uuid, "=", g.cc_major, ".", g.cc_minor));
    }
    // Indices travel to remote hosts; UUIDs only mean something on this one.
    env("EDP_LAUNCH_GPUS", join(sel, ","));
    env("EDP_LAUNCH_HOST", req.local_host);
    env("EDP_LAUNCH_INVENTORY", join(inv, ";"));
  }
  env("EDP_LAUNCH_JOB_DIR", req.job_dir);
  env("EDP_LAUNCH_BIND", bind == BindMode::Core ? "core" : "none");
  env("EDP_LAUNCH_MPS", p.mps ? "1" : "0");
  if (p.mps) {
    if (reuse) env("EDP_LAUNCH_MPS_PIPE_DIRECTORY", req.mps_pipe_directory);
    env("EDP_LAUNCH_MPS_THREAD_PERCENTAGE", std::to_string(p.mps_thread_percentage));
    if (!p.mps_mem_limit.empty()) env("EDP_LAUNCH_MPS_MEM_LIMIT", p.mps_mem_limit);
  }
  if (req.elastic && req.host_source != HostSource::Local && H > 1) {
    std::vector<std::string> hs;
    for (const auto& hp : p.hosts) hs.push_back(hp.name + ":" + std::to_string(std::max(hp.ranks, hp.capacity)));
    env("EDP_LAUNCH_HOSTS", join(hs, ","));
  }
  for (const auto& [k, v] : req.extra_env) env(k, v);

}

// The mpirun command.
void plan_mpirun(const LaunchRequest& req, Plan& p, const Layout& L) {
  const int H = L.H, np = L.np;
  const bool oversubscribed = L.oversubscribed, cores_shared = L.cores_shared;
  const BindMode bind = L.bind;
  // The mpirun command.
  auto& a = p.mpirun_argv;
  a.push_back(req.mpirun);
  if (req.allow_run_as_root) a.push_back("--allow-run-as-root");
  // Elastic on one host: MPI_Comm_spawn fails (MPI_ERR_SPAWN) once mpirun has no free slot, and a
  // shrink in place leaves its ranks parked in their slots until the whole job ends (Open MPI 4.1),
  // so a fixed slot count would run out after a few rescales; --oversubscribe lifts mpirun's limit
  // and nothing else: the ranks placed here fit their cores and keep their binding, spawned ranks
  // are not bound (they run with `bind none`, see rank_exec), and the planner still checks every
  // size against EDP_ALLOWED_WORKERS. Several hosts (hostfile or Slurm): the same, and mpirun
  // learns every host (--host with each host's capacity, or the allocation), and the ranks get
  // EDP_LAUNCH_HOSTS, so that an in-place grow spawns its ranks onto the hosts a restart at that
  // size would use (the library names them in MPI_Comm_spawn_multiple, the shim places them there).
  // Without the hosts mpirun would refuse the spawn ("All nodes which are allocated for this job are
  // already filled") and Open MPI 4.1's parent ranks then hang in MPI_Comm_spawn (measured).
  const bool multi_elastic = req.elastic && req.host_source != HostSource::Local && H > 1;
  const bool spawn_room = req.elastic && (req.host_source == HostSource::Local || multi_elastic);
  if (spawn_room && !oversubscribed && !cores_shared)
    p.notes.push_back("elastic: mpirun gets --oversubscribe so that an in-place grow can spawn ranks "
                      "(parked ranks of a shrink keep their slots until the job ends)");
  if (oversubscribed || cores_shared || spawn_room) a.push_back("--oversubscribe");
  a.insert(a.end(), {"-np", std::to_string(np)});
  // Open MPI's session directory and shared-memory segments, job-private so that edprun can
  // remove them after any mpirun exit, a SIGKILL included (docs/launch.md, "Cleanup").
  if (!req.ompi_session_dir.empty()) a.insert(a.end(), {"--mca", "orte_tmpdir_base", req.ompi_session_dir});
  if (!req.ompi_shm_dir.empty()) a.insert(a.end(), {"--mca", "btl_vader_backing_directory", req.ompi_shm_dir});
  // Open MPI waits this long between SIGTERM and SIGKILL whenever it ends the ranks, also after a
  // non-zero exit of ranks that have all ended: 1 s by default, most of a rescale by restart.
  a.insert(a.end(), {"--mca", "odls_base_sigkill_timeout", std::to_string(req.term_grace_s)});
  if (req.host_source == HostSource::Hostfile) {
    std::vector<std::string> hs;
    for (const auto& hp : p.hosts)
      if (multi_elastic)
        hs.push_back(hp.name + ":" + std::to_string(std::max(hp.ranks, hp.capacity)));
      else if (hp.ranks > 0)
        hs.push_back(hp.name + ":" + std::to_string(hp.ranks));
    a.insert(a.end(), {"--host", join(hs, ",")});
  }
  if (bind == BindMode::Core)
    a.insert(a.end(), {"--map-by", "slot:PE=" + std::to_string(p.pe), "--bind-to", "core"});
  else
    a.insert(a.end(), {"--map-by", "slot", "--bind-to", "none"});
  for (const auto& [k, v] : p.env) a.insert(a.end(), {"-x", k + "=" + v});
  a.insert(a.end(), req.mpirun_extra.begin(), req.mpirun_extra.end());
  a.insert(a.end(), {req.self_exe, "--rank-exec", "--"});
  a.insert(a.end(), req.program.begin(), req.program.end());
}

// check_only: stop once every check has passed, before the per-rank part (O(np), and no check
// there), so that allowed_worker_counts() can try thousands of sizes cheaply.
Plan plan_impl(const LaunchRequest& req, const std::vector<GpuInfo>& local_gpus, bool check_only) {
  Plan p;
  const int K = req.ranks_per_gpu;
  if (K < 1) throw Error(concat("--ranks-per-gpu ", K, ": must be at least 1"));
  if (req.np < 0) throw Error(concat("-np ", req.np, ": must be at least 1"));
  if (req.program.empty())
    throw Error("nothing to run: give the program after '--', e.g. edprun -np 2 -- ./train --epochs 1");
  if (req.local_cores < 1) throw Error("local_cores must be >= 1");
  p.ranks_per_gpu = K;
  p.host_source = req.host_source;

  Layout L;
  L.K = K;
  plan_gpus(req, local_gpus, p, L);
  plan_hosts(req, p, L);
  plan_cores(req, p, L);
  plan_mps(req, p, L);
  if (check_only) return p;
  plan_ranks(req, p, L);
  plan_env(req, p, L);
  plan_mpirun(req, p, L);
  return p;
}

}  // namespace

Plan make_plan(const LaunchRequest& req, const std::vector<GpuInfo>& local_gpus) {
  return plan_impl(req, local_gpus, false);
}

std::vector<int> allowed_worker_counts(const LaunchRequest& req, const std::vector<GpuInfo>& local_gpus) {
  const Plan base = make_plan(req, local_gpus);
  int slots = 0;
  for (const auto& h : base.hosts) slots += h.capacity;
  const int bound = std::min(std::max(base.np, slots), elastic::kMaxAllowedWorkers);
  std::vector<int> out;
  LaunchRequest r = req;
  for (int n = 1; n <= bound; ++n) {
    r.np = n;
    try {
      plan_impl(r, local_gpus, true);
      out.push_back(n);
    } catch (const Error&) {
      // Not a size this launch can run (too many ranks for a host, an MPS limit, ...).
    }
  }
  return out;
}

}  // namespace edp::launch
