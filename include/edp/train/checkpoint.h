// Checkpoints: the state of a training job in one file, written so that nothing is lost.
//
// A Checkpoint is a list of named host tensors plus string metadata. capture() collects a
// job's state into one — the model's parameters and buffers (BatchNorm statistics), its
// counters (Dropout's call counter), the optimizer's state tensors and step count, and the
// sampler's position — and restore() puts it back, onto whatever devices the model now lives
// on. With the same world size, N steps after restore() give bitwise the parameters of N steps
// after the commit (tested); the sampler position does not depend on the world size, so a job
// may also resume at another size (DistributedSampler re-shards the rest of the epoch).
//
// File format, version 1 (little-endian):
//   "EDPCKPT1"  u32 version  u32 flags(0)
//   u32 n_meta   { u32 len, key bytes, u32 len, value bytes } * n_meta
//   u32 n_tensor { u32 len, name bytes, u8 dtype, u8 ndim, i64 dims[ndim], u64 nbytes, data } * n_tensor
//   u32 crc32 (zlib) of every byte before it   "EDPCKEND"
// A reader checks the magic, the version, every length against the bytes left, and the
// checksum; damage raises edp::DataError naming the file, the byte offset and what was found.
//
// write_checkpoint() is atomic (files::write_atomic): it writes a new file under an
// unpredictable name beside `path` (never through a planted symbolic link), flushes it to disk
// (fsync), renames it over `path` and syncs the directory, so `path` is always either the old or
// the new whole file. read_checkpoint() reads regular files only (edp/core/files.h). The
// checkpoint directory is created if missing and refused when another user could write into it
// (files::check_dir). CheckpointDir keeps the newest `keep` files of a job (ckpt-<step>.edp) and removes older
// ones only after the new one is whole; latest() returns the newest readable one, skipping
// damaged files with a message on stderr.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "edp/core/tensor.h"

namespace edp::nn {
class Module;
}
namespace edp::optim {
class Optimizer;
}
namespace edp::data {
class DistributedSampler;
}

namespace edp::train {

struct Checkpoint {
  std::vector<std::pair<std::string, Tensor>> tensors;  // host tensors, in order
  std::map<std::string, std::string> meta;              // e.g. "step", "epoch", "world_size"

