// Checkpoint files (checkpoint.h): a small binary format with a CRC-32 trailer (files::crc32), written
// atomically (temporary file, fsync, rename, directory fsync), and capture/restore of a job's
// state.
#include "edp/train/checkpoint.h"

#include "edp/config.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <set>
#include <string>

#include "edp/core/error.h"
#include "edp/core/files.h"
#include "edp/core/log.h"
#include "edp/data/distributed_sampler.h"
#include "edp/nn/module.h"
#include "edp/optim/optimizer.h"

namespace edp::train {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'E', 'D', 'P', 'C', 'K', 'P', 'T', '1'};
constexpr char kEndMagic[8] = {'E', 'D', 'P', 'C', 'K', 'E', 'N', 'D'};
constexpr uint32_t kVersion = 1;
constexpr uint8_t kUndefined = 0xFF;  // dtype byte of an undefined tensor (an unused state slot)

class Writer {
 public:
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const char*>(p);
    buf_.insert(buf_.end(), b, b + n);
  }
  template <typename T>
  void pod(T v) {
    bytes(&v, sizeof v);
  }
  void str(const std::string& s) {
    EDP_CHECK(s.size() <= std::numeric_limits<uint32_t>::max(), "checkpoint: string too long");
    pod(static_cast<uint32_t>(s.size()));
    bytes(s.data(), s.size());
  }
  std::vector<char>& buf() { return buf_; }
  void reserve(size_t n) { buf_.reserve(n); }

 private:
  std::vector<char> buf_;
};

class Reader {
 public:
  Reader(const std::string& path, const std::vector<char>& b, size_t end) : path_(path), b_(b), end_(end) {}
  [[noreturn]] void fail(const std::string& what) const {
    throw DataError("checkpoint " + path_ + ": at byte " + std::to_string(pos_) + ": " + what);
  }
  void need(size_t n, const char* what) const {
    if (n > end_ - pos_)
      fail(std::string("truncated: ") + what + " needs " + std::to_string(n) + " bytes, " +
           std::to_string(end_ - pos_) + " left");
  }
  void bytes(void* out, size_t n, const char* what) {
    need(n, what);
    std::memcpy(out, b_.data() + pos_, n);
    pos_ += n;
  }
  template <typename T>
  T pod(const char* what) {
    T v;
    bytes(&v, sizeof v, what);
    return v;
  }
  std::string str(const char* what) {
    const uint32_t n = pod<uint32_t>(what);
    need(n, what);
    std::string s(b_.data() + pos_, n);
    pos_ += n;
    return s;
  }
  size_t pos() const { return pos_; }

 private:
  const std::string& path_;
  const std::vector<char>& b_;
  size_t end_;
  size_t pos_ = 0;
};

uint32_t crc(const char* p, size_t n) { return files::crc32(p, n); }

std::string describe(const Tensor& t) {
  return t.defined() ? std::string(dtype_name(t.dtype())) + " " + t.shape().str() : std::string("undefined");
}

}  // namespace

const Tensor* Checkpoint::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

const std::string& Checkpoint::at(const std::string& key) const {
  auto it = meta.find(key);
  if (it == meta.end()) throw DataError("checkpoint: no metadata entry '" + key + "'");
  return it->second;
}

int64_t Checkpoint::int_at(const std::string& key) const {
  const std::string& v = at(key);
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0)
    throw DataError("checkpoint: metadata '" + key + "' = '" + v + "' is not an integer");
  return x;
}

std::vector<char> encode_checkpoint(const Checkpoint& c) {
  Writer w;
  // One allocation of the final size: a growing buffer would hold up to twice the state, once
  // more while it moves.
  size_t need = 64;
  for (const auto& [k, v] : c.meta) need += 8 + k.size() + v.size();
  for (const auto& [name, t] : c.tensors) need += 32 + name.size() + (t.defined() ? 8 * t.ndim() + t.nbytes() : 0);
  w.reserve(need);
  w.bytes(kMagic, sizeof kMagic);
  w.pod(kVersion);
  w.pod(uint32_t{0});
  w.pod(static_cast<uint32_t>(c.meta.size()));
  for (const auto& [k, v] : c.meta) {
    w.str(k);
    w.str(v);
  }
  w.pod(static_cast<uint32_t>(c.tensors.size()));
  for (const auto& [name, t0] : c.tensors) {
    w.str(name);
    if (!t0.defined()) {
      w.pod(kUndefined);
      continue;
    }
    const Tensor t = t0.device().is_cpu() ? t0 : t0.to(Device::cpu());
    w.pod(static_cast<uint8_t>(t.dtype()));
    EDP_CHECK(t.ndim() < 255, "checkpoint: tensor ", name, " has too many dimensions");
    w.pod(static_cast<uint8_t>(t.ndim()));
    for (int64_t d : t.shape().dims()) w.pod(d);
    w.pod(static_cast<uint64_t>(t.nbytes()));
    w.bytes(t.raw(), t.nbytes());
  }
  const uint32_t sum = crc(w.buf().data(), w.buf().size());
  w.pod(sum);
  w.bytes(kEndMagic, sizeof kEndMagic);
  return std::move(w.buf());
}

