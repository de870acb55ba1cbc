// Sharded checkpoints (edp/train/shards.h).
#include "edp/train/shards.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>

#include "edp/core/error.h"
#include "edp/core/files.h"
#include "core/text.h"
#include "edp/nn/module.h"

namespace edp::train {

bool is_sharded(const Checkpoint& c) {
  const auto it = c.meta.find("optim.state");
  return it != c.meta.end() && it->second == "sharded";
}

namespace {

std::string format_runs(const std::vector<ddp::ShardRun>& runs) {
  std::string s;
  for (const ddp::ShardRun& r : runs) {
    if (!s.empty()) s += ',';
    s += std::to_string(r.param) + ':' + std::to_string(r.offset) + ':' + std::to_string(r.length);
  }
  return s;
}

std::vector<ddp::ShardRun> parse_runs(const std::string& text, const std::string& where) {
  std::vector<ddp::ShardRun> runs;
  if (text.empty()) return runs;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    const size_t a = item.find(':'), b = item.find(':', a == std::string::npos ? a : a + 1);
    int64_t v[3];
    if (a == std::string::npos || b == std::string::npos ||
        !text::parse_digits(item.substr(0, a), v[0]) || !text::parse_digits(item.substr(a + 1, b - a - 1), v[1]) ||
        !text::parse_digits(item.substr(b + 1), v[2]))
      throw DataError(where + ": a run '" + item + "' is not param:offset:length");
    runs.push_back({static_cast<size_t>(v[0]), v[1], v[2]});
    at = end + 1;
  }
  return runs;
}

// "optim.<q>.<name>@<offset>"
std::string tensor_name(int q, const std::string& param, int64_t offset) {
  return "optim." + std::to_string(q) + "." + param + "@" + std::to_string(offset);
}

}  // namespace

std::map<std::string, std::string> write_shard(comm::Communicator& comm, const std::string& checkpoint,
                                               const ddp::StateShard& part, const std::vector<nn::Parameter*>& params,
                                               const ddp::ShardLayout& layout) {
  const int w = comm.size(), me = comm.rank();
  EDP_CHECK(part.world == w && part.rank == me, "train::write_shard: part ", part.rank, " of ", part.world,
            " written by rank ", me, " of ", w);
  Checkpoint s;
  s.meta["shard.rank"] = std::to_string(me);
  s.meta["shard.world"] = std::to_string(w);
  s.meta["shard.steps"] = std::to_string(part.steps);
  if (!part.fresh) {
    EDP_CHECK(part.data.size() == part.runs.size() * static_cast<size_t>(part.per_run),
              "train::write_shard: ", part.data.size(), " tensors for ", part.runs.size(), " runs");
    for (size_t i = 0; i < part.runs.size(); ++i) {
      const ddp::ShardRun& r = part.runs[i];
      EDP_CHECK(r.param < params.size(), "train::write_shard: parameter #", r.param, " of ", params.size());
      for (int q = 0; q < part.per_run; ++q)
        s.tensors.emplace_back(tensor_name(q, params[r.param]->name, r.offset),
                               part.data[i * static_cast<size_t>(part.per_run) + static_cast<size_t>(q)]);
    }
  }
  // A rank that cannot write its part (a full disk) says so to all: every rank fails alike.
  std::vector<char> bytes;
  std::string why;
  try {
    bytes = encode_checkpoint(s);
    files::write_atomic(shard_path(checkpoint, me, w), std::string_view(bytes.data(), bytes.size()));
  } catch (const std::exception& e) {
    why = e.what();
  }
  // Every part's size and checksum, for the manifest (and the parts are all written once this returns).
  const int64_t mine[3] = {static_cast<int64_t>(bytes.size()), static_cast<int64_t>(files::crc32(bytes.data(), bytes.size())),
                           why.empty() ? 1 : 0};
  std::vector<int64_t> all(3 * static_cast<size_t>(w));
  comm.allgather(mine, all.data(), 3, DType::I64);
  std::string failed;
  for (int r = 0; r < w; ++r)
    if (all[3 * static_cast<size_t>(r) + 2] == 0) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  if (!failed.empty())
    throw Error(checkpoint + ": rank(s) " + failed + " could not write their part of the optimizer state" +
                (why.empty() ? "" : " (this rank: " + why + ")") + "; the checkpoints before it are kept");
  // Rank 0, which writes the checkpoint and reads the directory on resume, must see every part: a
  // directory that is not shared (node-local disks behind one path) would lose them.
  int64_t unseen = -1;
  if (me == 0)
    for (int r = 0; r < w && unseen < 0; ++r) {
      std::error_code ec;
      const auto size = std::filesystem::file_size(shard_path(checkpoint, r, w), ec);
      if (ec || static_cast<int64_t>(size) != all[3 * static_cast<size_t>(r)]) unseen = r;
    }
  comm.broadcast(&unseen, 1, DType::I64, 0);
  if (unseen >= 0)
    throw Error(checkpoint + ": rank 0 does not see the part rank " + std::to_string(unseen) + " wrote (" +
                shard_path(checkpoint, static_cast<int>(unseen), w) +
                "): a sharded checkpoint needs a checkpoint directory every rank shares (the same file system)");
  std::map<std::string, std::string> m;
  m["optim.state"] = "sharded";
  m["optim.shards"] = std::to_string(w);
  m["optim.fresh"] = part.fresh ? "1" : "0";
  m["optim.per_run"] = std::to_string(part.per_run);
  m["optim.dtype"] = dtype_name(part.dtype);
  for (int r = 0; r < w; ++r) {
    const std::string k = "optim.shard." + std::to_string(r);
    m[k + ".bytes"] = std::to_string(all[3 * static_cast<size_t>(r)]);
    m[k + ".crc"] = std::to_string(all[3 * static_cast<size_t>(r) + 1]);
    m[k + ".runs"] = format_runs(layout.runs(w, r));
  }
  return m;
}

