// Operating-system side of the launcher (see system.h): GPU discovery through NVML (dlopen'ed,
// so that edp needs no NVIDIA driver at build time and runs in CPU mode without one) or
// nvidia-smi, core counting from the affinity mask and sysfs topology, PATH look-up and a
// small fork/exec helper that captures a child's output.
#include "launch/system.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <regex>
#include <sstream>

#include "core/text.h"
#include "edp/core/error.h"
#include "edp/core/knobs.h"
#include "edp/core/process.h"

namespace edp::launch {

using ::edp::detail::concat;

using text::trim;

std::vector<GpuInfo> parse_nvidia_smi_csv(const std::string& text, bool has_cc) {
  std::vector<GpuInfo> gpus;
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) {
    if (trim(line).empty()) continue;
    std::vector<std::string> f;
    std::istringstream ls(line);
    std::string cell;
    while (std::getline(ls, cell, ',')) f.push_back(trim(cell));
    const size_t want = has_cc ? 6 : 5;
    if (f.size() != want)
      throw Error(concat("nvidia-smi printed '", line, "': expected ", want, " comma-separated fields"));
    GpuInfo g;
    char* end = nullptr;
    g.index = static_cast<int>(std::strtol(f[0].c_str(), &end, 10));
    if (!end || *end) throw Error("nvidia-smi printed '" + line + "': the index is not a number");
    g.uuid = f[1];
    g.name = f[2];
    g.memory_mib = std::strtoll(f[3].c_str(), nullptr, 10);
    if (has_cc) {
      const auto dot = f[4].find('.');
      if (dot != std::string::npos) {
        g.cc_major = std::atoi(f[4].substr(0, dot).c_str());
        g.cc_minor = std::atoi(f[4].substr(dot + 1).c_str());
      }
    }
    g.compute_mode = f[want - 1];
    if (g.compute_mode == "Exclusive_Thread") g.compute_mode = "Exclusive_Process";
    gpus.push_back(g);
  }
  return gpus;
}

// ---- NVML through dlopen ------------------------------------------------------------------------

namespace {
// The few NVML entry points used, declared here so that no NVML header is needed to build.
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
using nvmlReturn_t = int;

bool nvml_discover(std::vector<GpuInfo>& out, std::string& why) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    why = "NVML not loadable";
    return false;
  }
  auto sym = [&](const char* n) { return dlsym(lib, n); };
  auto init = reinterpret_cast<nvmlReturn_t (*)()>(sym("nvmlInit_v2"));
  auto shutdown = reinterpret_cast<nvmlReturn_t (*)()>(sym("nvmlShutdown"));
  auto count = reinterpret_cast<nvmlReturn_t (*)(unsigned*)>(sym("nvmlDeviceGetCount_v2"));
  auto handle = reinterpret_cast<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>(sym("nvmlDeviceGetHandleByIndex_v2"));
  auto uuid = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned)>(sym("nvmlDeviceGetUUID"));
  auto name = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned)>(sym("nvmlDeviceGetName"));
  auto mem = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>(sym("nvmlDeviceGetMemoryInfo"));
  auto cc = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, int*, int*)>(sym("nvmlDeviceGetCudaComputeCapability"));
  auto mode = reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, int*)>(sym("nvmlDeviceGetComputeMode"));
  if (!init || !shutdown || !count || !handle || !uuid || !name) {
    why = "NVML lacks the needed functions";
    dlclose(lib);
    return false;
  }
  if (init() != 0) {
    why = "nvmlInit failed (no driver loaded?)";
    dlclose(lib);
    return false;
  }
  unsigned n = 0;
  if (count(&n) != 0) n = 0;
  for (unsigned i = 0; i < n; ++i) {
    nvmlDevice_t d = nullptr;
    if (handle(i, &d) != 0) continue;
    GpuInfo g;
    g.index = static_cast<int>(i);
    char buf[128] = {0};
    if (uuid(d, buf, sizeof buf) == 0) g.uuid = buf;
    std::memset(buf, 0, sizeof buf);
    if (name(d, buf, sizeof buf) == 0) g.name = buf;
    nvmlMemory_t m{};
    if (mem && mem(d, &m) == 0) g.memory_mib = static_cast<int64_t>(m.total >> 20);
    if (cc) cc(d, &g.cc_major, &g.cc_minor);
    int cm = 0;
    if (mode && mode(d, &cm) == 0)
      g.compute_mode = cm == 2 ? "Prohibited" : (cm == 1 || cm == 3) ? "Exclusive_Process" : "Default";
    out.push_back(g);
  }
  shutdown();
  dlclose(lib);
  return true;
}
}  // namespace

std::vector<GpuInfo> parse_nvidia_smi_list_mig(const std::string& text) {
  static const std::regex gpu_line(R"(^GPU\s+(\d+):\s*(.*?)\s*\(UUID:\s*([^)\s]+)\)\s*$)");
  static const std::regex mig_line(R"(^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s*\(UUID:\s*([^)\s]+)\)\s*$)");
  std::vector<GpuInfo> out;
  int parent = -1;
  std::string parent_name;
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) {
    std::smatch m;
    if (std::regex_match(line, m, gpu_line)) {
      parent = std::atoi(m[1].str().c_str());
      parent_name = m[2].str();
    } else if (std::regex_match(line, m, mig_line)) {
      if (parent < 0) throw Error("nvidia-smi -L printed a MIG instance before any GPU: '" + line + "'");
      GpuInfo g;
      g.index = static_cast<int>(out.size());
      g.uuid = m[3].str();
      g.mig_profile = m[1].str();
      g.parent = parent;
      g.name = parent_name + " MIG " + g.mig_profile;
      // The profile names the instance's memory: "<compute>g.<memory>gb" (or "<c>c.<g>g.<m>gb").
      static const std::regex mem(R"((\d+)gb$)");
      std::smatch mm;
      if (std::regex_search(g.mig_profile, mm, mem)) g.memory_mib = std::atoll(mm[1].str().c_str()) * 1024;
      out.push_back(g);
    } else if (trim(line).rfind("MIG", 0) == 0) {
      throw Error("nvidia-smi -L printed '" + line + "': not a MIG instance line edprun can read");
    }
  }
  return out;
}

