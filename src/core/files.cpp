// Safe writes, reads and removals (edp/core/files.h).
#include "edp/core/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "edp/core/error.h"

namespace edp::files {
namespace {

std::string parent_dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string errno_text(int e) { return std::strerror(e); }

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

// 16 hex digits nobody can predict (getrandom; never a pid or a counter).
std::string random_suffix() {
  uint64_t r = 0;
  size_t got = 0;
  while (got < sizeof r) {
    const ssize_t n = ::getrandom(reinterpret_cast<char*>(&r) + got, sizeof r - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(r));
  return buf;
}

void sync_dir(const std::string& dir) {
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {  // best effort: some file systems refuse to sync a directory
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

// A new file beside `path` under an unpredictable name, created exclusively (a planted file or
// symbolic link at that name makes the attempt fail, and another name is tried). Returns the
// descriptor and sets `tmp`; on failure -1 with the message in `why`.
int create_temp(const std::string& path, std::string& tmp, std::string& why) {
  const std::string dir = parent_dir(path);
  for (int attempt = 0; attempt < 8; ++attempt) {
    tmp = (dir == "/" ? "" : dir) + "/." + base_name(path) + ".tmp-" + random_suffix();
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) return fd;
    if (errno == EEXIST) continue;  // astronomically unlikely unless planted: another name
    why = "cannot create " + tmp + ": " + errno_text(errno);
    return -1;
  }
  why = "cannot create a temporary file beside " + path + ": every name tried exists (files planted there?)";
  return -1;
}

// Writes `data` into a new temporary file beside `path` and flushes it; returns the descriptor
// (still open) or -1 with `why` (the temporary file removed).
int write_temp(const std::string& path, std::string_view data, Sync sync, std::string& tmp, std::string& why) {
  if (std::string p = dir_problem(parent_dir(path)); !p.empty()) {
    why = "refusing to write " + path + ": " + p;
    return -1;
  }
  const int fd = create_temp(path, tmp, why);
  if (fd < 0) return -1;
  auto fail = [&](const std::string& what) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    why = what + " " + tmp + ": " + errno_text(e);
    return -1;
  };
  if (!write_all(fd, data)) return fail("cannot write");
  if (sync == Sync::Durable && ::fsync(fd) != 0) return fail("cannot flush");
  return fd;
}

// One attempt; on failure returns the message (and has removed the temporary file).
std::string write_once(const std::string& path, std::string_view data, Sync sync) {
  std::string tmp, why;
  const int fd = write_temp(path, data, sync, tmp, why);
  if (fd < 0) return why;
  if (::close(fd) != 0) {  // NFS and full disks may report a failed write only here
    const int e = errno;
    ::unlink(tmp.c_str());
    return "cannot write " + tmp + ": " + errno_text(e);
  }
  // rename() replaces a symbolic link at `path` itself; it never writes through it.
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return "cannot rename " + tmp + " to " + path + ": " + errno_text(e);
  }
  if (sync == Sync::Durable) sync_dir(parent_dir(path));
  return "";
}

std::string kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISLNK(m)) return "a symbolic link";
  return "not a regular file";
}

bool trusted_owner(uid_t uid) { return uid == ::geteuid() || uid == 0; }

// Whether users other than this one may create, rename or remove entries of a directory with
// this status: writable by others, or by a group other than this process's, without the sticky bit.
bool others_may_write(const struct stat& st) {
  if (st.st_mode & S_ISVTX) return false;
  if (st.st_mode & S_IWOTH) return true;
  return (st.st_mode & S_IWGRP) && st.st_gid != ::getegid();
}

std::string absolute(const std::string& p) {
  if (!p.empty() && p[0] == '/') return p;
  char cwd[PATH_MAX];
  if (!::getcwd(cwd, sizeof cwd)) return p;
  return std::string(cwd) + "/" + p;
}

// The directory's resolved path, or "" with `why`.
std::string resolved(const std::string& dir, std::string* why) {
  char* r = ::realpath(dir.c_str(), nullptr);
  if (!r) {
    if (why) *why = "cannot resolve " + dir + ": " + errno_text(errno);
    return "";
  }
  std::string out(r);
  std::free(r);
  return out;
}

}  // namespace

// ---- directories -------------------------------------------------------------------------------

