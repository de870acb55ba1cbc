// DistributedDataParallel's sharded optimizer state (ZeRO stage 1, ddp.h): each rank updates the
// runs of the parameters it owns with its part of the state, then the parameters are allgathered;
// the state is gathered, scattered and handed over for checkpoints and reshards.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/common.h"
#include "ddp/bucket.h"
#include "edp/backend/ops.h"
#include "edp/comm/stall.h"
#include "edp/core/timeline.h"
#include "edp/ddp/ddp.h"
#include "edp/optim/optimizer.h"

namespace edp::ddp {

template <typename Fn>
void DistributedDataParallel::for_each_run(size_t bi, int r, Fn&& fn) const {
  const Bucket& b = *buckets_[bi];
  const int64_t lo = std::min(b.numel, r * b.part), hi = std::min(b.numel, (r + 1) * b.part);
  for (size_t k : b.slots) {
    const Slot& s = slots_[k];
    const int64_t from = std::max(lo, s.offset), to = std::min(hi, s.offset + s.param->value.numel());
    if (from < to) fn(k, from - s.offset, from - lo, to - from);
  }
}

void DistributedDataParallel::make_shard_optimizer(optim::Optimizer& opt) {
  EDP_CHECK(opt.params().size() == params_.size(), "DistributedDataParallel::step: the optimizer has ",
            opt.params().size(), " parameters, the module ", params_.size(), "; build it over module().parameters()");
  for (size_t k = 0; k < params_.size(); ++k)
    EDP_CHECK(opt.params()[k] == params_[k], "DistributedDataParallel::step: the optimizer's parameter #", k, " ('",
              opt.params()[k]->name, "') is not the module's ('", params_[k]->name,
              "'); build it over module().parameters()");
  // Views: this rank's runs of the parameters, and of its reduced gradient blocks.
  segments_.clear();
  for (size_t bi = 0; bi < buckets_.size(); ++bi)
    for_each_run(bi, comm_.rank(), [&](size_t slot, int64_t po, int64_t pa, int64_t len) {
      segments_.push_back({slot, static_cast<int>(bi), po, pa, len});
    });
  shard_params_.clear();
  shard_params_.reserve(segments_.size());
  std::vector<nn::Parameter*> ptrs;
  for (const Segment& g : segments_) {
    const nn::Parameter& p = *params_[g.slot];
    nn::Parameter v;
    v.name = p.name + "[" + std::to_string(g.param_offset) + ":" + std::to_string(g.param_offset + g.length) + "]";
    v.value = p.value.flatten().narrow(g.param_offset, g.length);
    v.grad = buckets_[static_cast<size_t>(g.bucket)]->shard.narrow(g.part_offset, g.length);
    v.decay = p.decay;
    shard_params_.push_back(std::move(v));
    ptrs.push_back(&shard_params_.back());
  }
  shard_opt_ = opt.clone_for(std::move(ptrs));
}

void DistributedDataParallel::step(optim::Optimizer& opt) {
  if (!zero_) {
    opt.step();
    return;
  }
  // The first sharded step takes this rank's parts of whatever state opt holds (zeros when fresh,
  // a checkpoint's when restored) and frees opt's.
  if (!shard_opt_) scatter_optimizer_state(opt);
  step_pending_ = false;
  comm::StallLabel label("ddp sharded step");
  shard_opt_->set_lr(opt.lr());
  shard_opt_->step();
  opt.set_steps(shard_opt_->steps());
  allgather_parameters();
}

void DistributedDataParallel::allgather_parameters() {
  TimelineScope t("allgather parameters", "comm");
  const int me = comm_.rank();
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    Bucket& b = *buckets_[bi];
    // zero_stage 2 keeps no whole buffer: the gather lands in one made for this bucket (freed
    // before the next one's is made).
    Tensor all = zero2_ ? Tensor({comm_.size() * (b.part + 1)}, b.shard.dtype(), b.shard.device()) : b.buffer;
    if (all.device().is_cuda()) {  // the same through device copies (stream-ordered)
      for_each_run(bi, me, [&](size_t slot, int64_t po, int64_t pa, int64_t len) {
        b.shard.narrow(pa, len).copy_from(params_[slot]->value.flatten().narrow(po, len));
      });
      comm_.allgather(b.shard.raw(), all.raw(), b.part + 1, all.dtype());
      for (int r = 0; r < comm_.size(); ++r)
        if (r != me)
          for_each_run(bi, r, [&](size_t slot, int64_t po, int64_t pa, int64_t len) {
            Tensor dst = params_[slot]->value.flatten().narrow(po, len);
            dst.copy_from(all.narrow(r * (b.part + 1) + pa, len));
          });
      continue;
    }
    ops::cpu::dispatch_float(all.dtype(), "ddp parameter allgather", [&](auto tag) {
      using T = decltype(tag);
      T* send = b.shard.data<T>();  // its reduced gradients are used: the parts' new values go out in it
      for_each_run(bi, me, [&](size_t slot, int64_t po, int64_t pa, int64_t len) {
        std::memcpy(send + pa, params_[slot]->value.template data<T>() + po, static_cast<size_t>(len) * sizeof(T));
      });
      comm_.allgather(send, all.raw(), b.part + 1, all.dtype());
      const T* gathered = all.data<T>();
      for (int r = 0; r < comm_.size(); ++r)
        if (r != me)
          for_each_run(bi, r, [&](size_t slot, int64_t po, int64_t pa, int64_t len) {
            std::memcpy(params_[slot]->value.template data<T>() + po, gathered + r * (b.part + 1) + pa,
                        static_cast<size_t>(len) * sizeof(T));
          });
    });
  }
}