Discovery discover_gpus(const std::string& method) {
  Discovery d;
  if (method == "mig") {
    // MIG instances as the devices: nvidia-smi -L lists them with their UUIDs (which
    // CUDA_VISIBLE_DEVICES takes). edprun never changes a GPU's MIG mode or its instances.
    const std::string smi = find_in_path("nvidia-smi");
    if (smi.empty()) {
      d.source = "--mig: nvidia-smi not on PATH";
      return d;
    }
    const RunResult r = run_capture({smi, "-L"});
    if (r.status != 0) {
      d.source = concat("nvidia-smi -L failed (exit ", r.status, "): ", trim(r.err.empty() ? r.out : r.err));
      return d;
    }
    d.gpus = parse_nvidia_smi_list_mig(r.out);
    d.source = d.gpus.empty() ? "nvidia-smi -L: no MIG instance (MIG mode and instances are set up by an "
                                "administrator; edprun never changes them)"
                              : "nvidia-smi -L (MIG instances)";
    return d;
  }
  if (method == "none") {
    d.source = "discovery disabled (--gpu-discovery none)";
    return d;
  }
  if (method != "auto" && method != "nvml" && method != "nvidia-smi")
    throw Error("--gpu-discovery '" + method + "': expected auto, nvml, nvidia-smi, mig or none");
  std::string why_nvml = "NVML not tried";
  if (method == "auto" || method == "nvml") {
    if (nvml_discover(d.gpus, why_nvml)) {
      d.source = "NVML";
      return d;
    }
    if (method == "nvml") {
      d.source = why_nvml;
      return d;
    }
  }
  const std::string smi = find_in_path("nvidia-smi");
  if (smi.empty()) {
    d.source = method == "auto" ? why_nvml + ", nvidia-smi not on PATH" : "nvidia-smi not on PATH";
    return d;
  }
  RunResult r = run_capture({smi, "--query-gpu=index,uuid,name,memory.total,compute_cap,compute_mode",
                             "--format=csv,noheader,nounits"});
  bool has_cc = true;
  if (r.status != 0) {  // drivers before 510 do not know compute_cap
    r = run_capture({smi, "--query-gpu=index,uuid,name,memory.total,compute_mode", "--format=csv,noheader,nounits"});
    has_cc = false;
  }
  if (r.status != 0) {
    d.source = concat("nvidia-smi failed (exit ", r.status, "): ", trim(r.err.empty() ? r.out : r.err));
    return d;
  }
  d.gpus = parse_nvidia_smi_csv(r.out, has_cc);
  d.source = "nvidia-smi";
  return d;
}

// ---- cores, names, paths ----------------------------------------------------------------------

int physical_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  std::set<std::pair<int, int>> cores;
  int cpus = 0;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    ++cpus;
    const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    std::ifstream core(base + "core_id"), pkg(base + "physical_package_id");
    int ci = -1, pi = -1;
    if (core >> ci && pkg >> pi)
      cores.insert({pi, ci});
    else
      cores.insert({-1, c});  // no topology: count the CPU itself
  }
  return std::max<int>(1, cores.empty() ? cpus : static_cast<int>(cores.size()));
}

std::string find_in_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::istringstream is(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(is, dir, ':')) {
    const std::string cand = (dir.empty() ? std::string(".") : dir) + "/" + name;
    struct stat st{};
    if (stat(cand.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(cand.c_str(), X_OK) == 0) return cand;
  }
  return "";
}

std::string self_exe_path() {
  const std::string exe = self_executable();
  return exe.empty() ? "edprun" : exe;
}

pid_t fork_exec(const std::vector<std::string>& argv, const char* who,
                const std::function<void()>& in_child) {
  EDP_CHECK(!argv.empty(), "fork_exec: empty command");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw Error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (in_child) in_child();
    execvp(args[0], args.data());
    std::fprintf(stderr, "%s: cannot run %s: %s\n", who, args[0], std::strerror(errno));
    _exit(127);
  }
  return pid;
}

RunResult run_capture(const std::vector<std::string>& argv,
                      const std::vector<std::pair<std::string, std::string>>& env, const std::string& in) {
  RunResult res;
  int pin[2], pout[2], perr[2];
  if (pipe2(pin, O_CLOEXEC) || pipe2(pout, O_CLOEXEC) || pipe2(perr, O_CLOEXEC))
    throw Error(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = fork_exec(argv, "edprun", [&] {
    dup2(pin[0], 0);
    dup2(pout[1], 1);
    dup2(perr[1], 2);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  });
  close(pin[0]);
  close(pout[1]);
  close(perr[1]);
  // Inputs are a few bytes ("quit\n"): one write fits the pipe buffer.
  if (!in.empty()) {
    const ssize_t w = write(pin[1], in.data(), in.size());
    (void)w;
  }
  close(pin[1]);
  pollfd fds[2] = {{pout[0], POLLIN, 0}, {perr[0], POLLIN, 0}};
  std::string* sinks[2] = {&res.out, &res.err};
  int open_fds = 2;
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  res.status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
  return res;
}

}  // namespace edp::launch
