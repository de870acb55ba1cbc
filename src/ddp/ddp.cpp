// DistributedDataParallel (see ddp.h): parameter check, buckets, overlapped allreduce. The
// sharded optimizer state (ZeRO stage 1) is in ddp_zero.cpp.
#include "edp/ddp/ddp.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "backend/cpu/common.h"
#include "edp/backend/ops.h"
#include "edp/core/allocator.h"
#include "edp/core/stopwatch.h"
#include "edp/core/knobs.h"
#include "edp/core/timeline.h"
#include "edp/comm/stall.h"
#include "edp/optim/optimizer.h"
#include "ddp/bucket.h"

namespace edp::ddp {


namespace {
std::string fmt_sizes(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}
uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}
std::string describe(const nn::Parameter& p) {
  return "'" + p.name + "' " + p.value.str();
}
}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 comm::Communicator& comm, DDPOptions options)
    : module_(std::move(module)), comm_(comm), opt_(options) {
  EDP_CHECK(module_ != nullptr, "DistributedDataParallel: null module");
  if (opt_.bucket_cap_bytes == 0) opt_.bucket_cap_bytes = knobs::get_int("EDP_BUCKET_CAP_MB") << 20;
  EDP_CHECK(opt_.bucket_cap_bytes > 0 && opt_.first_bucket_bytes > 0,
            "DistributedDataParallel: bucket sizes must be positive");
  step_weight_ = 1.0 / comm_.size();
  params_ = module_->parameters();
  EDP_CHECK(!params_.empty(), "DistributedDataParallel: the module has no parameters");
  EDP_CHECK(params_[0]->value.device().is_cpu() || comm_.device_buffers(),
            "DistributedDataParallel: the parameters are on ", params_[0]->value.device().str(),
            " but the communicator is '", comm_.backend(), "', which reduces host memory: GPU models need "
            "the NCCL communicator (comm::make_nccl_communicator(world)) or, with several ranks per GPU, the "
            "colocated one (comm::make_colocated_communicator(world))");
  EDP_CHECK(opt_.zero_stage >= 0 && opt_.zero_stage <= 2, "DistributedDataParallel: zero_stage ", opt_.zero_stage,
            " is not supported (0: unsharded, 1: the optimizer state sharded over the ranks, 2: the gradients too)");
  zero_ = opt_.zero_stage >= 1 && comm_.size() > 1;
  zero2_ = zero_ && opt_.zero_stage == 2;
  check_same_parameters();
  // Identical replicas from the start: rank 0's values win.
  for (nn::Parameter* p : params_) comm_.broadcast(p->value, 0);
  if (opt_.broadcast_buffers)
    for (nn::Buffer* b : module_->buffers()) comm_.broadcast(b->value, 0);
  build_buckets();
  check_same_buckets();
  // GPU buckets on a stream-ordered backend (NCCL) are enqueued from the thread that runs
  // backward (launch_ready_buckets), so no communication thread (and no second NCCL
  // communicator) is needed; everything else goes through one.
  if (!(params_[0]->value.device().is_cuda() && comm_.stream_ordered()))
    thread_ = std::make_unique<comm::CommThread>(comm_.dup());
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i]->grad_ready_hooks.push_back([this, i](nn::Parameter&) { on_grad_ready(i); });
  if (zero2_) {  // no whole gradient between backward passes: the layers make them as they need them
    for (nn::Parameter* p : params_) p->grad = Tensor();
    // The host allocator would keep the released gradients' blocks for reuse (its cache): return
    // them, or the process would go on holding the memory stage 2 exists to give back.
    host_allocator_release_cache();
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (nn::Parameter* p : params_)
    if (!p->grad_ready_hooks.empty()) p->grad_ready_hooks.pop_back();
}

