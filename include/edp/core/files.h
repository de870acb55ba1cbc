// Files edp writes, reads and removes: the one place where edp touches the file system for its
// own records and for data it did not write itself.
//
// Writing. Every file edp writes (checkpoints, the checkpoint lock, decoded-data caches, events,
// status and control files, the autoscaler's tables, launcher records) is made whole under a new,
// unpredictable name in the target's directory (`.<name>.tmp-<16 random hex digits>`, created with
// O_CREAT|O_EXCL|O_NOFOLLOW: a planted symbolic link or file at that name is never written
// through), flushed with fsync, then renamed over the target (a reader sees the old or the new
// whole file) and the directory is flushed. Before any write the directory is checked
// (check_dir): one that another user owns, or that others may write to without the sticky bit,
// is refused with the reason, because whoever can write there can replace what edp writes.
//
// Reading. A file edp did not just write (a lock, an owner record, a job spec, a control file, a
// data set) is opened non-blocking and read only when fstat() says it is a regular file: a FIFO
// or a device would block or never end. Each kind of file has a size limit; a larger file is an
// error naming the file, its size and the limit.
//
// Removing. remove_tree() removes only an entry of a given parent directory, compared by resolved
// path (never by a string prefix), owned by this process's user, and never follows a symbolic
// link inside it.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace edp::files {

enum class Sync { None, Durable };

// Size limits of what edp reads, per kind of file.
constexpr size_t kRecordLimit = size_t{1} << 20;      // a record edp or a controller writes: lock, owner.json,
                                                      // control, rescale and status files, job specs
constexpr size_t kTableLimit = size_t{64} << 20;      // files that grow with a job or a cluster: events,
                                                      // the autoscaler's job table, hostfiles
constexpr size_t kRequestLimit = size_t{256} << 20;   // a plan request (a cluster's every job)
constexpr size_t kNoLimit = ~size_t{0};               // the file's own size (checkpoints, data)

// Whether a symbolic link at the path itself is followed. Records that edp writes into its own
// directories (the checkpoint lock, owner.json) are refused when they are links: edp never makes one.
enum class Links { Follow, Refuse };

// Throws edp::Error naming the file and the system's reason (e.g. "No space left on device"), or
// the directory and why it is refused (check_dir); the temporary file is removed on failure and
// the target is left as it was. Sync::Durable (the default) flushes the data and the directory
// entry to the disk before returning: the previous file may then be removed; Sync::None is for
// records rewritten every second (status files), where a crash may lose the last one.
void write_atomic(const std::string& path, std::string_view data, Sync sync = Sync::Durable);

// The same, for writers that must not stop on a failure (a status report): false and the reason.
bool try_write_atomic(const std::string& path, std::string_view data, std::string* why = nullptr,
                      Sync sync = Sync::None);

// Makes `data` appear at `path` whole and only if nothing is there yet (a lock): written under a
// temporary name as write_atomic does, then link()ed into place. Returns an open, close-on-exec
// descriptor of the new file with an exclusive flock() on it (held until it is closed, so that
// another process, in any pid namespace of this host, sees the holder alive), or -1 when `path`
// already exists. Throws edp::Error on any other failure.
int create_exclusive(const std::string& path, std::string_view data);

// Appends `data` with one write(2) (O_APPEND: a reader never sees half of it) to `path`, created
// if missing; a symbolic link there, a file that is not regular or one of another user is refused.
// Throws edp::Error.
void append(const std::string& path, std::string_view data);
// The same file opened for appending (a log a child process writes to); the caller closes it.
int open_append(const std::string& path);

// Throws edp::Error naming `dir` (what it is for: `purpose`, e.g. "checkpoint directory") and the
// reason when another user could replace or redirect what edp writes there: `dir` is owned by
// another user than this process's (root excepted), or group or others may write to it without
// the sticky bit, or a directory above it is writable by everyone without the sticky bit, or a
// component of the path is a symbolic link owned by another user. A missing `dir` is an error.
void check_dir(const std::string& dir, const std::string& purpose);
// The reason check_dir() would give ("" when none).
std::string dir_problem(const std::string& dir);
// Creates `dir` and its missing parents (new ones with `mode`, less the umask), then check_dir().
void make_dir(const std::string& dir, const std::string& purpose, mode_t mode = 0755);

// The whole file, read as the file comment says. read_file throws edp::DataError naming the file
// when it cannot be opened or read, is not a regular file, or holds more than `limit` bytes;
// read_file_if_exists returns nullopt for a file that does not exist (and throws otherwise).
std::string read_file(const std::string& path, size_t limit = kTableLimit, Links links = Links::Follow);
std::optional<std::string> read_file_if_exists(const std::string& path, size_t limit = kTableLimit,
                                               Links links = Links::Follow);
// Opens `path` for reading the same way (non-blocking, regular files only) and returns the
// descriptor (close-on-exec; the caller closes it) and, in *size, the file's size. `what` names
// the file in errors ("checkpoint", "token file"); edp::DataError as read_file.
int open_regular(const std::string& path, const std::string& what, uint64_t* size = nullptr,
                 Links links = Links::Follow);

// Removes `path` and, for a directory, everything in it, without following any symbolic link —
// only when `path`, resolved, is an entry of `parent`, resolved, and belongs to this process's
// user. false (with the reason in *why) when it refuses or something stayed; a missing `path` is
// true. Never throws.
bool remove_tree(const std::string& path, const std::string& parent, std::string* why = nullptr);
// Removes everything inside the directory `dir` (kept itself), which must be this user's and not
// a symbolic link; nothing below it is followed. false when something stayed. Never throws.
bool empty_dir(const std::string& dir);

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

// The CRC-32 (zlib's) of `n` bytes, continuing from `crc` (0 to start): the checksum of edp's
// checkpoints and decoded-data caches.
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);
// The 64-bit FNV-1a hash of `n` bytes, continuing from `h` (fnv1a64(nullptr, 0) to start): a
// content key that, unlike a CRC, is not linear in the data (the decoded-data cache's names).
uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 1469598103934665603ull);

}  // namespace edp::files
