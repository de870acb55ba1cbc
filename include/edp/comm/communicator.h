// Communicator: the collective operations data-parallel training needs (allreduce, broadcast,
// allgather, barrier, split), blocking and non-blocking, behind an abstract interface so that
// backends can be added without touching it: MPI (the world, host buffers), NCCL (one rank per
// GPU, edp/comm/nccl.h) and colocated (k ranks per GPU, edp/comm/colocated.h). No MPI header is
// included here: users and other layers never see MPI types.
//
// Buffers are (pointer, element count, DType). Counts are int64_t; a backend whose native count
// is narrower (MPI: int) splits the operation into chunks, so any count works.
//
// Collective contract (as in MPI): every rank of a communicator calls the same collectives in
// the same order with matching count/dtype/op/root. A collective on one communicator must not
// be issued from two threads at once; use dup() to give a second thread its own communicator.
//
// Threads. DistributedDataParallel runs its bucket allreduces on a dedicated communication
// thread (see comm_thread.h) while the main thread computes backward. The minimum MPI thread
// level this needs is MPI_THREAD_SERIALIZED, under one rule: while the comm thread has work in
// flight, the main thread makes no MPI call (it waits on the comm thread's handles, which are
// plain C++ synchronisation). edp asks for MPI_THREAD_MULTIPLE (no such rule then) and accepts
// SERIALIZED; anything lower makes Environment throw, naming the level granted. Under
// SERIALIZED the MPI backend detects two threads inside MPI at once and throws instead of
// corrupting state.
//
// Progress of non-blocking collectives. Open MPI makes progress on a non-blocking collective
// only inside MPI calls on that process: a Request left alone between iallreduce() and wait()
// may not advance at all. Either poll test() from time to time, or — what the DDP does — issue
// blocking collectives from a CommThread, which overlaps with the caller by construction.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "edp/core/dtype.h"
#include "edp/core/error.h"
#include "edp/core/tensor.h"

namespace edp::comm {

// The exit code of a rank whose collective waited longer than EDP_COMM_TIMEOUT (the stall
// inspector names the ranks that did not arrive). edprun treats it like a crash: a restart from
// the last checkpoint when --max-restarts allows.
constexpr int kStallExitCode = 76;

enum class ReduceOp : uint8_t {
  Sum = 0,
  // Sum divided by the communicator's size, in the buffer's type: floating point divides
  // (correctly rounded, so integer-valued sums divisible by size stay exact); integers divide
  // with C++ semantics (truncation toward zero).
  Avg = 1,
  Max = 2,
  Min = 3,
};
const char* reduce_op_name(ReduceOp op);  // "sum", "avg", "max", "min"

// MPI's thread levels, in increasing order.
enum class ThreadLevel : uint8_t { Single = 0, Funneled = 1, Serialized = 2, Multiple = 3 };
const char* thread_level_name(ThreadLevel t);  // "MPI_THREAD_SERIALIZED", ...

// A backend's state for one in-flight non-blocking operation.
class RequestImpl {
 public:
  virtual ~RequestImpl() = default;
  // True when the operation has completed (and its finish step — e.g. Avg's division — ran).
  virtual bool test() = 0;
  virtual void wait() = 0;
};

// Handle of a non-blocking operation. The buffers must stay alive and untouched until wait()
// returns or test() returns true. A default-constructed Request is already complete.
// Destroying a Request that has not completed waits for it — except while an exception is
// unwinding the stack, where it is abandoned (the process is about to abort: see run_main).
class Request {
 public:
  Request() = default;
  explicit Request(std::unique_ptr<RequestImpl> impl) : impl_(std::move(impl)) {}
  Request(Request&&) noexcept = default;
  Request& operator=(Request&& o);
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  ~Request();

  // Non-blocking: true once complete. Errors of the operation are thrown from here or wait().
  bool test();
  void wait();
  bool done() const { return impl_ == nullptr; }

