// One job per checkpoint directory (CheckpointLock, edp/train/checkpoint.h).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>

#include "core/json_fields.h"
#include "edp/core/error.h"
#include "edp/core/files.h"
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

// The lock's record, or nullopt with `why` when the file does not hold one. Read as a record edp
// wrote itself: a regular file (a FIFO would block the job, /dev/zero would never end), not a
// symbolic link, at most files::kRecordLimit bytes.
std::optional<Holder> read_holder(const std::string& path, std::string& why, bool& missing) {
  missing = false;
  std::optional<std::string> text;
  try {
    text = files::read_file_if_exists(path, files::kRecordLimit, files::Links::Refuse);
  } catch (const DataError& e) {
    why = e.what();
    return std::nullopt;
  }
  if (!text) {
    missing = true;
    why = std::strerror(ENOENT);
    return std::nullopt;
  }
  try {
    const json_fields::Json j = json_fields::parse(*text, "the lock " + path);
    const json_fields::Fields f(j, "the lock " + path);
    Holder h;
    h.proc.pid = static_cast<long>(f.integer("pid", 0, int64_t{1} << 40));
    h.proc.start_time = static_cast<unsigned long long>(f.integer("start_time", 0, INT64_MAX));
    h.proc.host = f.text("host");
    h.proc.pid_ns = f.text("pid_ns");
    h.job = f.text("job");
    h.launch = f.text("launch", "");
    h.since = f.text("since", "?");
    return h;
  } catch (const DataError& e) {
    why = std::string("not a lock that edp wrote (") + e.what() + ")";
    return std::nullopt;
  }
}

// Whether some process holds the lock file's flock (CheckpointLock keeps one while it lives): seen
// across pid namespaces, so a job in another container of this host is alive as long as it holds it.
bool flock_held(const std::string& path) { return files::FileLock::held_elsewhere(path); }

}  // namespace

CheckpointLock::CheckpointLock(const std::string& dir, const std::string& job, const std::string& launch)
    : path_((fs::path(dir) / "lock").string()) {
  const ProcessId me = ProcessId::self();
  text_ = nlohmann::json{{"pid", me.pid},       {"start_time", me.start_time}, {"host", me.host},
                         {"pid_ns", me.pid_ns}, {"job", job},                  {"launch", launch},
                         {"since", now_text()}}
              .dump() +
          "\n";
  for (int attempt = 0;; ++attempt) {
    try {
      fd_ = files::create_exclusive(path_, text_);
    } catch (const Error& e) {
      throw Error("checkpoint directory " + dir + ": cannot create its lock: " + e.what());
    }
    if (fd_ >= 0) return;
    std::string why;
    bool missing = false;
    const std::optional<Holder> h = read_holder(path_, why, missing);
    if (!h) {
      if (missing && attempt < 3) continue;  // released meanwhile
      throw Error("checkpoint directory " + dir + ": its lock " + path_ + " cannot be read: " + why +
                  ". If no job uses this directory, remove the file and start again");
    }
    const bool same_launch = !launch.empty() && h->launch == launch;
    // On this host the holder's flock says whether it is alive, in any pid namespace; in this pid
    // namespace its pid says so too (a lock of an edp that held no flock).
    const bool here = h->proc.host == me.host;
    const bool alive = here ? flock_held(path_) || (h->proc.pid_ns == me.pid_ns && !h->proc.gone()) : true;
    if (alive && !same_launch) {
      throw Error("checkpoint directory " + dir + " is in use by " + describe(*h) +
                  ": two jobs writing one directory would mix their checkpoints. Give this job another checkpoint "
                  "directory, or wait until that job ends" +
                  (here ? std::string()
                        : " (if host " + h->proc.host + " is down and the job with it, remove " + path_ + ")"));
    }
    if (attempt >= 3) throw Error("checkpoint directory " + dir + ": could not take over its lock " + path_);
    // Stale (its process is gone) or left by an earlier start of this launch: take it over. The
    // rename is atomic, so of two jobs that both found it stale only one removes it.
    const std::string aside = path_ + ".stale." + std::to_string(me.pid);
    if (::rename(path_.c_str(), aside.c_str()) == 0) {
      ::unlink(aside.c_str());
      log::info("checkpoint directory ", dir, ": taking over the lock of ", describe(*h),
                same_launch && alive ? ", an earlier start of this launch"
                : h->proc.pid_ns != me.pid_ns ? ", which has ended (another pid namespace of this host; its lock "
                                                "is no longer held)"
                                              : ", which has ended");
    }
  }
}

CheckpointLock::~CheckpointLock() {
  // Remove it only if it is still ours (nobody took it over after a long freeze of this process):
  // the file at the path is the one this process created.
  struct stat mine {}, there {};
  if (fd_ >= 0 && ::fstat(fd_, &mine) == 0 && ::lstat(path_.c_str(), &there) == 0 && mine.st_dev == there.st_dev &&
      mine.st_ino == there.st_ino)
    ::unlink(path_.c_str());
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace edp::train