void write_checkpoint(const std::string& path, const Checkpoint& c) {
  const std::vector<char> buf = encode_checkpoint(c);
  try {
    files::write_atomic(path, std::string_view(buf.data(), buf.size()), files::Sync::Durable);
  } catch (const Error& e) {
    throw Error(std::string("checkpoint: ") + e.what());
  }
}

Checkpoint read_checkpoint(const std::string& path) {
  // A regular file only, read to its size (a FIFO or a device planted in the directory would
  // block the job or never end).
  uint64_t size = 0;
  int fd = -1;
  try {
    fd = files::open_regular(path, "", &size);
  } catch (const DataError& e) {
    throw DataError(std::string("checkpoint ") + e.what());
  }
  std::vector<char> b(static_cast<size_t>(size));
  size_t got = 0;
  while (got < b.size()) {
    const ssize_t n = ::read(fd, b.data() + got, b.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  const int e = errno;
  ::close(fd);
  if (got != b.size())
    throw DataError("checkpoint " + path + ": read " + std::to_string(got) + " of its " + std::to_string(size) +
                    " bytes" + (got < b.size() && e ? std::string(": ") + std::strerror(e) : std::string(" (did it change while read?)")));
  return decode_checkpoint(b, path);
}

Checkpoint decode_checkpoint(const std::vector<char>& b, const std::string& path) {
  const size_t trailer = sizeof(uint32_t) + sizeof kEndMagic;
  if (b.size() < sizeof kMagic || std::memcmp(b.data(), kMagic, sizeof kMagic) != 0)
    throw DataError("checkpoint " + path + ": not an edp checkpoint (the file does not start with \"EDPCKPT1\")");
  if (b.size() < sizeof kMagic + 12 + trailer ||
      std::memcmp(b.data() + b.size() - sizeof kEndMagic, kEndMagic, sizeof kEndMagic) != 0)
    throw DataError("checkpoint " + path + ": truncated (" + std::to_string(b.size()) +
                    " bytes, no end marker): the write did not finish");
  const size_t body = b.size() - trailer;
  uint32_t stored;
  std::memcpy(&stored, b.data() + body, sizeof stored);
  const uint32_t actual = crc(b.data(), body);
  if (stored != actual) {
    char msg[128];
    std::snprintf(msg, sizeof msg, "checksum mismatch (stored %08x, computed %08x over %zu bytes): the file is damaged",
                  stored, actual, body);
    throw DataError("checkpoint " + path + ": " + msg);
  }
  Reader r(path, b, body);
  char magic[8];
  r.bytes(magic, sizeof magic, "magic");
  const uint32_t version = r.pod<uint32_t>("version");
  if (version != kVersion)
    r.fail("format version " + std::to_string(version) + ", this edp reads version " + std::to_string(kVersion));
  (void)r.pod<uint32_t>("flags");
  Checkpoint c;
  const uint32_t n_meta = r.pod<uint32_t>("metadata count");
  for (uint32_t i = 0; i < n_meta; ++i) {
    std::string k = r.str("metadata key");
    c.meta[k] = r.str("metadata value");
  }
  const uint32_t n_t = r.pod<uint32_t>("tensor count");
  for (uint32_t i = 0; i < n_t; ++i) {
    std::string name = r.str("tensor name");
    const uint8_t dt = r.pod<uint8_t>("dtype");
    if (dt == kUndefined) {
      c.tensors.emplace_back(std::move(name), Tensor());
      continue;
    }
    if (dt > static_cast<uint8_t>(DType::BF16)) r.fail("tensor '" + name + "': unknown dtype code " + std::to_string(dt));
    const uint8_t nd = r.pod<uint8_t>("ndim");
    std::vector<int64_t> dims(nd);
    int64_t numel = 1;
    for (auto& d : dims) {
      d = r.pod<int64_t>("dimension");
      if (d < 0 || (d > 0 && numel > std::numeric_limits<int64_t>::max() / d))
        r.fail("tensor '" + name + "': bad dimension " + std::to_string(d));
      numel *= d;
    }
    const uint64_t nbytes = r.pod<uint64_t>("byte count");
    const DType dtype = static_cast<DType>(dt);
    if (static_cast<uint64_t>(numel) > std::numeric_limits<uint64_t>::max() / dtype_size(dtype) ||
        nbytes != static_cast<uint64_t>(numel) * dtype_size(dtype))
      r.fail("tensor '" + name + "': " + std::to_string(nbytes) + " bytes for " + std::to_string(numel) + " " +
             dtype_name(dtype) + " elements");
    r.need(nbytes, "tensor data");  // before the allocation: a shape the file cannot hold is not allocated
    Tensor t(Shape(dims), dtype);
    r.bytes(t.raw(), nbytes, "tensor data");
    c.tensors.emplace_back(std::move(name), std::move(t));
  }
  if (r.pos() != body) r.fail(std::to_string(body - r.pos()) + " unexpected bytes before the checksum");
  return c;
}

Checkpoint capture(nn::Module& model, optim::Optimizer* opt, const data::DistributedSampler* sampler,
                   bool optimizer_tensors) {
  Checkpoint c;
  // The build that wrote it: bitwise continuation needs the same ISA level, FP flags and compiler.
  c.meta["build.version"] = EDP_VERSION;
  c.meta["build.cpu_arch"] = EDP_CPU_ARCH;
  c.meta["build.cpu_flags"] = EDP_CPU_FLAGS;
  c.meta["build.compiler"] = EDP_COMPILER;
  for (nn::Parameter* p : model.parameters()) c.tensors.emplace_back("model." + p->name, p->value.to(Device::cpu()).clone());
  for (nn::Buffer* b : model.buffers()) c.tensors.emplace_back("buffer." + b->name, b->value.to(Device::cpu()).clone());
  for (const auto& [name, ctr] : model.counters()) c.meta["counter." + name] = std::to_string(*ctr);
  if (opt && !optimizer_tensors) {
    c.meta["optim.steps"] = std::to_string(opt->steps());
    c.meta["optim.state"] = "elsewhere";
  } else if (opt && !opt->has_state()) {  // before its first step: nothing to copy, and nothing made
    c.meta["optim.steps"] = std::to_string(opt->steps());
    c.meta["optim.state"] = "fresh";
    c.meta["optim.state_tensors"] = std::to_string(opt->state_tensors());
  } else if (opt) {
    const std::vector<Tensor*> st = opt->state();
    for (size_t i = 0; i < st.size(); ++i)
      c.tensors.emplace_back("optim." + std::to_string(i),
                             st[i]->defined() ? st[i]->to(Device::cpu()).clone() : Tensor());
    c.meta["optim.steps"] = std::to_string(opt->steps());
    c.meta["optim.state_tensors"] = std::to_string(st.size());
  }
  if (sampler) {
    const data::SamplerState s = sampler->state();
    c.meta["sampler.epoch"] = std::to_string(s.epoch);
    c.meta["sampler.position"] = std::to_string(s.position);
    c.meta["sampler.dataset_size"] = std::to_string(s.dataset_size);
    c.meta["sampler.seed"] = std::to_string(s.seed);
  }
  return c;
}

std::string build_difference(const Checkpoint& c) {
  std::string diff;
  auto cmp = [&](const char* key, const char* here) {
    auto it = c.meta.find(key);
    if (it == c.meta.end() || it->second == here) return;
    diff += std::string(diff.empty() ? "" : "; ") + key + " '" + it->second + "' here '" + here + "'";
  };
  cmp("build.cpu_arch", EDP_CPU_ARCH);
  cmp("build.cpu_flags", EDP_CPU_FLAGS);
  cmp("build.compiler", EDP_COMPILER);
  return diff;
}

void restore(const Checkpoint& c, nn::Module& model, optim::Optimizer* opt, data::DistributedSampler* sampler) {
  const auto state = c.meta.find("optim.state");
  const bool elsewhere = state != c.meta.end() && state->second == "elsewhere";  // its step count only
  const bool fresh = state != c.meta.end() && state->second == "fresh";          // no state yet: zeros
  if (opt && state != c.meta.end() && !elsewhere && !fresh)
    throw DataError("this checkpoint keeps its optimizer state in parts beside it (optim.state '" + state->second +
                    "', edp/train/shards.h): resume it with elastic::Job, or read the parts with train::read_shards");
  // Check everything first, so that a mismatch leaves the live state untouched.
  struct Target {
    Tensor* dst;
    const Tensor* src;
  };
  std::vector<Target> plan;
  auto match = [&](const std::string& name, Tensor& live) {
    const Tensor* t = c.find(name);
    if (!t) throw DataError("checkpoint has no '" + name + "' (live: " + describe(live) + "): it was saved from another model");
    if (t->defined() != live.defined() ||
        (t->defined() && (t->dtype() != live.dtype() || !(t->shape() == live.shape()))))
      throw DataError("checkpoint entry '" + name + "' is " + describe(*t) + " but the live one is " + describe(live) +
                      ": it was saved from another model or optimizer");
    plan.push_back(Target{&live, t});
  };
  for (nn::Parameter* p : model.parameters()) match("model." + p->name, p->value);
  for (nn::Buffer* b : model.buffers()) match("buffer." + b->name, b->value);
  std::vector<std::pair<uint64_t*, uint64_t>> counters;
  for (const auto& [name, ctr] : model.counters())
    counters.emplace_back(ctr, static_cast<uint64_t>(c.int_at("counter." + name)));
  int64_t steps = 0;
  if (opt && fresh && c.int_at("optim.state_tensors") != static_cast<int64_t>(opt->state_tensors())) {
    throw DataError("checkpoint's optimizer keeps " + c.at("optim.state_tensors") +
                    " state tensors, the live optimizer " + std::to_string(opt->state_tensors()) +
                    ": another optimizer type or parameter list");
  }
  if (opt && (elsewhere || fresh)) {
    steps = c.int_at("optim.steps");
  } else if (opt) {
    const std::vector<Tensor*> st = opt->state();
    const int64_t saved = c.int_at("optim.state_tensors");
    if (saved != static_cast<int64_t>(st.size()))
      throw DataError("checkpoint holds " + std::to_string(saved) + " optimizer state tensors, the live optimizer has " +
                      std::to_string(st.size()) + ": another optimizer type or parameter list");
    for (size_t i = 0; i < st.size(); ++i) match("optim." + std::to_string(i), *st[i]);
    steps = c.int_at("optim.steps");
  }
  data::SamplerState ss;
  if (sampler) {
    ss.epoch = c.int_at("sampler.epoch");
    ss.position = c.int_at("sampler.position");
    ss.dataset_size = c.int_at("sampler.dataset_size");
    ss.seed = static_cast<uint64_t>(std::stoull(c.at("sampler.seed")));
  }
  for (const Target& t : plan)
    if (t.src->defined()) t.dst->copy_from(*t.src);
  for (auto& [ctr, v] : counters) *ctr = v;
  if (opt && fresh) opt->release_state();  // as the saved one: made (zeros) at its first step
  if (opt) opt->set_steps(steps);
  if (sampler) sampler->load_state(ss);
}

CheckpointDir::CheckpointDir(std::string dir, int keep) : dir_(std::move(dir)), keep_(keep) {
  EDP_CHECK(keep_ >= 1, "CheckpointDir: keep must be >= 1, got ", keep_);
  // Created if missing, and refused when another user could replace the checkpoints in it.
  files::make_dir(dir_, "checkpoint directory");
}

std::vector<std::string> CheckpointDir::list() const {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    // ckpt-<digits>.edp exactly (temporary files end in .tmp.<pid>, set-aside ones in .<suffix>).
    if (const int64_t step = step_of(e.path().string()); step >= 0) found.emplace_back(step, e.path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::string shard_path(const std::string& checkpoint, int rank, int world) {
  return checkpoint + ".shard-" + std::to_string(rank) + "-of-" + std::to_string(world);
}

namespace {
// The checkpoint a part belongs to ("" when `path` is not a part's name).
std::string part_owner(const std::string& path) {
  const size_t at = path.rfind(".shard-");
  if (at == std::string::npos) return "";
  const std::string tail = path.substr(at + 7);  // <rank>-of-<world>
  const size_t of = tail.find("-of-");
  if (of == std::string::npos || of == 0 || of + 4 >= tail.size() ||
      tail.find_first_not_of("0123456789") != of || tail.find_first_not_of("0123456789", of + 4) != std::string::npos)
    return "";
  return CheckpointDir::step_of(path.substr(0, at)) >= 0 ? path.substr(0, at) : "";
}
}  // namespace

std::string CheckpointDir::path_of(int64_t step) const {
  char name[40];
  std::snprintf(name, sizeof name, "ckpt-%012lld.edp", static_cast<long long>(step));
  return (fs::path(dir_) / name).string();
}

std::string CheckpointDir::commit(int64_t step, const Checkpoint& c) {
  EDP_CHECK(step >= 0, "CheckpointDir::commit: negative step ", step);
  const std::string path = path_of(step);
  write_checkpoint(path, c);
  const std::vector<std::string> all = list();  // newest first
  bool held_kept = false;                       // the newest one at or before hold_ is kept
  std::set<std::string> kept;
  for (size_t i = 0; i < all.size(); ++i) {
    const bool held = hold_ >= 0 && !held_kept && step_of(all[i]) <= hold_;
    held_kept = held_kept || held;
    if (i < static_cast<size_t>(keep_) || held) {
      kept.insert(all[i]);
      continue;
    }
    std::error_code ec;
    fs::remove(all[i], ec);
  }
  // Parts of removed checkpoints, and parts no checkpoint was written for (a job that stopped
  // between its parts and its checkpoint); the parts of a newer commit under way are not there yet
  // (commits are collective, one at a time).
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string owner = part_owner(e.path().string());
    if (!owner.empty() && !kept.count(owner)) fs::remove(e.path(), ec);
  }
  return path;
}

int64_t CheckpointDir::step_of(const std::string& path) {
  const std::string n = fs::path(path).filename().string();
  if (n.size() < 10 || n.rfind("ckpt-", 0) != 0 || n.substr(n.size() - 4) != ".edp") return -1;
  const std::string digits = n.substr(5, n.size() - 9);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::strtoll(digits.c_str(), nullptr, 10);
}

std::vector<std::string> CheckpointDir::set_aside_after(int64_t step, const std::string& suffix) {
  std::vector<std::string> moved;
  for (const std::string& p : list()) {
    if (step_of(p) <= step) continue;
    const std::string to = p + "." + suffix;
    if (std::rename(p.c_str(), to.c_str()) != 0)
      throw Error("checkpoint: cannot rename " + p + " to " + to + ": " + std::strerror(errno));
    moved.push_back(to);
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_, ec))
      if (part_owner(e.path().string()) == p) {
        const std::string part = e.path().string(), part_to = part + "." + suffix;
        if (std::rename(part.c_str(), part_to.c_str()) != 0)
          throw Error("checkpoint: cannot rename " + part + " to " + part_to + ": " + std::strerror(errno));
        moved.push_back(part_to);
      }
  }
  return moved;
}

std::optional<Checkpoint> CheckpointDir::latest(std::string* path) const {
  for (const std::string& p : list()) {
    try {
      Checkpoint c = read_checkpoint(p);
      if (c.meta.count("optim.shards")) {  // its parts are all there, of the sizes written
        const int64_t w = c.int_at("optim.shards");
        for (int64_t r = 0; r < w; ++r) {
          const std::string part = shard_path(p, static_cast<int>(r), static_cast<int>(w));
          std::error_code ec;
          const auto size = fs::file_size(part, ec);
          if (ec || !fs::is_regular_file(fs::symlink_status(part)))
            throw DataError(p + ": its part " + part + " is missing (" + (ec ? ec.message() : "not a regular file") + ")");
          const int64_t want = c.int_at("optim.shard." + std::to_string(r) + ".bytes");
          if (static_cast<int64_t>(size) != want)
            throw DataError(p + ": its part " + part + " has " + std::to_string(size) + " bytes, " +
                            std::to_string(want) + " were written");
        }
      }
      if (path) *path = p;
      return c;
    } catch (const DataError& e) {
      log::warn("skipping damaged checkpoint: ", e.what());
    }
  }
  if (const size_t n = list().size(); n > 0)
    log::warn("none of the ", n, " checkpoint(s) in ", dir_,
              " reads back whole (each is named above): the job starts from step 0");
  return std::nullopt;
}

}  // namespace edp::train