// Ranks whose bucket layouts differ (another --bucket-cap-mb or EDP_BUCKET_CAP_MB on one of them)
// would reduce buffers of different lengths into each other: MPI reports a bare truncation
// error, NCCL may hang. Compare the layouts now and name the difference.
void DistributedDataParallel::check_same_buckets() {
  comm::StallLabel label("ddp bucket layout check");
  const int64_t mine[3] = {static_cast<int64_t>(bucket_info_.size()), opt_.bucket_cap_bytes, opt_.first_bucket_bytes};
  int64_t lo[3], hi[3];
  comm_.allreduce(mine, lo, 3, DType::I64, comm::ReduceOp::Min);
  comm_.allreduce(mine, hi, 3, DType::I64, comm::ReduceOp::Max);
  std::vector<int64_t> sizes;
  for (const BucketInfo& b : bucket_info_) sizes.push_back(b.numel);
  const int64_t h = static_cast<int64_t>(fnv1a(fmt_sizes(sizes)) >> 1);
  const int64_t hl = comm_.allreduce_value<int64_t>(h, comm::ReduceOp::Min);
  const int64_t hh = comm_.allreduce_value<int64_t>(h, comm::ReduceOp::Max);
  if (lo[0] == hi[0] && lo[1] == hi[1] && lo[2] == hi[2] && hl == hh) return;
  throw Error("DistributedDataParallel: ranks built different gradient buckets: rank " + std::to_string(comm_.rank()) +
              " has " + std::to_string(bucket_info_.size()) + " bucket(s) of " + fmt_sizes(sizes) +
              " elements from a bucket cap of " + std::to_string(opt_.bucket_cap_bytes) + " bytes (first bucket " +
              std::to_string(opt_.first_bucket_bytes) + "); the ranks' caps range from " + std::to_string(lo[1]) +
              " to " + std::to_string(hi[1]) + " bytes. Give every rank the same bucket cap (--bucket-cap-mb, "
              "EDP_BUCKET_CAP_MB)");
}

void DistributedDataParallel::check_same_parameters() {
  comm::StallLabel label("ddp parameter check");
  const int64_t n = static_cast<int64_t>(params_.size());
  const int64_t nmin = comm_.allreduce_value<int64_t>(n, comm::ReduceOp::Min);
  const int64_t nmax = comm_.allreduce_value<int64_t>(n, comm::ReduceOp::Max);
  std::vector<int64_t> h(static_cast<size_t>(nmin) + 1), hmin, hmax;
  DType dt = params_[0]->value.dtype();
  for (int64_t i = 0; i < nmin; ++i) {
    const nn::Parameter& p = *params_[static_cast<size_t>(i)];
    EDP_CHECK(p.value.dtype() == dt, "DistributedDataParallel: parameter ", describe(p),
              " has another dtype than ", describe(*params_[0]), "; convert the module to one dtype");
    h[static_cast<size_t>(i)] =
        static_cast<int64_t>(fnv1a(p.value.str(), fnv1a(p.name)) >> 1);
  }
  h.back() = n;
  hmin = h;
  hmax = h;
  comm_.allreduce(hmin.data(), hmin.data(), static_cast<int64_t>(hmin.size()), DType::I64, comm::ReduceOp::Min);
  comm_.allreduce(hmax.data(), hmax.data(), static_cast<int64_t>(hmax.size()), DType::I64, comm::ReduceOp::Max);
  for (int64_t i = 0; i < nmin; ++i)
    if (hmin[static_cast<size_t>(i)] != hmax[static_cast<size_t>(i)])
      throw Error("DistributedDataParallel: ranks hold different models: parameter #" +
                  std::to_string(i) + " differs; on rank " + std::to_string(comm_.rank()) +
                  " it is " + describe(*params_[static_cast<size_t>(i)]) +
                  ". Build the same model on every rank.");
  if (nmin != nmax)
    throw Error("DistributedDataParallel: ranks hold different models: between " + std::to_string(nmin) +
                " and " + std::to_string(nmax) + " parameters; rank " + std::to_string(comm_.rank()) +
                " has " + std::to_string(n) +
                (n > nmin ? ", the first extra one is " + describe(*params_[static_cast<size_t>(nmin)]) : "") +
                ". Build the same model on every rank.");
}

