// DistributedDataParallel: keeps a module's replicas identical across the ranks of a
// communicator by averaging gradients, overlapping the communication with backward.
//
// Flow of one step:
//   forward(x)          → module.forward (local)
//   backward(dy)        → module.backward; each parameter's grad-ready hook copies its gradient
//                         into its bucket, scaled by the step's weight (1/world by default; see
//                         set_step_weight), and once a bucket is full it is queued for a Sum
//                         allreduce on the communication thread — while backward goes on.
//                         GPU buckets on a stream-ordered communicator (NCCL) are enqueued from
//                         the backward thread itself instead: the collective runs on NCCL's
//                         stream after an event of the compute stream, and the compute stream
//                         waits for it only when the step finishes (no host wait in between).
//                         The colocated communicator (several ranks per GPU) blocks the host,
//                         so its buckets go through the communication thread.
//                         After module.backward returns, remaining buckets are launched, all are
//                         awaited, and the reduced values are copied back into the grads.
//   optimizer.step()    → identical on every rank.
// Buckets hold parameters in reverse registration order (the order backward produces them):
// a small first bucket (first_bucket_bytes, 1 MiB) so that communication starts early, then
// buckets up to bucket_cap_bytes (0, the default: EDP_BUCKET_CAP_MB, 25 MiB unless set). Buckets are always launched in index order — a
// bucket that fills early waits for its predecessors — so every rank issues the same sequence
// of collectives; each bucket carries one extra element (its index + 1) whose reduced value
// proves it (a mismatch throws "ranks launched buckets in different orders").
//
// At construction: the ranks check that they hold the same parameters (names, shapes, dtypes;
// a mismatch throws on every rank and names the first differing parameter), then rank 0's
// parameters and buffers (BatchNorm statistics) are broadcast.
//
// no_sync(): inside its scope backward only accumulates local gradients (gradient
// accumulation); the first backward after it averages the accumulated sum.
//
// Sharded (DDPOptions::zero_stage = 1, ZeRO stage 1; 2 ranks or more; host or GPU memory):
// each bucket is cut into one part per rank (ceil(numel / ranks) elements; the last part padded),
// rank r owning part r of every bucket. A ready bucket is reduce-scattered instead of allreduced,
// so rank r receives the averaged gradient of its parts only, and the parameters' own grads keep
// the local gradient. step(opt) replaces opt.step(): an optimizer of opt's kind and settings
// (Optimizer::clone_for) over this rank's parts — views into the parameters and the reduced parts
// — updates them, its state 1/ranks of opt's, and the updated parts are allgathered bucket by
// bucket into every rank's parameters. The same bytes cross the wire as an allreduce's two
// halves. An element's update is the unsharded one (the optimizers are elementwise): with the
// reduction in rank order (edp's shared memory on one host) the parameters are bitwise those of
// the unsharded run. clip_grad_norm sums the squares over the parts and the ranks.
// gather_optimizer_state / scatter_optimizer_state move the state between the shards and opt's
// full per-parameter tensors (every rank then holds all of it); take_optimizer_state /
// put_optimizer_state move this rank's part only, which ddp::reshard (edp/ddp/shard.h) carries to
// another world size and train::write_shard (edp/train/shards.h) writes to a checkpoint.
//
// Sharded gradients too (zero_stage = 2, ZeRO stage 2): the same parts and the same update, but no
// rank keeps a whole gradient between backward passes. A parameter's gradient is released once its
// bucket holds it (a layer makes it again, as zeros, when it next accumulates:
// Parameter::grad_to_accumulate); a bucket's buffer exists from its first gradient until its
// reduce-scatter completed — in host memory freed by the communication thread as the collective
// ends, while backward goes on; in GPU memory at the end of backward — and what stays is this
// rank's reduced part. The parameters' grads are therefore undefined outside backward (inside
// no_sync() they accumulate as usual, and are released by the synchronised backward). The
// parameters are bitwise those of zero_stage 1 (the same copies, the same reduction).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "edp/comm/comm_thread.h"
#include "edp/comm/communicator.h"
#include "edp/ddp/shard.h"
#include "edp/nn/module.h"
#include "edp/optim/optimizer.h"