std::string dir_problem(const std::string& dir) {
  const std::string abs = absolute(dir.empty() ? "." : dir);
  // Symbolic links in the path as given: one that another user owns could be pointed elsewhere.
  std::string cur;
  size_t pos = 1;
  while (pos <= abs.size()) {
    size_t next = abs.find('/', pos);
    if (next == std::string::npos) next = abs.size();
    const std::string comp = abs.substr(pos, next - pos);
    pos = next + 1;
    if (comp.empty() || comp == ".") continue;
    cur += "/" + comp;
    struct stat ls {};
    if (::lstat(cur.c_str(), &ls) != 0) break;  // resolved below (".." and missing parts)
    if (S_ISLNK(ls.st_mode) && !trusted_owner(ls.st_uid))
      return cur + " is a symbolic link owned by another user (uid " + std::to_string(ls.st_uid) +
             "), who could point it elsewhere";
  }
  std::string why;
  const std::string real = resolved(abs, &why);
  if (real.empty()) return why;
  struct stat st {};
  if (::stat(real.c_str(), &st) != 0) return "cannot stat " + real + ": " + errno_text(errno);
  if (!S_ISDIR(st.st_mode)) return real + " is not a directory";
  const std::string shown = real == abs ? real : abs + " (" + real + ")";
  if (!trusted_owner(st.st_uid))
    return shown + " belongs to another user (uid " + std::to_string(st.st_uid) +
           "), who could replace what edp writes there; use a directory of your own";
  if (others_may_write(st)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return shown + " (mode " + mode + ") may be written by other users and has no sticky bit, so they could replace "
           "or redirect what edp writes there; use a directory of your own (chmod go-w, or chmod +t)";
  }
  // The directories above: one that everybody may write to without the sticky bit lets anybody
  // rename this one away and put another in its place.
  std::string up = real;
  while (up.size() > 1) {
    up = parent_dir(up);
    struct stat ps {};
    if (::stat(up.c_str(), &ps) != 0) break;
    if ((ps.st_mode & S_IWOTH) && !(ps.st_mode & S_ISVTX))
      return shown + " lies inside " + up + ", which every user may write to and which has no sticky bit, so "
             "anybody could replace it; use a directory of your own";
  }
  return "";
}

void check_dir(const std::string& dir, const std::string& purpose) {
  const std::string why = dir_problem(dir);
  if (!why.empty()) throw Error(purpose + " " + dir + ": refused: " + why);
}

void make_dir(const std::string& dir, const std::string& purpose, mode_t mode) {
  const std::string abs = absolute(dir);
  size_t pos = 1;
  while (pos <= abs.size()) {
    size_t next = abs.find('/', pos);
    if (next == std::string::npos) next = abs.size();
    const std::string prefix = abs.substr(0, next);
    pos = next + 1;
    if (prefix.empty() || prefix.back() == '/') continue;
    if (::mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST)
      throw Error(purpose + " " + dir + ": cannot create " + prefix + ": " + errno_text(errno));
  }
  check_dir(dir, purpose);
}

// ---- writing -----------------------------------------------------------------------------------

void write_atomic(const std::string& path, std::string_view data, Sync sync) {
  const std::string why = write_once(path, data, sync);
  if (!why.empty()) throw Error(why);
}

bool try_write_atomic(const std::string& path, std::string_view data, std::string* why, Sync sync) {
  std::string w;
  try {
    w = write_once(path, data, sync);
  } catch (const std::exception& e) {
    w = e.what();
  }
  if (why) *why = w;
  return w.empty();
}

int create_exclusive(const std::string& path, std::string_view data) {
  std::string tmp, why;
  const int fd = write_temp(path, data, Sync::Durable, tmp, why);
  if (fd < 0) throw Error(why);
  // Locked before it appears under `path`: nobody ever sees the new file unheld.
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error("cannot lock " + tmp + ": " + errno_text(e));
  }
  const int rc = ::link(tmp.c_str(), path.c_str());
  const int e = errno;
  ::unlink(tmp.c_str());
  if (rc == 0) {
    sync_dir(parent_dir(path));
    return fd;
  }
  ::close(fd);
  if (e == EEXIST) return -1;
  throw Error("cannot create " + path + ": " + errno_text(e));
}

int open_append(const std::string& path) {
  if (std::string p = dir_problem(parent_dir(path)); !p.empty()) throw Error("refusing to write " + path + ": " + p);
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd < 0) {
    if (errno == ELOOP) throw Error("refusing to write " + path + ": it is a symbolic link");
    throw Error("cannot open " + path + " for appending: " + errno_text(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !trusted_owner(st.st_uid)) {
    ::close(fd);
    throw Error("refusing to write " + path + ": " +
                (S_ISREG(st.st_mode) ? "it belongs to another user (uid " + std::to_string(st.st_uid) + ")"
                                     : "it is " + kind_of(st.st_mode)));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

void append(const std::string& path, std::string_view data) {
  const int fd = open_append(path);
  const bool ok = write_all(fd, data);
  const int e = errno;
  ::close(fd);
  if (!ok) throw Error("cannot append to " + path + ": " + errno_text(e));
}

// ---- reading -----------------------------------------------------------------------------------

namespace {
// -1 with errno = ENOENT when the file does not exist (callers decide); throws otherwise.
int open_checked(const std::string& path, const std::string& what, uint64_t* size, Links links, bool missing_ok) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | (links == Links::Refuse ? O_NOFOLLOW : 0));
  const std::string name = what.empty() ? path : what + " " + path;
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT && missing_ok) return -1;
    if (e == ELOOP && links == Links::Refuse)
      throw DataError(name + ": a symbolic link; edp writes this file itself, as a regular file: remove the link");
    throw DataError(name + ": cannot open: " + errno_text(e));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw DataError(name + ": cannot stat: " + errno_text(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw DataError(name + ": " + kind_of(st.st_mode) + ", not a regular file; edp reads only regular files " +
                    "(a FIFO or a device would block or never end)");
  }
  if (size) *size = static_cast<uint64_t>(st.st_size);
  return fd;
}
}  // namespace

int open_regular(const std::string& path, const std::string& what, uint64_t* size, Links links) {
  return open_checked(path, what, size, links, false);
}

std::optional<std::string> read_file_if_exists(const std::string& path, size_t limit, Links links) {
  uint64_t size = 0;
  const int fd = open_checked(path, "", &size, links, true);
  if (fd < 0) return std::nullopt;
  auto too_big = [&](uint64_t have) {
    ::close(fd);
    return DataError(path + ": " + std::to_string(have) + " bytes, more than the " + std::to_string(limit) +
                     " bytes edp reads from a file of this kind");
  };
  if (limit != kNoLimit && size > limit) throw too_big(size);
  std::string out;
  out.reserve(static_cast<size_t>(std::min<uint64_t>(size, limit == kNoLimit ? size : limit)));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      throw DataError(path + ": cannot read: " + errno_text(e));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (limit != kNoLimit && out.size() > limit) throw too_big(out.size());  // it grew while read
  }
  ::close(fd);
  return out;
}

