// Process identity (edp/core/process.h).
#include "edp/core/process.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "edp/core/knobs.h"

namespace edp {

uint64_t host_key() {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const char c : host_name() + '\n' + boot) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

std::string host_name() {
  if (std::string h = knobs::get_string("EDP_HOSTNAME"); !h.empty()) return h;
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

unsigned long long process_start_time(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string stat = ss.str();
  // "pid (comm) state ppid ...": comm may hold spaces and ')', so count fields after the last ')'.
  const size_t rp = stat.rfind(')');
  if (rp == std::string::npos) return 0;
  std::istringstream is(stat.substr(rp + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)  // field 3 (state) .. field 22 (starttime)
    if (!(is >> field)) return 0;
  if (stat.substr(rp + 2, 1) == "Z") return 0;  // a zombie has finished; only its parent's wait is missing
  return std::strtoull(field.c_str(), nullptr, 10);
}

std::string pid_namespace() {
  char buf[128] = {0};
  const ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

std::string self_executable() {
  char buf[PATH_MAX] = {0};
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

ProcessId ProcessId::self() {
  ProcessId p;
  p.pid = static_cast<long>(getpid());
  p.start_time = process_start_time(p.pid);
  p.host = host_name();
  p.pid_ns = pid_namespace();
  return p;
}

bool ProcessId::checkable() const { return host == host_name() && pid_ns == pid_namespace() && pid > 1; }

bool ProcessId::gone() const { return checkable() && process_start_time(pid) != start_time; }

}  // namespace edp