namespace edp::ddp {

struct DDPOptions {
  int64_t bucket_cap_bytes = 0;  // 0: EDP_BUCKET_CAP_MB MiB (default 25; docs/knobs.md)
  int64_t first_bucket_bytes = 1ll << 20;
  bool broadcast_buffers = true;  // rank 0's buffers at construction
  // 1: ZeRO stage 1, the optimizer state sharded over the ranks (see "Sharded" below); 2: the
  // gradients too (ZeRO stage 2); 0: neither.
  int zero_stage = 0;
};

// Where the time of the synchronised backward passes went (seconds, summed over steps).
struct DDPStats {
  int64_t steps = 0;
  double backward_s = 0;       // module.backward (compute; allreduces run meanwhile)
  double exposed_comm_s = 0;   // waiting for buckets after backward: communication NOT hidden
  double comm_s = 0;           // time the communication thread spent in allreduces (0 for GPU
                               // buckets on NCCL: enqueued, their time is the GPU's)
  int64_t bytes_reduced = 0;
};

struct BucketInfo {
  std::vector<std::string> params;  // in launch order
  int64_t numel = 0;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, comm::Communicator& comm,
                          DDPOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  Tensor forward(const Tensor& x);
  Tensor backward(const Tensor& grad_out);
  // For a rank with no samples in a step (uneven last batch): takes part in the step's
  // allreduces with its current (zero) gradients instead of calling backward.
  void sync_without_backward();

  // Weight of this rank's gradient in the average: local_samples / global_samples, for steps
  // whose ranks hold different batch sizes; the default (after each step) is 1/world.
  void set_step_weight(double w) { step_weight_ = w; }

  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& d) : d_(d) { d_.sync_ = false; }
    ~NoSync() { d_.sync_ = true; }