std::string read_file(const std::string& path, size_t limit, Links links) {
  std::optional<std::string> s = read_file_if_exists(path, limit, links);
  if (!s) throw DataError(path + ": cannot open: " + errno_text(ENOENT));
  return *s;
}

// ---- removing ----------------------------------------------------------------------------------

namespace {
// Removes the entries of the open directory `fd` (closed here), recursing without following links.
bool remove_contents(int fd) {
  DIR* d = ::fdopendir(fd);
  if (!d) {
    ::close(fd);
    return false;
  }
  bool ok = true;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  const int dfd = ::dirfd(d);
  for (const std::string& n : names) {
    struct stat st {};
    if (::fstatat(dfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      ok = ok && errno == ENOENT;
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      const int sub = ::openat(dfd, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) {
        ok = false;
        continue;
      }
      ok = remove_contents(sub) && ok;
      ok = (::unlinkat(dfd, n.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT) && ok;
    } else {
      ok = (::unlinkat(dfd, n.c_str(), 0) == 0 || errno == ENOENT) && ok;
    }
  }
  ::closedir(d);
  return ok;
}
}  // namespace

bool remove_tree(const std::string& path, const std::string& parent, std::string* why) {
  auto refuse = [&](const std::string& w) {
    if (why) *why = "not removing " + path + ": " + w;
    return false;
  };
  const std::string name = base_name(path);
  if (name.empty() || name == "." || name == "..") return refuse("not an entry of a directory");
  std::string w;
  const std::string real_parent = resolved(parent, &w);
  if (real_parent.empty()) return refuse(w);
  const std::string real_dir = resolved(parent_dir(absolute(path)), &w);
  if (real_dir.empty()) {
    if (why) why->clear();
    return true;  // its directory is gone: so is it
  }
  if (real_dir != real_parent)
    return refuse("it is not in " + parent + " (its directory resolves to " + real_dir + ", not " + real_parent + ")");
  const int pfd = ::open(real_parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (pfd < 0) return refuse("cannot open " + real_parent + ": " + errno_text(errno));
  struct stat st {};
  if (::fstatat(pfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    const int e = errno;
    ::close(pfd);
    if (e == ENOENT) return true;
    return refuse(errno_text(e));
  }
  if (st.st_uid != ::geteuid()) {
    ::close(pfd);
    return refuse("it belongs to another user (uid " + std::to_string(st.st_uid) + ")");
  }
  bool ok = true;
  if (S_ISDIR(st.st_mode)) {
    const int fd = ::openat(pfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    ok = fd >= 0 && remove_contents(fd);
    ok = ::unlinkat(pfd, name.c_str(), AT_REMOVEDIR) == 0 && ok;
  } else {
    ok = ::unlinkat(pfd, name.c_str(), 0) == 0;
  }
  const int e = errno;
  ::close(pfd);
  if (!ok) return refuse(std::string("something in it stayed (") + errno_text(e) + ")");
  return true;
}

bool empty_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_uid != ::geteuid()) {
    ::close(fd);
    return false;
  }
  return remove_contents(fd);
}

// ---- locks -------------------------------------------------------------------------------------

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
  if (std::string p = dir_problem(parent_dir(path)); !p.empty()) throw Error("refusing the lock file " + path + ": " + p);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot open the lock file " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("the lock file " + path + " is " + kind_of(st.st_mode) + ", not a regular file: remove it");
  }
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
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0;
  ::close(fd);
  return held;
}

// ---- checksums ---------------------------------------------------------------------------------

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong c = crc;
  while (n > 0) {  // zlib takes uInt lengths
    const uInt chunk = static_cast<uInt>(std::min<size_t>(n, size_t{1} << 30));
    c = ::crc32(c, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(c);
}

uint64_t fnv1a64(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace edp::files