double DistributedDataParallel::clip_grad_norm(double max_norm) {
  if (!zero_) return optim::clip_grad_norm(params_, max_norm);
  EDP_CHECK(max_norm > 0, "clip_grad_norm: max_norm ", max_norm, " must be > 0");
  double ss = 0;
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    const Bucket& b = *buckets_[bi];
    for_each_run(bi, comm_.rank(), [&](size_t, int64_t, int64_t pa, int64_t len) {
      ss += ops::sum_squares(b.shard.narrow(pa, len));
    });
  }
  const double norm = std::sqrt(comm_.allreduce_value<double>(ss, comm::ReduceOp::Sum));
  if (norm > max_norm) {
    const double f = max_norm / (norm + 1e-6);
    for (auto& bp : buckets_) {
      Tensor parts = bp->shard.narrow(0, bp->part);
      ops::scale_(parts, f);
    }
  }
  return norm;
}

const nn::Parameter* DistributedDataParallel::first_nonfinite_grad() const {
  if (!zero_) return nn::first_nonfinite_grad(params_);
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    const Bucket& b = *buckets_[bi];
    const nn::Parameter* bad = nullptr;
    for_each_run(bi, comm_.rank(), [&](size_t slot, int64_t, int64_t pa, int64_t len) {
      if (!bad && !std::isfinite(ops::sum_squares(b.shard.narrow(pa, len)))) bad = params_[slot];
    });
    if (bad) return bad;
  }
  return nullptr;
}

namespace {
// The optimizer's state tensors per parameter (momentum: 1 or 0, Adam: 2), checked.
size_t state_per_param(const std::vector<Tensor*>& st, size_t params, const char* what) {
  if (params == 0) return 0;
  EDP_CHECK(st.size() % params == 0, "DistributedDataParallel::", what, ": ", st.size(),
            " optimizer state tensors for ", params, " parameters");
  return st.size() / params;
}
}  // namespace

void DistributedDataParallel::gather_optimizer_state(optim::Optimizer& opt) {
  if (!zero_ || !shard_opt_) return;
  comm::StallLabel label("ddp optimizer state gather");
  const std::vector<Tensor*> full = opt.state();
  const size_t nq = state_per_param(full, params_.size(), "gather_optimizer_state");
  const std::vector<Tensor*> mine = shard_opt_->state();
  size_t first = 0;  // this rank's first segment of the bucket
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    const Bucket& b = *buckets_[bi];
    size_t count = 0;
    while (first + count < segments_.size() && segments_[first + count].bucket == static_cast<int>(bi)) ++count;
    // On the buckets' device (a GPU communicator reduces device memory); the state's copies go across.
    Tensor send = Tensor::zeros({b.part + 1}, b.shard.dtype(), b.shard.device());
    Tensor all({comm_.size() * (b.part + 1)}, b.shard.dtype(), b.shard.device());
    for (size_t q = 0; q < nq; ++q) {
      for (size_t i = first; i < first + count; ++i) {
        const Segment& g = segments_[i];
        send.narrow(g.part_offset, g.length).copy_from(*mine[i * nq + q]);
      }
      comm_.allgather(send.raw(), all.raw(), b.part + 1, all.dtype());
      for (int r = 0; r < comm_.size(); ++r)
        for_each_run(bi, r, [&](size_t slot, int64_t po, int64_t pa, int64_t len) {
          Tensor dst = full[slot * nq + q]->flatten().narrow(po, len);
          dst.copy_from(all.narrow(r * (b.part + 1) + pa, len));
        });
    }
    first += count;
  }
  opt.set_steps(shard_opt_->steps());
}

