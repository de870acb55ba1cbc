// The launch plan as text: `edprun --dry-run`'s report and the shell quoting of its commands.
#include <algorithm>
#include <sstream>

#include "core/text.h"
#include "launch/launch_plan.h"

namespace edp::launch {

using text::join;

std::string shell_quote(const std::string& s) {
  if (!s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
        return std::isalnum(c) || std::string("@%+=:,./_-").find(static_cast<char>(c)) != std::string::npos;
      }))
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (i) out += ' ';
    out += shell_quote(argv[i]);
  }
  return out;
}

std::string format_plan(const Plan& p) {
  std::ostringstream os;
  const char* src = p.host_source == HostSource::Local ? "local" : p.host_source == HostSource::Hostfile ? "hostfile" : "slurm";
  os << "edprun plan\n";
  os << "  mode      " << (p.gpu_mode ? "gpu" : "cpu") << "\n";
  os << "  ranks     " << p.np;
  if (p.gpu_mode) os << " (" << p.ranks_per_gpu << " per GPU)";
  os << "\n  hosts     " << p.hosts.size() << " (" << src << ")\n";
  os << "  mps       " << p.mps_reason << "\n";
  if (p.mps) os << "  mps knobs thread percentage " << p.mps_thread_percentage << ", pinned memory limit "
                << (p.mps_mem_limit.empty() ? "none" : p.mps_mem_limit) << " per rank\n";
  os << "  binding   " << (p.bind == BindMode::Core ? "core, " + std::to_string(p.pe) + " core(s) per rank" : std::string("none"))
     << "\n";
  if (p.gpu_mode) {
    os << "gpus (this host)\n";
    for (const auto& g : p.gpus)
      os << "  " << g.index << "  " << g.uuid << "  " << g.name << "  cc " << g.cc_major << "." << g.cc_minor
         << "  " << g.memory_mib << " MiB  " << g.compute_mode << "\n";
  }
  os << "hosts\n";
  for (const auto& h : p.hosts)
    os << "  " << h.name << "  ranks " << h.ranks << "  threads/rank " << h.threads_per_rank
       << (p.gpu_mode ? "  gpus used " + std::to_string(h.gpus_used) : std::string()) << "\n";
  os << "ranks\n";
  size_t hw = 4;
  for (const auto& h : p.hosts) hw = std::max(hw, h.name.size());
  auto pad = [](std::string v, size_t w) { return v.size() < w ? v + std::string(w - v.size(), ' ') : v; };
  os << "  " << pad("rank", 6) << pad("host", hw + 2) << pad("local", 8) << pad("gpu", 5) << pad("gpu-rank", 10)
     << pad("threads", 9) << "uuid\n";
  for (const auto& r : p.ranks) {
    const bool g = r.gpu >= 0;
    std::string line = "  " + pad(std::to_string(r.rank), 6) + pad(p.hosts[r.host].name, hw + 2) +
                       pad(std::to_string(r.local_rank) + "/" + std::to_string(r.local_size), 8) +
                       pad(g ? std::to_string(r.gpu) : "-", 5) +
                       pad(g ? std::to_string(r.gpu_rank) + "/" + std::to_string(r.gpu_ranks) : "-", 10) +
                       pad(std::to_string(r.threads), 9) + (g ? r.gpu_uuid : "-");
    os << line << "\n";
  }
  if (!p.daemons.empty()) {
    os << "mps daemons (started before mpirun, stopped on every exit path)\n";
    for (const auto& d : p.daemons) {
      os << "  host " << p.hosts[d.host].name << " gpu " << d.gpu << ":\n";
      os << "    start: " << shell_join({"env", "CUDA_VISIBLE_DEVICES=" + d.gpu_uuid, "CUDA_MPS_PIPE_DIRECTORY=" + d.pipe_dir,
                                         "CUDA_MPS_LOG_DIRECTORY=" + d.log_dir, "nvidia-cuda-mps-control", "-d"})
         << "\n";
      os << "    stop:  echo quit | " << shell_join({"env", "CUDA_MPS_PIPE_DIRECTORY=" + d.pipe_dir, "nvidia-cuda-mps-control"})
         << "\n";
    }
  }
  if (!p.mps_host_start_argv.empty()) {
    os << "mps daemons on every host (through mpirun, one process per host)\n";
    os << "  start: " << shell_join(p.mps_host_start_argv) << "\n";
    os << "  stop:  " << shell_join(p.mps_host_stop_argv) << "\n";
  }
  os << "environment (every rank)\n";
  for (const auto& [k, v] : p.env) os << "  " << k << "=" << v << "\n";
  os << "environment (per rank, set by edprun --rank-exec on the rank's host)\n";
  for (const auto& r : p.ranks) {
    RankContext c;
    c.rank = r.rank;
    c.size = p.np;
    c.local_rank = r.local_rank;
    c.local_size = r.local_size;
    c.ranks_per_gpu = p.ranks_per_gpu;
    c.gpu_mode = p.gpu_mode;
    c.gpus = p.gpus;
    c.mps = p.mps;
    for (const auto& [k, v] : p.env) {
      if (k == "EDP_LAUNCH_JOB_DIR") c.job_dir = v;
      if (k == "EDP_LAUNCH_MPS_PIPE_DIRECTORY") c.mps_pipe_directory = v;
    }
    c.mps_thread_percentage = p.mps_thread_percentage;
    c.mps_mem_limit = p.mps_mem_limit;
    c.bound = p.bind == BindMode::Core;
    c.cores = c.bound ? p.pe : r.threads * r.local_size;
    c.host = p.hosts[r.host].name;
    os << "  rank " << r.rank << ":";
    for (const auto& [k, v] : rank_environment(c)) os << " " << k << "=" << shell_quote(v);
    os << "\n";
  }
  os << "command\n  " << shell_join(p.mpirun_argv) << "\n";
  if (!p.notes.empty()) {
    os << "notes\n";
    for (const auto& n : p.notes) os << "  " << n << "\n";
  }
  return os.str();
}

}  // namespace edp::launch
