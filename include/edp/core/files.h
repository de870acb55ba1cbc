// Small files that several processes share: written whole or not at all, read whole, locked.
//
// Every file edp rewrites while others may read it (checkpoints, status and control files, the
// autoscaler's job table, launcher records) goes through write_atomic: a temporary file beside the
// target (`<path>.tmp.<pid>.<n>`, so that two writers never share one), then rename() over the
// target, so a reader sees the old or the new whole file. With Sync::Durable the data and the
// directory entry are flushed to the disk first (checkpoints: the previous one may be removed
// after this returns).
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace edp::files {

enum class Sync { None, Durable };

// Throws edp::Error naming the file and the system's reason (e.g. "No space left on device");
// the temporary file is removed on failure and the target is left as it was.
void write_atomic(const std::string& path, std::string_view data, Sync sync = Sync::None);

// The same, for writers that must not stop on a failure (a status report): false and the reason.
bool try_write_atomic(const std::string& path, std::string_view data, std::string* why = nullptr);

// The whole file. read_file throws edp::Error naming the file when it cannot be opened or read;
// read_file_if_exists returns nullopt for a file that does not exist (and throws otherwise).
std::string read_file(const std::string& path);
std::optional<std::string> read_file_if_exists(const std::string& path);

// An exclusive flock() on a file (created if missing), held while the object lives. The
// descriptor is close-on-exec, so a child process never inherits the lock.
class FileLock {
 public:
  // Waits for the lock. Throws edp::Error when the file cannot be opened.
  static FileLock acquire(const std::string& path);
  // nullopt when another process holds it.
  static std::optional<FileLock> try_acquire(const std::string& path);
  // Whether some process holds the lock now (the file missing: no).
  static bool held_elsewhere(const std::string& path);

  FileLock(FileLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  FileLock& operator=(FileLock&& o) noexcept;
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  ~FileLock();

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace edp::files
