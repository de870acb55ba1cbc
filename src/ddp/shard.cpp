// The sharded optimizer state's layout and reshard() (see edp/ddp/shard.h).
#include "edp/ddp/shard.h"

#include <algorithm>
#include <csignal>
#include <cstring>

#include "edp/comm/stall.h"
#include "edp/core/knobs.h"
#include "edp/core/log.h"
#include "edp/core/timeline.h"
#include "edp/nn/module.h"

namespace edp::ddp {

std::vector<std::vector<size_t>> bucket_groups(const std::vector<nn::Parameter*>& params, int64_t first_bucket_bytes,
                                               int64_t bucket_cap_bytes) {
  std::vector<std::vector<size_t>> groups(1);
  if (params.empty()) return groups;
  const int64_t esize = static_cast<int64_t>(dtype_size(params[0]->value.dtype()));
  int64_t cap = first_bucket_bytes, used = 0;
  for (size_t k = params.size(); k-- > 0;) {
    const int64_t bytes = params[k]->value.numel() * esize;
    if (!groups.back().empty() && used + bytes > cap) {
      groups.emplace_back();
      used = 0;
      cap = bucket_cap_bytes;
    }
    groups.back().push_back(k);
    used += bytes;
  }
  return groups;
}

ShardLayout::ShardLayout(std::vector<int64_t> numel, std::vector<std::vector<size_t>> buckets)
    : numel_(std::move(numel)), buckets_(std::move(buckets)), start_(numel_.size(), -1) {
  for (const auto& b : buckets_)
    for (size_t k : b) {
      EDP_CHECK(k < numel_.size() && start_[k] < 0, "ShardLayout: parameter #", k,
                k < numel_.size() ? " is in two buckets" : " does not exist");
      start_[k] = total_;
      total_ += numel_[k];
    }
  for (size_t k = 0; k < start_.size(); ++k) EDP_CHECK(start_[k] >= 0, "ShardLayout: parameter #", k, " is in no bucket");
}

std::vector<ShardRun> ShardLayout::runs(int world, int rank) const {
  EDP_CHECK(world >= 1 && rank >= 0 && rank < world, "ShardLayout::runs: rank ", rank, " of ", world);
  std::vector<ShardRun> out;
  for (const auto& b : buckets_) {
    int64_t n = 0;
    for (size_t k : b) n += numel_[k];
    const int64_t p = part(n, world), lo = std::min(n, rank * p), hi = std::min(n, (rank + 1) * p);
    int64_t off = 0;
    for (size_t k : b) {
      const int64_t from = std::max(lo, off), to = std::min(hi, off + numel_[k]);
      if (from < to) out.push_back({k, from - off, to - from});
      off += numel_[k];
    }
  }
  return out;
}

int64_t StateShard::bytes() const {
  int64_t b = 0;
  for (const Tensor& t : data) b += static_cast<int64_t>(t.nbytes());
  return b;
}

namespace {

// A piece both sides of a pair agree on: `length` elements at offset `a` of run `ia` of the
// sender's runs and offset `b` of run `ib` of the receiver's.
struct Piece {
  size_t ia;
  int64_t a;
  size_t ib;
  int64_t b;
  int64_t length;
};

// The overlaps of two rank's runs (each sorted by position, disjoint), in position order.
std::vector<Piece> overlaps(const ShardLayout& L, const std::vector<ShardRun>& x, const std::vector<ShardRun>& y) {
  std::vector<Piece> out;
  size_t i = 0, j = 0;
  while (i < x.size() && j < y.size()) {
    const int64_t x0 = L.position(x[i].param, x[i].offset), x1 = x0 + x[i].length;
    const int64_t y0 = L.position(y[j].param, y[j].offset), y1 = y0 + y[j].length;
    const int64_t lo = std::max(x0, y0), hi = std::min(x1, y1);
    if (lo < hi) out.push_back({i, lo - x0, j, lo - y0, hi - lo});
    if (x1 <= y1) ++i;
    if (y1 <= x1) ++j;
  }
  return out;
}

}  // namespace

StateShard reshard(comm::Communicator& comm, const ShardLayout& layout, StateShard mine, int from, int to) {
  TimelineScope scope("reshard optimizer state", "comm");
  comm::StallLabel label("ddp: the sharded optimizer state to the new world");
  const int n = comm.size(), me = comm.rank();
  EDP_CHECK(from >= 1 && to >= 1 && from <= n && to <= n, "ddp::reshard: from ", from, " to ", to,
            " ranks over a communicator of ", n);
  // What rank 0 (an old owner) holds says what the state is.
  int64_t head[4] = {mine.fresh ? 1 : 0, mine.per_run, static_cast<int64_t>(mine.dtype), mine.steps};
  comm.broadcast(head, 4, DType::I64, 0);
  const bool fresh = head[0] != 0;
  const int per_run = static_cast<int>(head[1]);
  const DType dt = static_cast<DType>(head[2]);
  const size_t es = dtype_size(dt);
  StateShard out;
  out.world = to;
  out.rank = me;
  out.fresh = fresh;
  out.per_run = per_run;
  out.dtype = dt;
  out.steps = head[3];
  if (me < to) out.runs = layout.runs(to, me);
  const std::vector<ShardRun> old_runs = me < from ? layout.runs(from, me) : std::vector<ShardRun>{};
  if (me < from && !fresh) {
    EDP_CHECK(mine.world == from && mine.rank == me && mine.runs == old_runs && !mine.fresh && mine.per_run == per_run &&
                  mine.dtype == dt && mine.data.size() == old_runs.size() * static_cast<size_t>(per_run),
              "ddp::reshard: rank ", me, "'s state is not its part of ", from, " (world ", mine.world, ", rank ",
              mine.rank, ", ", mine.runs.size(), " run(s), ", mine.per_run, " tensor(s) per run, ",
              mine.fresh ? "fresh" : "stepped", ") while rank 0's is ", fresh ? "fresh" : "stepped");
  }
  if (fresh) return me < to ? out : StateShard{to, me, true, per_run, dt, out.steps, {}, {}};

  // Pack: for each new owner, the pieces of this rank's old runs it gets, piece-major.
  std::vector<int64_t> send_counts(static_cast<size_t>(n), 0), recv_counts(static_cast<size_t>(n), 0);
  std::vector<std::vector<Piece>> send_pieces(static_cast<size_t>(n)), recv_pieces(static_cast<size_t>(n));
  int64_t send_total = 0, recv_total = 0;
  for (int d = 0; d < to && me < from; ++d) {
    send_pieces[static_cast<size_t>(d)] = overlaps(layout, old_runs, layout.runs(to, d));
    for (const Piece& p : send_pieces[static_cast<size_t>(d)]) send_counts[static_cast<size_t>(d)] += p.length * per_run;
    send_total += send_counts[static_cast<size_t>(d)];
  }
  for (int s = 0; s < from && me < to; ++s) {
    recv_pieces[static_cast<size_t>(s)] = overlaps(layout, layout.runs(from, s), out.runs);
    for (const Piece& p : recv_pieces[static_cast<size_t>(s)]) recv_counts[static_cast<size_t>(s)] += p.length * per_run;
    recv_total += recv_counts[static_cast<size_t>(s)];
  }
  std::vector<char> send(static_cast<size_t>(send_total) * es);
  {
    char* at = send.data();
    for (int d = 0; d < n; ++d)
      for (const Piece& p : send_pieces[static_cast<size_t>(d)])
        for (int q = 0; q < per_run; ++q) {
          const Tensor& t = mine.data[p.ia * static_cast<size_t>(per_run) + static_cast<size_t>(q)];
          std::memcpy(at, static_cast<const char*>(t.raw()) + static_cast<size_t>(p.a) * es,
                      static_cast<size_t>(p.length) * es);
          at += static_cast<size_t>(p.length) * es;
        }
  }
  mine.data.clear();  // packed: the old part is no longer needed
  if (me < from && knobs::get_string("EDP_FAULT") == "reshard:" + std::to_string(me)) {
    log::warn("EDP_FAULT: rank ", me, " kills itself in the reshard, its part packed and not sent");
    std::raise(SIGKILL);
  }
  std::vector<char> recv(static_cast<size_t>(recv_total) * es);
  comm.alltoallv(send.data(), send_counts, recv.data(), recv_counts, dt);
  send = std::vector<char>();
  if (me >= to) return StateShard{to, me, false, per_run, dt, out.steps, {}, {}};
  out.data.reserve(out.runs.size() * static_cast<size_t>(per_run));
  for (const ShardRun& r : out.runs)
    for (int q = 0; q < per_run; ++q) out.data.emplace_back(Shape{r.length}, dt, Device::cpu());
  const char* at = recv.data();
  for (int s = 0; s < from; ++s)
    for (const Piece& p : recv_pieces[static_cast<size_t>(s)])
      for (int q = 0; q < per_run; ++q) {
        Tensor& t = out.data[p.ib * static_cast<size_t>(per_run) + static_cast<size_t>(q)];
        std::memcpy(static_cast<char*>(t.raw()) + static_cast<size_t>(p.b) * es, at, static_cast<size_t>(p.length) * es);
        at += static_cast<size_t>(p.length) * es;
      }
  return out;
}

}  // namespace edp::ddp