void DistributedDataParallel::build_buckets() {
  slots_.resize(params_.size());
  const std::vector<std::vector<size_t>> groups = bucket_groups(params_, opt_.first_bucket_bytes, opt_.bucket_cap_bytes);
  std::vector<int64_t> numel;
  for (const nn::Parameter* p : params_) numel.push_back(p->value.numel());
  layout_ = ShardLayout(std::move(numel), groups);
  for (size_t b = 0; b < groups.size(); ++b) {
    auto bucket = std::make_unique<Bucket>();
    BucketInfo info;
    int64_t off = 0;
    for (size_t k : groups[b]) {
      slots_[k] = {params_[k], static_cast<int>(b), off};
      off += params_[k]->value.numel();
      bucket->slots.push_back(k);
      info.params.push_back(params_[k]->name);
    }
    info.numel = off;
    bucket->numel = off;
    // On the parameters' device: with GPU parameters the buckets live on the GPU and the
    // communicator reduces them there. NCCL runs on its own stream ordered after the compute
    // stream by an event (edp/comm/nccl.h), enqueued from the backward thread, so nothing here
    // waits for the GPU; the colocated communicator runs on the communication thread.
    if (zero2_) {
      // The buffer is made by the bucket's first gradient of each backward (on_grad_ready).
      bucket->part = (off + comm_.size() - 1) / comm_.size();
      bucket->shard = Tensor::zeros({bucket->part + 1}, params_[0]->value.dtype(), params_[0]->value.device());
    } else if (zero_) {
      const int64_t w = comm_.size();
      bucket->part = (off + w - 1) / w;
      // Zeros: the padding of the last block is reduced and gathered like the rest.
      bucket->buffer = Tensor::zeros({w * (bucket->part + 1)}, params_[0]->value.dtype(), params_[0]->value.device());
      // This rank's own block: reduced in place, and allgathered from in place.
      bucket->shard = bucket->buffer.narrow(comm_.rank() * (bucket->part + 1), bucket->part + 1);
    } else {
      bucket->buffer = Tensor({off + 1}, params_[0]->value.dtype(), params_[0]->value.device());
    }
    buckets_.push_back(std::move(bucket));
    bucket_info_.push_back(std::move(info));
  }
}

Tensor DistributedDataParallel::forward(const Tensor& x) {
  TimelineScope t("forward", "compute");
  return module_->forward(x);
}

void DistributedDataParallel::on_grad_ready(size_t k) {
  if (!sync_ || !in_backward_ || solo()) return;
  const Slot& s = slots_[k];
  Bucket& b = *buckets_[static_cast<size_t>(s.bucket)];
  // zero_stage 2: the bucket's buffer is made (zeros) by its first gradient of the backward; a
  // gradient already copied and released (finish() refills unlaunched buckets) leaves its runs as
  // they are (a parameter's hook fires once per backward: the layer contract, module.h).
  if (zero2_ && !b.buffer.defined())
    b.buffer = Tensor::zeros({comm_.size() * (b.part + 1)}, b.shard.dtype(), b.shard.device());
  if (!zero2_) s.param->grad_to_accumulate();  // one released before (by a zero_stage 2 DDP) counts as zeros
  if (s.param->grad.defined()) copy_into_bucket(s, b);
  // Released once its bucket holds it; on a GPU its memory is reused by later work on the same
  // stream, after the copy.
  if (zero2_) s.param->grad = Tensor();
  if (++b.ready == b.slots.size()) launch_ready_buckets();
}

