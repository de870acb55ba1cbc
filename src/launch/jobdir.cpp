// Job directories, their owners, leftovers and the rescale record (jobdir.h).
#include "launch/jobdir.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/json_fields.h"
#include "edp/core/error.h"
#include "edp/core/files.h"
#include "launch/mps.h"
#include "launch/launch_plan.h"
#include "launch/system.h"

namespace edp::launch {

namespace {

// The text of a record in a job directory, or "" when it cannot be read (a process that is gone,
// another user's, not a regular file, larger than a record). A symbolic link is not followed:
// edprun and its ranks write these files themselves.
std::string slurp(const std::string& path) {
  try {
    return files::read_file_if_exists(path, files::kRecordLimit, files::Links::Refuse).value_or("");
  } catch (const Error&) {
    return "";
  }
}

// What Open MPI's shared-memory directory of a job may be: a directory edprun made with mkdtemp
// directly in /dev/shm ("/dev/shm/edprun.XXXXXX"). Anything else in an owner record is not removed.
bool plausible_shm_dir(const std::string& d) {
  const std::string prefix = "/dev/shm/edprun.";
  if (d.size() != prefix.size() + 6 || d.rfind(prefix, 0) != 0) return false;
  for (size_t i = prefix.size(); i < d.size(); ++i)
    if (!std::isalnum(static_cast<unsigned char>(d[i]))) return false;
  return true;
}

}  // namespace

JobOwner current_owner(const std::string& shm_dir) {
  JobOwner o;
  o.pid = getpid();
  o.start_time = process_start_time(o.pid);
  o.host = host_name();
  o.pid_ns = pid_namespace();
  o.shm_dir = shm_dir;
  return o;
}

void write_owner(const std::string& job_dir, const JobOwner& o) {
  const nlohmann::json j = {{"pid", o.pid},       {"start_time", o.start_time}, {"host", o.host},
                            {"pid_ns", o.pid_ns}, {"shm_dir", o.shm_dir}};
  files::write_atomic(job_dir + "/owner.json", j.dump() + "\n");
}

JobOwner parse_owner(const std::string& text, const std::string& where) {
  const json_fields::Json doc = json_fields::parse(text, where);
  const json_fields::Fields f(doc, where);
  JobOwner o;
  o.pid = static_cast<long>(f.integer("pid", 0, int64_t{1} << 40));
  o.start_time = static_cast<unsigned long long>(f.integer("start_time", 0, INT64_MAX));
  o.host = f.text("host");
  o.pid_ns = f.text("pid_ns");
  o.shm_dir = f.text("shm_dir");
  return o;
}

JobOwner read_owner(const std::string& job_dir) {
  const std::string path = job_dir + "/owner.json";
  // A record edprun wrote itself: a regular file (a FIFO would block every later edprun, a link to
  // /dev/zero would never end), not a link, at most a record's size.
  return parse_owner(files::read_file(path, files::kRecordLimit, files::Links::Refuse), path);
}

bool owner_is_dead(const JobOwner& o) {
  if (o.host != host_name() || o.pid_ns != pid_namespace() || o.pid <= 1) return false;
  return process_start_time(o.pid) != o.start_time;  // gone (0), or the pid now names another process
}

int kill_leftover_ranks(const std::string& job_dir) {
  int killed = 0;
  const std::string dir = job_dir + "/ranks";
  DIR* d = opendir(dir.c_str());
  if (!d) return 0;
  while (dirent* e = readdir(d)) {
    std::istringstream f(slurp(dir + "/" + e->d_name));
    long pid = 0;
    if (!(f >> pid) || pid <= 1) continue;
    const std::string env = slurp("/proc/" + std::to_string(pid) + "/environ");
    if (env.find("EDP_LAUNCH_JOB_DIR=" + job_dir + '\0') == std::string::npos) continue;
    if (process_start_time(pid) == 0) continue;  // already a zombie
    if (kill(static_cast<pid_t>(pid), SIGKILL) == 0) ++killed;
  }
  closedir(d);
  return killed;
}

void write_mpirun_record(const std::string& job_dir, long pid) {
  std::string why;
  if (!files::try_write_atomic(job_dir + "/mpirun.pid",
                               std::to_string(pid) + " " + std::to_string(process_start_time(pid)) + "\n", &why))
    std::fprintf(stderr, "edprun: warning: cannot record mpirun's pid: %s\n", why.c_str());
}

bool kill_recorded_mpirun(const std::string& job_dir) {
  std::istringstream f(slurp(job_dir + "/mpirun.pid"));
  long pid = 0;
  unsigned long long start = 0;
  if (!(f >> pid >> start) || pid <= 1 || start == 0 || process_start_time(pid) != start) return false;
  return kill(static_cast<pid_t>(pid), SIGKILL) == 0;
}

bool empty_dir(const std::string& dir) { return files::empty_dir(dir); }

std::vector<StaleJob> clean_stale_job_dirs(const std::string& parent, const std::string& mps_control) {
  std::vector<StaleJob> out;
  DIR* d = opendir(parent.c_str());
  if (!d) return out;
  std::vector<std::string> candidates;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.rfind("edprun.", 0) != 0) continue;
    const std::string dir = parent + "/" + n;
    struct stat st{};
    if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) continue;
    candidates.push_back(dir);
  }
  closedir(d);
  for (const auto& dir : candidates) {
    try {
      const JobOwner o = read_owner(dir);
      if (!owner_is_dead(o)) continue;
      StaleJob s;
      s.dir = dir;
      s.pid = o.pid;
      s.mpirun_killed = kill_recorded_mpirun(dir);
      s.ranks_killed = kill_leftover_ranks(dir);
      // Its MPS daemons (one per GPU directory), which `-d` detached from the dead edprun.
      MpsController mps(mps_control.empty() ? "nvidia-cuda-mps-control" : mps_control);
      if (DIR* m = opendir((dir + "/mps").c_str())) {
        while (dirent* e = readdir(m)) {
          const std::string g = e->d_name;
          if (g == "." || g == "..") continue;
          const int gpu = std::atoi(g.c_str());
          if (access((mps_pipe_dir(dir, gpu) + "/control").c_str(), F_OK) != 0) continue;
          mps.adopt({0, gpu, "", mps_pipe_dir(dir, gpu), mps_log_dir(dir, gpu)});
          ++s.daemons_stopped;
        }
        closedir(m);
      }
      mps.stop_all();
      // Only what that edprun made: its shared-memory directory if the record names one in the form
      // edprun makes (directly in /dev/shm; a record naming "/dev/shm/edprun.X/../.." or any
      // other place is ignored), checked again by resolved path and owner; then the job directory.
      if (plausible_shm_dir(o.shm_dir)) remove_tree(o.shm_dir, "/dev/shm");
      remove_tree(dir, parent);
      out.push_back(s);
    } catch (const std::exception&) {
      // No (whole) owner record: a directory being created right now, or not ours to judge.
    }
  }
  return out;
}

