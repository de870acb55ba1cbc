// The backend-neutral half of edp::comm: Request, Tensor conveniences, the launcher's
// environment, Environment / world(), and the failure path (abort_job, run_main, the terminate
// handler) that turns one rank's exception into a clean job-wide exit instead of a hang.
#include "edp/comm/communicator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "backend.h"
#include "edp/core/knobs.h"
#include "edp/core/log.h"
#include "edp/core/threads.h"

namespace edp::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

const char* thread_level_name(ThreadLevel t) {
  switch (t) {
    case ThreadLevel::Single: return "MPI_THREAD_SINGLE";
    case ThreadLevel::Funneled: return "MPI_THREAD_FUNNELED";
    case ThreadLevel::Serialized: return "MPI_THREAD_SERIALIZED";
    case ThreadLevel::Multiple: return "MPI_THREAD_MULTIPLE";
  }
  return "?";
}

// ---- Request ------------------------------------------------------------------------------

Request& Request::operator=(Request&& o) {
  if (this != &o) {
    if (impl_) impl_->wait();
    impl_ = std::move(o.impl_);
  }
  return *this;
}

Request::~Request() {
  if (!impl_) return;
  // While unwinding, waiting could hang on peers that will never arrive; the job is going down
  // (run_main aborts it), so the operation is abandoned instead.
  if (std::uncaught_exceptions() > 0) {
    (void)impl_.release();
    return;
  }
  try {
    impl_->wait();
  } catch (const std::exception& e) {
    log::error("a non-blocking collective failed while its Request was destroyed: ", e.what());
  }
}

bool Request::test() {
  if (!impl_) return true;
  if (!impl_->test()) return false;
  impl_.reset();
  return true;
}

void Request::wait() {
  if (!impl_) return;
  impl_->wait();
  impl_.reset();
}

void Communicator::reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op) {
  EDP_CHECK(count >= 0, "comm::reduce_scatter: negative element count ", count);
  const size_t block_bytes = static_cast<size_t>(count) * dtype_size(dtype);
  if (device_buffers()) {
    // Device memory: only in place (recv is this rank's block of send, whose other blocks may be
    // overwritten): the whole buffer allreduced in place leaves the reduced block where it belongs.
    EDP_CHECK(recv == static_cast<const char*>(send) + block_bytes * static_cast<size_t>(rank()),
              "comm::reduce_scatter on the '", backend(), "' communicator: only in place (recv: this rank's block of send)");
    allreduce(send, const_cast<void*>(send), count * size(), dtype, op);
    return;
  }
  const size_t es = dtype_size(dtype), block = static_cast<size_t>(count) * es;
  std::vector<char> all(block * static_cast<size_t>(size()));
  allreduce(send, all.data(), count * size(), dtype, op);
  if (block > 0) std::memcpy(recv, all.data() + block * static_cast<size_t>(rank()), block);
}

void Communicator::alltoallv(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                             const std::vector<int64_t>& recv_counts, DType dtype) {
  EDP_CHECK(size() == 1, "comm::alltoallv is not implemented on the '", backend(), "' communicator");
  EDP_CHECK(send_counts.size() == 1 && recv_counts.size() == 1 && send_counts[0] == recv_counts[0] && send_counts[0] >= 0,
            "comm::alltoallv: one rank sends itself what it receives");
  if (send_counts[0] > 0) std::memmove(recv, send, static_cast<size_t>(send_counts[0]) * dtype_size(dtype));
}

// ---- Tensor conveniences ------------------------------------------------------------------

namespace {
// Host tensors for every backend; GPU tensors for the NCCL backend (edp/comm/nccl.h).
void check_host(const Communicator& c, const Tensor& t, const char* op) {
  EDP_CHECK(t.defined(), "comm::", op, ": the tensor is undefined");
  EDP_CHECK(t.device().is_cpu() || c.device_buffers(), "comm::", op, ": tensor ", t.str(),
            " is not in host memory; the ", c.backend(), " communicator reduces host buffers (copy it "
            "with .to(Device::cpu()) first, or use the NCCL or colocated communicator for GPU tensors)");
}
}  // namespace

void Communicator::allreduce(Tensor& t, ReduceOp op) {
  check_host(*this, t, "allreduce");
  allreduce(t.raw(), t.raw(), t.numel(), t.dtype(), op);
}

void Communicator::allreduce(const Tensor& in, Tensor& out, ReduceOp op) {
  check_host(*this, in, "allreduce");
  check_host(*this, out, "allreduce");
  check_same_shape(in, out, "comm::allreduce(in, out)");
  EDP_CHECK_SHAPE(in.dtype() == out.dtype(), "comm::allreduce(in, out): dtypes differ (",
                  dtype_name(in.dtype()), " vs ", dtype_name(out.dtype()), ")");
  allreduce(in.raw(), out.raw(), in.numel(), in.dtype(), op);
}