// The gradient into the bucket, scaled by the step's weight (the averaging folded into the copy:
// the allreduce is then a plain Sum): unsharded at its offset, sharded run by run into the rank
// blocks.
void DistributedDataParallel::copy_into_bucket(const Slot& s, Bucket& b) {
  const Tensor g = s.param->grad.flatten();
  const int64_t n = g.numel();
  if (b.buffer.device().is_cuda()) {  // enqueued on the compute stream, before the bucket's collective
    for (int64_t i = 0; i < n;) {
      const int64_t flat = s.offset + i, len = zero_ ? std::min(n - i, b.part - flat % b.part) : n;
      Tensor d = b.buffer.narrow(zero_ ? at(b, flat) : flat, len);
      d.copy_from(g.narrow(i, len));
      ops::scale_(d, step_weight_);
      i += len;
    }
    return;
  }
  ops::cpu::dispatch_float(b.buffer.dtype(), "ddp copy-in", [&](auto tag) {
    using T = decltype(tag);
    const T* src = g.data<T>();
    const T w = static_cast<T>(step_weight_);
    T* buf = b.buffer.data<T>();
    for (int64_t i = 0; i < n;) {
      const int64_t flat = s.offset + i, len = zero_ ? std::min(n - i, b.part - flat % b.part) : n;
      T* d = buf + (zero_ ? at(b, flat) : flat);
      for (int64_t j = 0; j < len; ++j) d[j] = src[i + j] * w;
      i += len;
    }
  });
}

void DistributedDataParallel::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() &&
         buckets_[next_launch_]->ready == buckets_[next_launch_]->slots.size()) {
    Bucket& b = *buckets_[next_launch_];
    const int64_t n = b.buffer.numel();
    if (b.buffer.device().is_cuda()) {
      for (int64_t r = 0; r < (zero_ ? comm_.size() : 1); ++r) {  // each rank block's last element, or the buffer's
        Tensor check = b.buffer.narrow(zero_ ? r * (b.part + 1) + b.part : n - 1, 1);
        check.fill(static_cast<double>(next_launch_ + 1));
      }
    } else {
      ops::cpu::dispatch_float(b.buffer.dtype(), "ddp order check", [&](auto tag) {
        using T = decltype(tag);
        if (!zero_) {
          b.buffer.data<T>()[n - 1] = static_cast<T>(next_launch_ + 1);
          return;
        }
        for (int64_t r = 0; r < comm_.size(); ++r) b.buffer.data<T>()[r * (b.part + 1) + b.part] = static_cast<T>(next_launch_ + 1);
      });
    }
    b.launched = true;
    const int64_t queued = Timeline::get().enabled() ? Timeline::get().now_us() : 0;
    void* buf = b.buffer.raw();
    // zero_stage 2 in host memory: reduced out of place into the kept part, the buffer handed to
    // the communication thread (freed when the collective ends). Device communicators reduce in
    // place, so on a GPU the part lands in the buffer's own block (finish() copies it out).
    const int64_t block = b.part + 1;
    const DType dt = b.buffer.dtype();
    const bool host_zero2 = zero2_ && !b.buffer.device().is_cuda();
    void* shard = nullptr;  // where this rank's reduced part lands (sharded)
    if (zero2_ && !host_zero2)
      shard = static_cast<char*>(buf) + static_cast<size_t>(comm_.rank() * block) * dtype_size(dt);
    else if (zero_)
      shard = b.shard.raw();
    Tensor owned;
    if (host_zero2) owned = std::exchange(b.buffer, Tensor());
    const size_t index = next_launch_;
    auto comm_us = b.comm_us;
    if (!thread_) {
      // Stream-ordered GPU collective (NCCL): enqueued here, right after this bucket's last
      // gradient copy on the current stream, so it starts as soon as the GPU gets there while
      // the host goes on enqueuing backward; finish() makes the current stream wait for it.
      // Its duration is GPU time, not measured on the host (comm_us stays 0).
      EDP_CHECK(b.buffer.device().is_cuda(), "DistributedDataParallel: bucket ", index,
                " is in host memory but the communicator is stream-ordered (GPU)");
      {
        comm::StallLabel label("ddp bucket " + std::to_string(index + 1) + "/" + std::to_string(buckets_.size()));
        if (shard)  // stream-ordered too: the reduced block is ready for what the stream runs next
          comm_.reduce_scatter(buf, shard, block, dt, comm::ReduceOp::Sum);
        else
          b.request = comm_.iallreduce(buf, buf, n, dt, comm::ReduceOp::Sum);
      }
      if (Timeline::get().enabled()) {
        auto& tl = Timeline::get();
        tl.complete("bucket " + std::to_string(index) + " enqueued", "comm", queued, tl.now_us(),
                    nlohmann::json::object({{"bucket", index}}).dump());
      }
      ++next_launch_;
      continue;
    }
    const size_t nbuckets = buckets_.size();
    b.request = thread_->submit([buf, shard, block, n, dt, index, nbuckets, queued, comm_us,
                                 owned = std::move(owned)](comm::Communicator& c) mutable {
      comm::StallLabel label("ddp bucket " + std::to_string(index + 1) + "/" + std::to_string(nbuckets));
      auto& tl = Timeline::get();
      const auto t0 = std::chrono::steady_clock::now();
      const int64_t start = tl.enabled() ? tl.now_us() : 0;
      if (shard)
        c.reduce_scatter(buf, shard, block, dt, comm::ReduceOp::Sum);
      else
        c.allreduce(buf, buf, n, dt, comm::ReduceOp::Sum);
      comm_us->store(std::chrono::duration_cast<std::chrono::microseconds>(
                         std::chrono::steady_clock::now() - t0).count());
      owned = Tensor();  // zero_stage 2: the bucket's buffer, freed before the request completes
      if (tl.enabled()) {
        const std::string args = nlohmann::json{{"bucket", index}, {"elements", n - 1}}.dump();
        tl.complete("bucket " + std::to_string(index) + " queued", "comm", queued, start, args);
        tl.complete("bucket " + std::to_string(index) + " allreduce", "comm", start, tl.now_us(), args);
      }
    });
    ++next_launch_;
  }
}