 private:
  std::unique_ptr<RequestImpl> impl_;  // null once complete
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Rank and number of ranks of this communicator on this host (shared-memory node).
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual std::string backend() const = 0;  // "mpi", "self", "nccl", "colocated"
  // What carries data between which ranks, for people: e.g. "same host, same launch: edp shared
  // memory; other hosts: MPI (...)" (the MPI backend: docs/elastic.md, "Which transport").
  virtual std::string transport() const { return backend(); }
  // False when ranks that share a host but were started by separate launches (the processes an
  // elastic grow spawned, and those started before) exchange data over a slower path than ranks
  // started together do, so that a job started at this size would be faster: the MPI backend
  // without edp's shared memory (EDP_HOST_SHM=off, or no room in /dev/shm), where Open MPI 4.1
  // connects separate launches over TCP.
  virtual bool as_fast_as_one_launch() const { return true; }
  // Whether the collectives take GPU (device) buffers: NCCL and colocated (edp/comm/nccl.h,
  // edp/comm/colocated.h). The MPI and self backends reduce host memory only.
  virtual bool device_buffers() const { return false; }
  // Whether a collective on device buffers is only enqueued on a GPU stream, so that the call
  // returns without waiting for the GPU and Request::wait() orders the caller's current stream
  // after it (NCCL). A backend that blocks the host while the GPU works (colocated: host
  // barriers between the ranks sharing a GPU) says false; callers that want overlap then call
  // it from another thread (DistributedDataParallel's communication thread).
  virtual bool stream_ordered() const { return false; }
  // What the backend can do with threads (see the file comment).
  virtual ThreadLevel thread_level() const = 0;

  // ---- blocking collectives on raw buffers ----
  // recv may equal send (in place). count may be 0 (pointers may then be null).
  virtual void allreduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op) = 0;
  virtual void broadcast(void* buf, int64_t count, DType dtype, int root) = 0;
  // recv holds size() * count elements, rank r's block at recv + r*count. In place when send
  // points at this rank's own block of recv.
  virtual void allgather(const void* send, void* recv, int64_t count, DType dtype) = 0;
  virtual void barrier() = 0;
  // send holds size() blocks of `count` elements; recv (count elements) gets block rank() reduced
  // over every rank. In place when recv is this rank's own block of send (send's other blocks are
  // then left undefined); recv must not overlap send otherwise. The reduction of block r is exactly the allreduce's
  // on that block where the backend reduces in rank order (the MPI backend on one host, the self
  // backend). The default allreduces a host copy and keeps this rank's block (device buffers: in
  // place only, the whole buffer allreduced in place); the MPI and NCCL backends reduce each block
  // once, on its own rank.
  virtual void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op);
  // Personalised exchange (host buffers): this rank sends send_counts[r] elements to rank r, the
  // blocks lying one after another in `send` in rank order, and receives recv_counts[r] elements
  // from rank r into `recv` the same way. Both vectors have size() entries; a rank's send count
  // to r must be r's receive count from it. Data only moves between the pairs that exchange
  // something (a rank holds its own blocks, never another pair's): the MPI backend sends point to
  // point; the others implement it for one rank only.
  virtual void alltoallv(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                         const std::vector<int64_t>& recv_counts, DType dtype);

  // ---- non-blocking variants (see "Progress" above) ----
  virtual Request iallreduce(const void* send, void* recv, int64_t count, DType dtype,
                             ReduceOp op) = 0;
  virtual Request ibroadcast(void* buf, int64_t count, DType dtype, int root) = 0;
  virtual Request iallgather(const void* send, void* recv, int64_t count, DType dtype) = 0;
  virtual Request ibarrier() = 0;

  // ---- new communicators (collective over this one) ----
  // Ranks with the same color form a communicator, ordered by (key, old rank). A negative
  // color (kNoColor) takes part in the split but gets nullptr.
  static constexpr int kNoColor = -1;
  virtual std::unique_ptr<Communicator> split(int color, int key) const = 0;
  // Same ranks, separate traffic: collectives on the copy never match those on the original.
  virtual std::unique_ptr<Communicator> dup() const = 0;

  // ---- Tensor conveniences: contiguous CPU tensors (the MPI backend reads host memory) ----
  void allreduce(Tensor& t, ReduceOp op = ReduceOp::Sum);
  void allreduce(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::Sum);  // same shape/dtype
  void broadcast(Tensor& t, int root = 0);
  // out: numel == size() * in.numel(), same dtype; e.g. shape [size, ...in.shape].
  void allgather(const Tensor& in, Tensor& out);
  Request iallreduce(Tensor& t, ReduceOp op = ReduceOp::Sum);
  Request ibroadcast(Tensor& t, int root = 0);

  // Typed single values (handy for loss sums, sample counts, flags).
  template <typename T>
  T allreduce_value(T v, ReduceOp op = ReduceOp::Sum) {
    allreduce(&v, &v, 1, dtype_of<T>::value, op);
    return v;
  }
};