void Communicator::broadcast(Tensor& t, int root) {
  check_host(*this, t, "broadcast");
  broadcast(t.raw(), t.numel(), t.dtype(), root);
}

void Communicator::allgather(const Tensor& in, Tensor& out) {
  check_host(*this, in, "allgather");
  check_host(*this, out, "allgather");
  EDP_CHECK_SHAPE(in.dtype() == out.dtype(), "comm::allgather: dtypes differ (",
                  dtype_name(in.dtype()), " vs ", dtype_name(out.dtype()), ")");
  EDP_CHECK_SHAPE(out.numel() == in.numel() * size(), "comm::allgather: out ", out.shape().str(),
                  " must hold size() * in.numel() = ", size(), " * ", in.numel(), " elements");
  allgather(in.raw(), out.raw(), in.numel(), in.dtype());
}

Request Communicator::iallreduce(Tensor& t, ReduceOp op) {
  check_host(*this, t, "iallreduce");
  return iallreduce(t.raw(), t.raw(), t.numel(), t.dtype(), op);
}

Request Communicator::ibroadcast(Tensor& t, int root) {
  check_host(*this, t, "ibroadcast");
  return ibroadcast(t.raw(), t.numel(), t.dtype(), root);
}

// ---- helpers shared by backends -----------------------------------------------------------

namespace detail {

template <typename T>
static void divide_typed(void* buf, int64_t count, int n) {
  T* p = static_cast<T*>(buf);
  const T d = static_cast<T>(n);
  for (int64_t i = 0; i < count; ++i) p[i] = p[i] / d;
}

void divide_inplace(void* buf, int64_t count, DType dtype, int n) {
  if (n == 1 || count == 0) return;
  switch (dtype) {
    case DType::F32: divide_typed<float>(buf, count, n); break;
    case DType::F64: divide_typed<double>(buf, count, n); break;
    case DType::I32: divide_typed<int32_t>(buf, count, n); break;
    case DType::I64: divide_typed<int64_t>(buf, count, n); break;
    case DType::U8: divide_typed<uint8_t>(buf, count, n); break;
    case DType::BF16: throw Error("comm: averaging bfloat16 buffers is not supported (reduce float32)");
  }
}

int64_t max_chunk_elements(int64_t backend_limit) {
  return std::min<int64_t>(knobs::get_int("EDP_COMM_MAX_CHUNK", backend_limit), backend_limit);
}

ThreadLevel parse_thread_level(const std::string& s) {
  if (s == "single") return ThreadLevel::Single;
  if (s == "funneled") return ThreadLevel::Funneled;
  if (s == "serialized") return ThreadLevel::Serialized;
  if (s == "multiple") return ThreadLevel::Multiple;
  throw Error("EDP_COMM_THREAD_LEVEL='" + s +
              "' is not one of single, funneled, serialized, multiple");
}

}  // namespace detail

// ---- launcher environment -----------------------------------------------------------------

namespace {
}  // namespace

LaunchInfo launch_info() {
  const knobs::OmpiWorld w = knobs::ompi_world();
  LaunchInfo li;
  li.rank = w.rank >= 0 ? w.rank : 0;
  li.size = w.size > 0 ? w.size : 1;
  li.local_rank = w.local_rank >= 0 ? w.local_rank : 0;
  li.local_size = w.local_size > 0 ? w.local_size : 1;
  li.launched_by_mpirun = w.present();
  return li;
}

// ---- Environment / world ------------------------------------------------------------------

namespace {
std::mutex g_mu;
std::unique_ptr<Communicator> g_world;
std::atomic<bool> g_aborting{false};
std::atomic<int64_t> g_job_position{-1};  // set_job_position: rank << 32 | size; -1: none

void position(int& rank, int& size) {
  rank = -1;
  size = -1;
  if (const int64_t p = g_job_position.load(); p >= 0) {
    rank = static_cast<int>(p >> 32);
    size = static_cast<int>(p & 0xffffffff);
    return;
  }
#if EDP_HAVE_MPI
  detail::mpi_world_position(rank, size);
#endif
  if (rank < 0) {
    const LaunchInfo li = launch_info();
    rank = li.rank;
    size = li.size;
  }
}

void terminate_handler() {
  std::string what = "std::terminate called";
  if (auto ep = std::current_exception()) {
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = std::string("uncaught exception: ") + e.what();
    } catch (...) {
      what = "uncaught exception of unknown type";
    }
  }
  abort_job(what, 1);
}
}  // namespace