RescaleRecord read_rescale_record(const std::string& path) {
  std::optional<std::string> text;
  try {
    text = files::read_file_if_exists(path, files::kRecordLimit);
  } catch (const DataError& e) {
    throw Error("rescale file " + std::string(e.what()));
  }
  if (!text) throw Error("rescale file " + path + " is missing");
  nlohmann::json j;
  try {
    j = json_fields::parse(*text, "rescale file " + path);
  } catch (const DataError& e) {
    throw Error("rescale file " + path + ": malformed JSON: " + e.what());
  }
  if (!j.is_object())
    throw Error("rescale file " + path + ": expected a JSON object {\"workers\", \"global_batch\", \"step\", \"checkpoint\"}");
  auto integer = [&](const char* k, int64_t min) {
    if (!j.contains(k)) throw Error(std::string("rescale file ") + path + ": '" + k + "' is missing");
    if (!j[k].is_number_integer())
      throw Error(std::string("rescale file ") + path + ": '" + k + "' must be an integer, got " + j[k].dump());
    const int64_t v = j[k].get<int64_t>();
    if (v < min)
      throw Error(std::string("rescale file ") + path + ": '" + k + "' must be >= " + std::to_string(min) + ", got " +
                  std::to_string(v));
    return v;
  };
  RescaleRecord r;
  const int64_t w = integer("workers", 1);
  if (w > 1 << 20) throw Error("rescale file " + path + ": 'workers' " + std::to_string(w) + " is not a job size");
  r.workers = static_cast<int>(w);
  r.global_batch = integer("global_batch", 1);
  if (r.global_batch % r.workers != 0)
    throw Error("rescale file " + path + ": 'global_batch' " + std::to_string(r.global_batch) +
                " is not divisible by 'workers' " + std::to_string(r.workers));
  r.step = integer("step", 0);
  if (!j.contains("checkpoint") || !j["checkpoint"].is_string() || j["checkpoint"].get<std::string>().empty())
    throw Error("rescale file " + path + ": 'checkpoint' must be the path of the committed checkpoint (a non-empty string)");
  r.checkpoint = j["checkpoint"].get<std::string>();
  return r;
}

StallReport read_stall_records(const std::string& dir) {
  StallReport rep;
  DIR* d = opendir(dir.c_str());
  if (!d) return rep;
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.size() > 5 && n.compare(n.size() - 5, 5, ".json") == 0) names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    try {
      const nlohmann::json j = json_fields::parse(slurp(dir + "/" + n), dir + "/" + n);
      for (const auto& r : j.at("silent_ranks")) rep.silent_ranks.push_back(r.get<int>());
      for (const auto& h : j.at("silent_hosts")) {
        const std::string host = h.get<std::string>();
        if (std::find(rep.silent_hosts.begin(), rep.silent_hosts.end(), host) == rep.silent_hosts.end())
          rep.silent_hosts.push_back(host);
      }
      if (rep.collective.empty() && j.contains("collective")) rep.collective = j["collective"].get<std::string>();
      ++rep.records;
    } catch (const std::exception&) {
      // Half-written or foreign: the next poll reads it again.
    }
  }
  std::sort(rep.silent_ranks.begin(), rep.silent_ranks.end());
  rep.silent_ranks.erase(std::unique(rep.silent_ranks.begin(), rep.silent_ranks.end()), rep.silent_ranks.end());
  return rep;
}

}  // namespace edp::launch
