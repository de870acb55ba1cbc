// Atomic writes, whole reads and locks (edp/core/files.h).
#include "edp/core/files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "edp/core/error.h"

namespace edp::files {
namespace {

std::string parent_dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Writes all of `data` to fd, retrying on EINTR; false with errno set on failure.
bool write_all(int fd, std::string_view data) {
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

// One attempt; on failure returns the message (and has removed the temporary file).
std::string write_once(const std::string& path, std::string_view data, Sync sync) {
  static std::atomic<unsigned> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot create " + tmp + ": " + std::strerror(errno);
  auto fail = [&](const std::string& what) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return what + " " + tmp + ": " + std::strerror(e);
  };
  if (!write_all(fd, data)) return fail("cannot write");
  if (sync == Sync::Durable && ::fsync(fd) != 0) return fail("cannot flush");
  if (::close(fd) != 0) {  // NFS and full disks may report a failed write only here
    const int e = errno;
    ::unlink(tmp.c_str());
    return "cannot write " + tmp + ": " + std::strerror(e);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return "cannot rename " + tmp + " to " + path + ": " + std::strerror(e);
  }
  if (sync == Sync::Durable) {
    const int dfd = ::open(parent_dir(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {  // best effort: some file systems refuse to sync a directory
      (void)::fsync(dfd);
      ::close(dfd);
    }
  }
  return "";
}

}  // namespace

void write_atomic(const std::string& path, std::string_view data, Sync sync) {
  const std::string why = write_once(path, data, sync);
  if (!why.empty()) throw Error(why);
}

bool try_write_atomic(const std::string& path, std::string_view data, std::string* why) {
  const std::string w = write_once(path, data, Sync::None);
  if (why) *why = w;
  return w.empty();
}

std::optional<std::string> read_file_if_exists(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    if (errno == ENOENT) return std::nullopt;
    throw Error("cannot open " + path + ": " + std::strerror(errno));
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw Error("cannot read " + path + ": " + std::strerror(errno));
  return ss.str();
}

std::string read_file(const std::string& path) {
  std::optional<std::string> s = read_file_if_exists(path);
  if (!s) throw Error("cannot open " + path + ": " + std::strerror(ENOENT));
  return *s;
}

FileLock& FileLock::operator=(FileLock&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {
int open_lock_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot open the lock file " + path + ": " + std::strerror(errno));
  return fd;
}
}  // namespace

FileLock FileLock::acquire(const std::string& path) {
  const int fd = open_lock_file(path);
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int e = errno;
    ::close(fd);
    throw Error("cannot lock " + path + ": " + std::strerror(e));
  }
  return FileLock(fd);
}

std::optional<FileLock> FileLock::try_acquire(const std::string& path) {
  const int fd = open_lock_file(path);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return std::nullopt;
  }
  return FileLock(fd);
}

bool FileLock::held_elsewhere(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0;
  ::close(fd);
  return held;
}

}  // namespace edp::files