Environment::Environment(int* argc, char*** argv, EnvironmentOptions options) {
  std::lock_guard<std::mutex> lock(g_mu);
  EDP_CHECK(!g_world, "an edp::comm::Environment already exists in this process; create one at "
                      "the top of main");
  if (knobs::is_set("EDP_COMM_THREAD_LEVEL"))
    options.requested = detail::parse_thread_level(knobs::get_string("EDP_COMM_THREAD_LEVEL"));
  if (options.install_terminate_handler) std::set_terminate(terminate_handler);
  apply_launch_binding();  // before MPI starts its threads
  // EDP_NUM_THREADS (or the cores this process may use) for OpenMP and Eigen from the start: a
  // program that never asks num_threads() ran its first parallel ops at OpenMP's own default,
  // every core of an unbound rank (2 ranks on 2 cores: 2.3x slower steps, measured).
  (void)num_threads();
#if EDP_HAVE_MPI
  detail::BackendInit init = detail::mpi_init(argc, argv, options);
  g_world = std::move(init.world);
  granted_ = init.granted;
  owns_backend_ = init.owns;
#else
  const LaunchInfo li = launch_info();
  EDP_CHECK(li.size == 1, "this process was started by mpirun as rank ", li.rank, " of ", li.size,
            ", but this build of edp has no MPI (configure with an MPI installed, EDP_MPI=ON)");
  g_world = detail::make_self_communicator();
  granted_ = ThreadLevel::Multiple;
#endif
}

Environment::~Environment() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_world.reset();
#if EDP_HAVE_MPI
  if (owns_backend_) detail::mpi_finalize();
#endif
}

Communicator& Environment::world() { return comm::world(); }

void set_job_position(int rank, int size) {
  EDP_CHECK(rank >= 0 && size > 0 && rank < size, "set_job_position: rank ", rank, " of ", size);
  g_job_position = static_cast<int64_t>(rank) << 32 | static_cast<int64_t>(size);
  log::set_rank(rank, size);
}

Communicator& world() {
  EDP_CHECK(g_world != nullptr,
            "edp::comm::world() needs a live edp::comm::Environment (create one at the top of "
            "main, or use edp::comm::run_main)");
  return *g_world;
}

bool initialized() { return g_world != nullptr; }

namespace {
// Whether mpirun, a grow's spawn or srun started this process (their variables are set), rather
// than a shell running it alone. Read when the program is loaded: a singleton's MPI_Init sets
// some of them itself.
const bool g_started_by_launcher = [] {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(v)) return true;
  return false;
}();

[[noreturn]] void abort_with(const std::string& message, int code) {
  // One message per process even if several threads fail at once. Written directly (not through
  // edp::log): the cause of an abort is shown whatever EDP_LOG_LEVEL says.
  if (!g_aborting.exchange(true)) std::fprintf(stderr, "edp: %s\n", message.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
#if EDP_HAVE_MPI
  // A process that no launcher started (MPI's singleton world of 1) has no other rank to end:
  // MPI_Abort would only add its banner (and Open MPI's show-help noise) under the message.
  if (g_started_by_launcher) detail::mpi_abort(code);
#endif
  std::_Exit(code);
}
}  // namespace

void abort_job(const std::string& what, int code) {
  int rank = 0, size = 1;
  position(rank, size);
  abort_with(::edp::detail::concat("rank ", rank, " of ", size, " failed: ", what), code);
}

void abort_job(const CollectiveError& e, int code) {
  if (e.size() > 1 && e.rank() == 0) abort_with(::edp::detail::concat("all ", e.size(), " ranks failed: ", e.what()), code);
  // Rank 0 reports it, and its abort ends this process; only if that does not come does this
  // rank say it itself.
  if (e.size() > 1) std::this_thread::sleep_for(std::chrono::seconds(5));
  abort_with(::edp::detail::concat("rank ", e.rank(), " of ", e.size(), " failed: ", e.what()), code);
}

int run_main(int argc, char** argv, const std::function<int(Communicator& world)>& fn,
             EnvironmentOptions options) {
  std::unique_ptr<Environment> env;
  int rc = 0;
  // The Environment must outlive the catch: finalising MPI while the other ranks wait in a
  // collective would hang them; abort_job ends everyone instead.
  try {
    env = std::make_unique<Environment>(&argc, &argv, options);
    rc = fn(env->world());
  } catch (const std::exception& e) {
#if EDP_HAVE_MPI
    // A rank started by a grow that fails during its setup abandons the grow; the running ranks
    // go on without it (an abort here would end them too).
    if (env && detail::mpi_unjoined()) {
      std::fprintf(stderr, "edp: a rank started by a grow failed before it joined the job: %s\n", e.what());
      detail::mpi_ready(env->world(), false);
    }
#endif
    if (const auto* c = dynamic_cast<const CollectiveError*>(&e)) abort_job(*c, 1);
    abort_job(e.what(), 1);
  } catch (...) {
    abort_job("exception of unknown type", 1);
  }
#if EDP_HAVE_MPI
  detail::mpi_exit_code(rc);  // the exit code should finalising end the process (a spawn left stuck)
#endif
  return rc;
}

}  // namespace edp::comm