void DistributedDataParallel::scatter_optimizer_state(optim::Optimizer& opt) {
  if (!zero_) return;
  if (!shard_opt_) make_shard_optimizer(opt);
  shard_opt_->set_steps(opt.steps());
  if (!opt.has_state()) return;  // fresh: the shards' own zeros, never the whole state at once
  const std::vector<Tensor*> full = opt.state();
  const size_t nq = state_per_param(full, params_.size(), "scatter_optimizer_state");
  const std::vector<Tensor*> mine = shard_opt_->state();
  for (size_t i = 0; i < segments_.size(); ++i) {
    const Segment& g = segments_[i];
    for (size_t q = 0; q < nq; ++q) mine[i * nq + q]->copy_from(full[g.slot * nq + q]->flatten().narrow(g.param_offset, g.length));
  }
  shard_opt_->set_steps(opt.steps());
  opt.release_state();
}

StateShard DistributedDataParallel::optimizer_state_part(optim::Optimizer& opt) {
  StateShard s;
  s.world = shard_world();
  s.rank = shard_rank();
  s.steps = opt.steps();
  s.dtype = params_[0]->value.dtype();
  s.runs = layout_.runs(s.world, s.rank);
  if (zero_ && !shard_opt_ && opt.has_state()) scatter_optimizer_state(opt);  // a full state not yet sharded
  if (zero_ && shard_opt_) {
    s.steps = shard_opt_->steps();
    if (shard_opt_->has_state()) {
      const std::vector<Tensor*> st = shard_opt_->state();
      s.per_run = static_cast<int>(state_per_param(st, segments_.size(), "optimizer_state_part"));
      for (Tensor* t : st) s.data.push_back(t->device().is_cpu() ? *t : t->to(Device::cpu()));  // parts travel in host memory
      s.fresh = false;
    }
  } else if (!zero_ && opt.has_state()) {
    // Whole (one rank, or unsharded): the runs are the parameters in bucket order.
    const std::vector<Tensor*> st = opt.state();
    s.per_run = static_cast<int>(state_per_param(st, params_.size(), "optimizer_state_part"));
    for (const ShardRun& r : s.runs)
      for (int q = 0; q < s.per_run; ++q) {
        const Tensor t = st[r.param * static_cast<size_t>(s.per_run) + static_cast<size_t>(q)]->flatten();
        s.data.push_back(t.device().is_cpu() ? t : t.to(Device::cpu()));
      }
    s.fresh = false;
  }
  return s;
}

StateShard DistributedDataParallel::take_optimizer_state(optim::Optimizer& opt) {
  StateShard s = optimizer_state_part(opt);
  shard_opt_.reset();
  shard_params_.clear();
  segments_.clear();
  opt.release_state();
  return s;
}

void DistributedDataParallel::put_optimizer_state(StateShard s, optim::Optimizer& opt) {
  const int world = shard_world(), rank = shard_rank();
  EDP_CHECK(s.world == world && s.rank == rank && s.runs == layout_.runs(world, rank), "DistributedDataParallel::",
            "put_optimizer_state: the state given is part ", s.rank, " of ", s.world, " (", s.runs.size(),
            " run(s)) but this rank holds part ", rank, " of ", world, " of its buckets (another bucket layout?)");
  opt.release_state();
  if (zero_) {
    if (!shard_opt_) make_shard_optimizer(opt);
    shard_opt_->release_state();
  }
  optim::Optimizer& target = zero_ ? *shard_opt_ : opt;
  if (!s.fresh) {
    const std::vector<Tensor*> st = target.state();  // zeros, filled below
    const size_t nq = state_per_param(st, zero_ ? segments_.size() : params_.size(), "put_optimizer_state");
    EDP_CHECK(nq == static_cast<size_t>(s.per_run) && s.data.size() == s.runs.size() * nq,
              "DistributedDataParallel::put_optimizer_state: ", s.per_run, " state tensor(s) per run given, the optimizer has ", nq);
    for (size_t i = 0; i < s.runs.size(); ++i)
      for (size_t q = 0; q < nq; ++q) {
        Tensor& src = s.data[i * nq + q];
        if (zero_)
          st[i * nq + q]->copy_from(src);
        else
          st[s.runs[i].param * nq + q]->flatten().copy_from(src);
        src = Tensor();  // freed as it is placed
      }
  }
  target.set_steps(s.steps);
  opt.set_steps(s.steps);
}

int64_t DistributedDataParallel::optimizer_state_bytes(optim::Optimizer& opt) const {
  int64_t bytes = 0;
  for (const Tensor* t : zero_ && shard_opt_ ? shard_opt_->state() : opt.state()) bytes += static_cast<int64_t>(t->nbytes());
  return bytes;
}

}  // namespace edp::ddp