   private:
    DistributedDataParallel& d_;
  };
  NoSync no_sync() { return NoSync(*this); }

  // The optimizer step (see "Sharded" above): opt.step() unless sharded. Collective when sharded;
  // opt's learning rate is read at every call and its step count follows the shards'. Sharded, a
  // synchronised backward must be followed by step(opt) or skip_step() before the next one (an
  // opt.step() would update from the local gradients: the next backward throws, saying so).
  void step(optim::Optimizer& opt);
  // No update for the last synchronised backward (a step skipped for non-finite gradients).
  void skip_step() { step_pending_ = false; }
  // Global-norm clipping of the averaged gradients to max_norm (after backward, before step);
  // returns the norm before it. Sharded: the squares of every rank's parts, summed over the ranks
  // (collective), and the parts scaled.
  double clip_grad_norm(double max_norm);
  // Sharded only (no-ops otherwise), collective. gather: every rank's parts of the optimizer state
  // into opt's full per-parameter state tensors on every rank (for a checkpoint; the step count
  // too). scatter: each rank takes its parts from opt's full state (as a restored checkpoint leaves
  // it), then opt's full state is released; the first step(opt) does the same, so a state restored
  // into opt before it (or opt's fresh zeros) is what the shards start from.
  void gather_optimizer_state(optim::Optimizer& opt);
  void scatter_optimizer_state(optim::Optimizer& opt);
  bool sharded() const { return zero_; }
  // 2: the gradients are sharded too (zero_stage 2 on 2 ranks or more); 1: the optimizer state
  // only; 0: unsharded.
  int sharding_stage() const { return zero2_ ? 2 : zero_ ? 1 : 0; }
  // The first parameter with a NaN or an infinity in its averaged gradient after a synchronised
  // backward, or nullptr. Sharded: in this rank's reduced parts (a rank's non-finite gradient
  // reaches every sum it is part of); ranks then disagree on whether one exists (collective
  // decisions must allreduce it). Unsharded: in the parameters' grads, the same on every rank.
  const nn::Parameter* first_nonfinite_grad() const;
  // This rank's part of the optimizer state (edp/ddp/shard.h), taken out of opt (and out of the
  // shards): sharded, its part over the ranks; otherwise the whole state as part 0 of 1. Fresh
  // when the optimizer has not stepped. Not collective: a full state in opt that was not sharded
  // yet (a restored checkpoint before the first step) is cut to this rank's part locally. What an
  // elastic change of size moves (ddp::reshard).
  StateShard take_optimizer_state(optim::Optimizer& opt);
  // The same part, left in place (its tensors shared, not copied): what a sharded checkpoint
  // writes (edp/train/shards.h).
  StateShard optimizer_state_part(optim::Optimizer& opt);
  // Installs this rank's part of the state (take_optimizer_state's counterpart, for this DDP's
  // world): sharded, into the shards; otherwise into opt. Throws when it is another part.
  void put_optimizer_state(StateShard s, optim::Optimizer& opt);
  // The layout of the sharded state (its parts per world size), and which part this rank holds:
  // part shard_rank() of shard_world() (0 of 1 when not sharded: the whole state).
  const ShardLayout& layout() const { return layout_; }
  int shard_world() const { return zero_ ? comm_.size() : 1; }
  int shard_rank() const { return zero_ ? comm_.rank() : 0; }
  // Bytes of optimizer state this rank holds: its shard's when sharded (after the first step or
  // scatter), otherwise opt's.
  int64_t optimizer_state_bytes(optim::Optimizer& opt) const;

  nn::Module& module() { return *module_; }
  comm::Communicator& communicator() { return comm_; }
  const std::vector<BucketInfo>& buckets() const { return bucket_info_; }
  const DDPStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  struct Slot {
    nn::Parameter* param;
    int bucket;
    int64_t offset;
  };
  // Sharded: a run of this rank's part of a bucket that lies in one parameter.
  struct Segment {
    size_t slot;           // the parameter
    int bucket;
    int64_t param_offset;  // first element in the parameter
    int64_t part_offset;   // first element in this rank's part of the bucket
    int64_t length;
  };
  struct Bucket;
  void check_same_parameters();
  void check_same_buckets();
  void build_buckets();
  void on_grad_ready(size_t slot);
  void launch_ready_buckets();
  void finish();
  void check_step_made() const;  // sharded: throws when the last synchronised backward awaits its step
  bool solo() const { return comm_.size() == 1 && step_weight_ == 1.0; }
  // Sharded: the flat bucket element's index in the bucket's buffer (rank blocks of part + 1).
  int64_t at(const Bucket& b, int64_t flat) const;
  // Sharded: fn(slot, param_offset, part_offset, length) for each run of rank r's part of bucket
  // bi that lies in one parameter, in bucket order.
  template <typename Fn>
  void for_each_run(size_t bi, int r, Fn&& fn) const;
  void copy_into_bucket(const Slot& s, Bucket& b);  // the gradient, scaled, into its bucket
  void make_shard_optimizer(optim::Optimizer& opt);
  void allgather_parameters();

  std::shared_ptr<nn::Module> module_;
  comm::Communicator& comm_;
  DDPOptions opt_;
  std::unique_ptr<comm::CommThread> thread_;
  std::vector<nn::Parameter*> params_;
  std::vector<Slot> slots_;  // one per parameter, registration order
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<BucketInfo> bucket_info_;
  size_t next_launch_ = 0;
  bool sync_ = true;
  bool in_backward_ = false;
  bool step_pending_ = false;  // sharded: a synchronised backward awaits step(opt) or skip_step()
  double step_weight_;
  DDPStats stats_;
  bool zero_ = false;   // sharded (DDPOptions::zero_stage >= 1, 2 ranks or more)
  bool zero2_ = false;  // the gradients too (zero_stage 2)
  std::vector<Segment> segments_;
  std::vector<nn::Parameter> shard_params_;  // views: parameter parts and reduced gradient parts
  std::unique_ptr<optim::Optimizer> shard_opt_;
  ShardLayout layout_;
};

}  // namespace edp::ddp