void DistributedDataParallel::check_step_made() const {
  EDP_CHECK(!(zero_ && sync_ && step_pending_),
            "DistributedDataParallel: the optimizer state is sharded (zero_stage ", opt_.zero_stage, ") and the last synchronised "
            "backward was not followed by step(opt): call ddp.step(opt) instead of opt.step() (each rank holds only "
            "its part of the averaged gradient), or skip_step() to make no update");
}

Tensor DistributedDataParallel::backward(const Tensor& grad_out) {
  check_step_made();
  Tensor dx;
  Stopwatch sw;
  {
    TimelineScope t("backward", "compute");
    in_backward_ = true;
    try {
      dx = module_->backward(grad_out);
    } catch (...) {
      in_backward_ = false;
      throw;
    }
    in_backward_ = false;
  }
  if (sync_) {
    stats_.backward_s += sw.seconds();
    finish();
  }
  return dx;
}

void DistributedDataParallel::sync_without_backward() {
  EDP_CHECK(sync_, "sync_without_backward inside no_sync(): nothing to synchronise");
  check_step_made();
  finish();
}

void DistributedDataParallel::finish() {
  if (solo()) {  // one rank, full weight: the local gradient is already the average
    ++stats_.steps;
    return;
  }
  TimelineScope t("wait for allreduce", "comm");
  Stopwatch sw;
  // Parameters whose hooks did not fire (unused in this step, or no backward at all on this
  // rank) contribute their current gradient.
  in_backward_ = true;
  for (size_t bi = next_launch_; bi < buckets_.size(); ++bi) {
    // Unlaunched buckets are refilled from scratch (their grads are final now). A bucket this
    // loop's refills just launched is in the communication thread's hands: leave it alone.
    Bucket& b = *buckets_[bi];
    if (b.launched) continue;
    b.ready = 0;
    for (size_t k : b.slots) on_grad_ready(k);
  }
  in_backward_ = false;
  std::exception_ptr err;
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    Bucket& b = *buckets_[bi];
    try {
      b.request.wait();
    } catch (...) {
      if (!err) err = std::current_exception();
    }
  }
  if (err) std::rethrow_exception(err);
  const double world = comm_.size();
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    Bucket& b = *buckets_[bi];
    const int64_t n = zero_ ? comm_.size() * (b.part + 1) : b.numel + 1;
    if (zero2_ && b.buffer.defined()) {  // reduced in place on the device: keep this rank's block only
      b.shard.copy_from(b.buffer.narrow(comm_.rank() * (b.part + 1), b.part + 1));
      b.buffer = Tensor();
    }
    if (params_[0]->value.device().is_cuda()) {
      // One small read per bucket (synchronises with the reduction); then copies on the stream.
      // Sharded, this rank's reduced block stays in b.shard for step().
      const Tensor check = zero_ ? b.shard.narrow(b.part, 1) : b.buffer.narrow(n - 1, 1);
      const double got = check.to(Device::cpu()).item(0);
      if (got != world * static_cast<double>(bi + 1))
        throw Error("DistributedDataParallel: ranks launched buckets in different orders (bucket " +
                    std::to_string(bi) + " met another rank's bucket); the models or the " +
                    "backward passes differ between ranks");
      for (size_t k : zero_ ? std::vector<size_t>{} : b.slots) {
        const Slot& s = slots_[k];
        s.param->grad.copy_from(b.buffer.narrow(s.offset, s.param->grad.numel()).reshape(s.param->grad.shape()));
      }
    } else if (zero_) {  // this rank's reduced block stays in b.shard for step()
      ops::cpu::dispatch_float(b.shard.dtype(), "ddp order check", [&](auto tag) {
        using T = decltype(tag);
        if (b.shard.data<T>()[b.part] != static_cast<T>(world * static_cast<double>(bi + 1)))
          throw Error("DistributedDataParallel: ranks launched buckets in different orders (bucket " +
                      std::to_string(bi) + " met another rank's bucket: its check element is " +
                      std::to_string(static_cast<double>(b.shard.data<T>()[b.part])) + ", not " +
                      std::to_string(world * static_cast<double>(bi + 1)) + "); the models or the " +
                      "backward passes differ between ranks");
      });
    } else {
      ops::cpu::dispatch_float(b.buffer.dtype(), "ddp copy-out", [&](auto tag) {
        using T = decltype(tag);
        const T* src = b.buffer.data<T>();
        if (src[n - 1] != static_cast<T>(world * static_cast<double>(bi + 1)))
          throw Error("DistributedDataParallel: ranks launched buckets in different orders (bucket " +
                      std::to_string(bi) + " met another rank's bucket); the models or the " +
                      "backward passes differ between ranks");
        for (size_t k : b.slots) {
          const Slot& s = slots_[k];
          std::memcpy(s.param->grad.raw(), src + s.offset, s.param->grad.nbytes());
        }
      });
    }
    stats_.comm_s += static_cast<double>(b.comm_us->load()) * 1e-6;
    stats_.bytes_reduced += n * static_cast<int64_t>(dtype_size(params_[0]->value.dtype()));
    b.ready = 0;
    b.launched = false;
  }
  next_launch_ = 0;
  step_pending_ = zero_;
  step_weight_ = 1.0 / world;
  stats_.exposed_comm_s += sw.seconds();
  ++stats_.steps;
}

int64_t DistributedDataParallel::at(const Bucket& b, int64_t flat) const {
  return flat / b.part * (b.part + 1) + flat % b.part;
}

}  // namespace edp::ddp