// What the launcher told this process, read from the environment before (or without) MPI:
// Open MPI's OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}. Without them (a plain run
// without mpirun): rank 0 of 1, launched_by_mpirun false. Useful to pick a GPU before init.
struct LaunchInfo {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  bool launched_by_mpirun = false;
};
LaunchInfo launch_info();

struct EnvironmentOptions {
  // Asked of MPI, and the least accepted (see the file comment). Environment variable
  // EDP_COMM_THREAD_LEVEL (single|funneled|serialized|multiple) overrides `requested`.
  ThreadLevel requested = ThreadLevel::Multiple;
  ThreadLevel required = ThreadLevel::Serialized;
  // Print "edp: rank R of N failed: ..." and abort the whole job when std::terminate is
  // called (an exception escaping a thread, a throwing destructor).
  bool install_terminate_handler = true;
};

// Initialises the communication backend (MPI_Init_thread unless MPI is already initialised;
// without mpirun MPI starts as a singleton world of 1; a build without MPI gets a world of 1
// "self" communicator) and finalises it on destruction if it initialised it. One per process;
// create it at the top of main, or use run_main. Throws edp::Error if the thread level granted
// is below options.required, or if mpirun's variables disagree with the world MPI reports
// (the binary is linked against another MPI than the mpirun that started it).
class Environment {
 public:
  explicit Environment(int* argc = nullptr, char*** argv = nullptr, EnvironmentOptions options = {});
  ~Environment();
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;

  Communicator& world();
  ThreadLevel thread_level_granted() const { return granted_; }

 private:
  ThreadLevel granted_ = ThreadLevel::Single;
  bool owns_backend_ = false;
};

// The world communicator of the live Environment; throws if there is none.
Communicator& world();
bool initialized();

// This process's place in its job when that is not its place in MPI's world (after an elastic
// rescale: a grow's new ranks have a world of their own, a shrink leaves gaps). elastic::Job sets
// it whenever its communicator changes; abort_job's message and the log lines' prefix
// ("edp[r2/4]") read it.
void set_job_position(int rank, int size);

// Ends the whole job now: prints "edp: rank R of N failed: <what>" to stderr and aborts every
// rank (MPI_Abort) with exit code `code`. Safe to call from any thread; never returns.
[[noreturn]] void abort_job(const std::string& what, int code = 1);
// The same for an error every rank raises alike: its rank 0 prints it once ("edp: all N ranks
// failed: <what>") and ends the job; the other ranks wait for that, and print and abort
// themselves only if it has not come within 5 s (their rank 0 may be stuck elsewhere).
[[noreturn]] void abort_job(const CollectiveError& e, int code = 1);

// Runs fn(world) inside an Environment. An exception escaping fn on any rank ends the whole
// job through abort_job (non-zero exit, message naming the rank; an edp::CollectiveError once,
// from rank 0) instead of leaving the other ranks hanging in their next collective. Returns
// fn's return value otherwise.
int run_main(int argc, char** argv, const std::function<int(Communicator& world)>& fn,
             EnvironmentOptions options = {});

}  // namespace edp::comm