ddp::StateShard read_shards(const Checkpoint& c, const std::string& path, const std::vector<ddp::ShardRun>& want,
                            int world, int rank, const std::vector<nn::Parameter*>& params) {
  EDP_CHECK(is_sharded(c), "train::read_shards: ", path, " is not a sharded checkpoint");
  ddp::StateShard out;
  out.world = world;
  out.rank = rank;
  out.steps = c.int_at("optim.steps");
  out.runs = want;
  out.fresh = c.at("optim.fresh") == "1";
  if (out.fresh) return out;
  out.per_run = static_cast<int>(c.int_at("optim.per_run"));
  out.dtype = params.empty() ? DType::F32 : params[0]->value.dtype();
  if (c.at("optim.dtype") != dtype_name(out.dtype))
    throw DataError(path + ": its optimizer state is " + c.at("optim.dtype") + ", the model's parameters " +
                    dtype_name(out.dtype));
  const size_t nq = static_cast<size_t>(out.per_run);
  const size_t es = dtype_size(out.dtype);
  // Where each wanted run lies, by parameter.
  std::vector<std::vector<size_t>> by_param(params.size());
  int64_t need = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    EDP_CHECK(want[i].param < params.size(), "train::read_shards: parameter #", want[i].param, " of ", params.size());
    by_param[want[i].param].push_back(i);
    need += want[i].length;
    for (size_t q = 0; q < nq; ++q) out.data.emplace_back(Shape{want[i].length}, out.dtype, Device::cpu());
  }
  std::map<std::string, size_t> index;
  for (size_t k = 0; k < params.size(); ++k) index[params[k]->name] = k;
  auto overlap = [&](const ddp::ShardRun& r, auto&& fn) {
    if (r.param >= by_param.size()) return;
    for (size_t i : by_param[r.param]) {
      const int64_t lo = std::max(r.offset, want[i].offset), hi = std::min(r.offset + r.length, want[i].offset + want[i].length);
      if (lo < hi) fn(i, lo, hi);
    }
  };
  int64_t found = 0;
  const int64_t parts = c.int_at("optim.shards");
  for (int64_t p = 0; p < parts; ++p) {
    const std::string key = "optim.shard." + std::to_string(p);
    const std::string file = shard_path(path, static_cast<int>(p), static_cast<int>(parts));
    bool useful = false;
    for (const ddp::ShardRun& r : parse_runs(c.at(key + ".runs"), path))
      overlap(r, [&](size_t, int64_t, int64_t) { useful = true; });
    if (!useful) continue;  // none of what this rank wants
    const std::string bytes = files::read_file(file, std::numeric_limits<size_t>::max(), files::Links::Refuse);
    if (static_cast<int64_t>(bytes.size()) != c.int_at(key + ".bytes") ||
        static_cast<int64_t>(files::crc32(bytes.data(), bytes.size())) != c.int_at(key + ".crc"))
      throw DataError(file + ": not the part " + path + " was written with (its size or checksum differs)");
    const Checkpoint s = decode_checkpoint(std::vector<char>(bytes.begin(), bytes.end()), file);
    for (const auto& entry : s.tensors) {
      const std::string& name = entry.first;
      const Tensor& t = entry.second;  // not a structured binding: the lambda below captures it
      // optim.<q>.<parameter>@<offset>
      const size_t dot = name.find('.', 6), at = name.rfind('@');
      int64_t q = 0, off = 0;
      if (name.rfind("optim.", 0) != 0 || dot == std::string::npos || at == std::string::npos || at < dot ||
          !text::parse_digits(name.substr(6, dot - 6), q) || !text::parse_digits(name.substr(at + 1), off) ||
          q >= static_cast<int64_t>(nq))
        throw DataError(file + ": an entry '" + name + "' is not optim.<state>.<parameter>@<offset>");
      const auto it = index.find(name.substr(dot + 1, at - dot - 1));
      if (it == index.end())
        throw DataError(file + ": '" + name + "' is of a parameter this model does not have: another model");
      if (t.dtype() != out.dtype || t.shape().ndim() != 1 || off + t.numel() > params[it->second]->value.numel())
        throw DataError(file + ": '" + name + "' is " + t.str() + ", which does not fit parameter '" +
                        params[it->second]->name + "' " + params[it->second]->value.str());
      overlap({it->second, off, t.numel()}, [&](size_t i, int64_t lo, int64_t hi) {
        std::memcpy(static_cast<char*>(out.data[i * nq + static_cast<size_t>(q)].raw()) +
                        static_cast<size_t>(lo - want[i].offset) * es,
                    static_cast<const char*>(t.raw()) + static_cast<size_t>(lo - off) * es,
                    static_cast<size_t>(hi - lo) * es);
        found += hi - lo;
      });
    }
  }
  if (found != need * static_cast<int64_t>(nq))
    throw DataError(path + ": its parts hold " + std::to_string(found) + " of the " + std::to_string(need * static_cast<int64_t>(nq)) +
                    " optimizer state elements this rank needs: parts of another model or layout");
  return out;
}

}  // namespace edp::train
