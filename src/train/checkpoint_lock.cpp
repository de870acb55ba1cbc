// One job per checkpoint directory (CheckpointLock, edp/train/checkpoint.h).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "edp/core/error.h"
#include "edp/core/log.h"
#include "edp/core/process.h"
#include "edp/train/checkpoint.h"

namespace edp::train {

namespace {

namespace fs = std::filesystem;

struct Holder {
  ProcessId proc;
  std::string job, launch, since;
};

std::string describe(const Holder& h) {
  return "job '" + h.job + "' (pid " + std::to_string(h.proc.pid) + " on host " + h.proc.host + ", since " + h.since +
         ")";
}

std::string now_text() {
  char buf[40];
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// The lock's record, or nullopt with `why` when the file does not hold one.
std::optional<Holder> read_holder(const std::string& path, std::string& why) {
  std::ifstream f(path);
  if (!f) {
    why = std::strerror(errno);
    return std::nullopt;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  const auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    why = "not a lock that edp wrote (not a JSON object)";
    return std::nullopt;
  }
  try {
    Holder h;
    h.proc.pid = j.at("pid").get<long>();
    h.proc.start_time = j.at("start_time").get<unsigned long long>();
    h.proc.host = j.at("host").get<std::string>();
    h.proc.pid_ns = j.at("pid_ns").get<std::string>();
    h.job = j.at("job").get<std::string>();
    h.launch = j.value("launch", "");
    h.since = j.value("since", "?");
    return h;
  } catch (const nlohmann::json::exception& e) {
    why = std::string("not a lock that edp wrote (") + e.what() + ")";
    return std::nullopt;
  }
}

}  // namespace

CheckpointLock::CheckpointLock(const std::string& dir, const std::string& job, const std::string& launch)
    : path_((fs::path(dir) / "lock").string()) {
  const ProcessId me = ProcessId::self();
  text_ = nlohmann::json{{"pid", me.pid},       {"start_time", me.start_time}, {"host", me.host},
                         {"pid_ns", me.pid_ns}, {"job", job},                  {"launch", launch},
                         {"since", now_text()}}
              .dump() +
          "\n";
  const std::string tmp = path_ + ".tmp." + std::to_string(me.pid) + "." + me.host;
  for (int attempt = 0;; ++attempt) {
    {
      std::ofstream f(tmp, std::ios::trunc);
      f << text_;
      f.flush();
      if (!f) throw Error("checkpoint directory " + dir + ": cannot write its lock " + tmp + ": " + std::strerror(errno));
    }
    const int rc = ::link(tmp.c_str(), path_.c_str());
    const int err = errno;
    ::unlink(tmp.c_str());
    if (rc == 0) return;
    if (err != EEXIST)
      throw Error("checkpoint directory " + dir + ": cannot create its lock " + path_ + ": " + std::strerror(err));
    std::string why;
    const std::optional<Holder> h = read_holder(path_, why);
    if (!h) {
      if (why == std::strerror(ENOENT) && attempt < 3) continue;  // released meanwhile
      throw Error("checkpoint directory " + dir + ": its lock " + path_ + " cannot be read: " + why +
                  ". If no job uses this directory, remove the file and start again");
    }
    const bool same_launch = !launch.empty() && h->launch == launch;
    if (!h->proc.gone() && !same_launch) {
      throw Error("checkpoint directory " + dir + " is in use by " + describe(*h) +
                  ": two jobs writing one directory would mix their checkpoints. Give this job another checkpoint "
                  "directory, or wait until that job ends" +
                  (h->proc.checkable() ? std::string()
                                       : " (if host " + h->proc.host + " is down and the job with it, remove " + path_ +
                                             ")"));
    }
    if (attempt >= 3) throw Error("checkpoint directory " + dir + ": could not take over its lock " + path_);
    // Stale (its process is gone) or left by an earlier start of this launch: take it over. The
    // rename is atomic, so of two jobs that both found it stale only one removes it.
    const std::string aside = path_ + ".stale." + std::to_string(me.pid);
    if (::rename(path_.c_str(), aside.c_str()) == 0) {
      ::unlink(aside.c_str());
      log::info("checkpoint directory ", dir, ": taking over the lock of ", describe(*h),
                same_launch && !h->proc.gone() ? ", an earlier start of this launch" : ", which has ended");
    }
  }
}

CheckpointLock::~CheckpointLock() {
  // Remove it only if it is still ours (nobody took it over after a long freeze of this process).
  std::ifstream f(path_);
  std::stringstream ss;
  ss << f.rdbuf();
  if (f && ss.str() == text_) ::unlink(path_.c_str());
}

}  // namespace edp::train