  const Tensor* find(const std::string& name) const;
  // The value of a metadata key; DataError naming the key when it is missing.
  const std::string& at(const std::string& key) const;
  int64_t int_at(const std::string& key) const;
};

void write_checkpoint(const std::string& path, const Checkpoint& c);
Checkpoint read_checkpoint(const std::string& path);
// The same format in memory (an elastic job sends its state to new ranks this way); `name` is
// what decode errors call the bytes.
std::vector<char> encode_checkpoint(const Checkpoint& c);
Checkpoint decode_checkpoint(const std::vector<char>& bytes, const std::string& name);

// Collects the job's state (see the file comment). Any of opt / sampler may be null. Tensors are
// named "model.<parameter>", "buffer.<buffer>", "optim.<i>"; counters, the optimizer's step
// count and the sampler state go to meta ("counter.<name>", "optim.steps", "sampler.*"), and
// the build that wrote it to "build.*" (version, cpu_arch, cpu_flags, compiler).
// optimizer_tensors false: the optimizer's step count only, its state marked as kept elsewhere
// (meta "optim.state" = "elsewhere": sharded over the ranks, moved by ddp::reshard); restore()
// then sets the step count and leaves the optimizer's state as it is. An optimizer that has no
// state yet (before its first step; Optimizer::has_state) is captured as "optim.state" = "fresh":
// no tensors, none made for the capture; restore() then drops the live optimizer's state too
// (made as zeros at its next step), so that a fresh start sends rank 0's parameters alone.
Checkpoint capture(nn::Module& model, optim::Optimizer* opt, const data::DistributedSampler* sampler,
                   bool optimizer_tensors = true);
// How the build that wrote `c` differs from this one ("" when it is the same or unrecorded):
// ISA level, FP flags or compiler. A different build restores correctly, but the continuation
// is then not bitwise the uninterrupted run (Eigen's kernels differ per ISA); callers say so.
std::string build_difference(const Checkpoint& c);
// Puts the state back. Throws DataError naming the first entry that is missing or whose shape or
// dtype differs from the live model's (a checkpoint of another model), before changing anything.
void restore(const Checkpoint& c, nn::Module& model, optim::Optimizer* opt, data::DistributedSampler* sampler);

// The file of rank `rank`'s part of a sharded checkpoint (edp/train/shards.h):
// <checkpoint>.shard-<rank>-of-<world>.
std::string shard_path(const std::string& checkpoint, int rank, int world);

class CheckpointDir {
 public:
  explicit CheckpointDir(std::string dir, int keep = 2);
  const std::string& dir() const { return dir_; }
  // The path commit(step, ...) writes.
  std::string path_of(int64_t step) const;
  // Writes ckpt-<step>.edp atomically, then removes all but the newest `keep` checkpoints (and
  // never the one that hold() protects), with their parts (edp/train/shards.h), and parts left
  // by no kept checkpoint. Returns the path written.
  std::string commit(int64_t step, const Checkpoint& c);
  // The newest checkpoint that reads back whole (nullopt when there is none); damaged or
  // half-written ones, and sharded ones with a part missing or of another size, are skipped with a line on stderr naming the file and the reason, and when
  // none reads back whole a warning says that the job starts over.
  std::optional<Checkpoint> latest(std::string* path = nullptr) const;
  // Checkpoint files present, newest first (by step).
  std::vector<std::string> list() const;
  // While set (>= 0), the newest checkpoint at or before `step` is kept whatever `keep` says (a
  // known-good state while the newer ones are in doubt); -1 releases it.
  void hold(int64_t step) { hold_ = step; }
  // Renames the checkpoints after `step` to <name>.<suffix> (their parts to <part>.<suffix>),
  // which latest() and list() no longer see (nothing is deleted); returns the new paths.
  std::vector<std::string> set_aside_after(int64_t step, const std::string& suffix);
  // The step of a checkpoint file name (ckpt-<step>.edp), -1 if it is not one.
  static int64_t step_of(const std::string& path);

 private:
  std::string dir_;
  int keep_;
  int64_t hold_ = -1;
};

// One job per checkpoint directory. Two jobs writing one directory mix their checkpoints: the
// second resumes from the first one's state and reports its results as its own. The job that
// writes checkpoints (rank 0) holds DIR/lock while it runs: a small JSON record of the process
// (pid, start time, host, pid namespace), the job's name and its launch (edprun's job directory,
// the same across the restarts of one edprun). The file is made whole under a temporary name,
// flock()ed and linked into place (files::create_exclusive), so it appears atomically, never
// half-written, and held: the holder keeps the flock while it lives. A lock that is not a regular
// file, a symbolic link or larger than a record is refused with a message naming it.
//   - a lock of this host that no process holds (its flock is free) and whose process is gone
//     (in this pid namespace: the pid free or reused; in another one, a container of this host:
//     the free flock alone says so) is stale and taken over with a message: a SIGKILLed job
//     leaves one;
//   - a lock of the same launch is taken over: a restart by edprun after a crash;
//   - otherwise the directory is in use: edp::Error naming the holder and what to do.
// The destructor removes the lock if it is still this process's.
class CheckpointLock {
 public:
  CheckpointLock(const std::string& dir, const std::string& job, const std::string& launch);
  ~CheckpointLock();
  CheckpointLock(const CheckpointLock&) = delete;
  CheckpointLock& operator=(const CheckpointLock&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_, text_;
  int fd_ = -1;  // the lock file, flock()ed while this object lives
};

}  // namespace edp::train
