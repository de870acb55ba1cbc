// The NCCL backend of edp::comm::Communicator (see include/edp/comm/nccl.h): one rank per GPU,
// bootstrapped over another communicator, collectives on a private non-blocking stream ordered
// against the caller's stream with events. The GPU-identity check that precedes NCCL is plain
// C++ and compiled in every build (it is unit-tested without a GPU); the rest needs CUDA and
// NCCL, and a build without them throws a clear error from make_nccl_communicator.
#include "edp/comm/nccl.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "edp/config.h"
#include "edp/core/process.h"
#include "edp/cuda/runtime.h"

namespace edp::comm {

// ---- the duplicate-GPU check (pure) ---------------------------------------------------------------
std::array<uint8_t, kGpuIdentityBytes> pack_gpu_identity(const GpuIdentity& g) {
  // Layout: uuid[16] | device int32 (little endian) [4] | pci_bus_id [28] | host [80]
  std::array<uint8_t, kGpuIdentityBytes> b{};
  std::memcpy(b.data(), g.uuid.data(), 16);
  const uint32_t dev = static_cast<uint32_t>(g.device);
  for (int i = 0; i < 4; ++i) b[16 + static_cast<size_t>(i)] = static_cast<uint8_t>(dev >> (8 * i));
  std::memcpy(b.data() + 20, g.pci_bus_id.data(), std::min<size_t>(g.pci_bus_id.size(), 27));
  std::memcpy(b.data() + 48, g.host.data(), std::min<size_t>(g.host.size(), 79));
  return b;
}

GpuIdentity unpack_gpu_identity(const uint8_t* b) {
  GpuIdentity g;
  std::memcpy(g.uuid.data(), b, 16);
  uint32_t dev = 0;
  for (int i = 0; i < 4; ++i) dev |= static_cast<uint32_t>(b[16 + i]) << (8 * i);
  g.device = static_cast<int32_t>(dev);
  const char* pci = reinterpret_cast<const char*>(b + 20);
  g.pci_bus_id.assign(pci, strnlen(pci, 28));
  const char* host = reinterpret_cast<const char*>(b + 48);
  g.host.assign(host, strnlen(host, 80));
  return g;
}

std::string duplicate_gpu_error(const std::vector<GpuIdentity>& ranks) {
  std::map<std::array<uint8_t, 16>, std::vector<int>> by_gpu;
  for (size_t r = 0; r < ranks.size(); ++r) by_gpu[ranks[r].uuid].push_back(static_cast<int>(r));
  // Report the GPU whose first rank is lowest, so that the message does not depend on UUIDs.
  const std::vector<int>* worst = nullptr;
  for (const auto& [uuid, rs] : by_gpu)
    if (rs.size() > 1 && (!worst || rs.front() < worst->front())) worst = &rs;
  if (!worst) return "";
  const GpuIdentity& g = ranks[static_cast<size_t>(worst->front())];
  std::string list;
  for (size_t i = 0; i < worst->size(); ++i)
    list += (i ? (i + 1 == worst->size() ? " and " : ", ") : "") + std::to_string((*worst)[i]);
  char uuid[40];
  std::snprintf(uuid, sizeof uuid, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                g.uuid[0], g.uuid[1], g.uuid[2], g.uuid[3], g.uuid[4], g.uuid[5], g.uuid[6], g.uuid[7],
                g.uuid[8], g.uuid[9], g.uuid[10], g.uuid[11], g.uuid[12], g.uuid[13], g.uuid[14], g.uuid[15]);
  return "the NCCL communicator runs one rank per GPU, but ranks " + list + " (of " +
         std::to_string(ranks.size()) + ") all use GPU " + g.pci_bus_id + " (GPU-" + uuid +
         ") on host " + g.host + ". To run several ranks on one GPU, launch with `edprun "
         "--ranks-per-gpu K`, which shares each GPU among K ranks (MPS) and reduces gradients "
         "without NCCL inside a GPU; otherwise start at most one rank per GPU (e.g. mpirun -np "
         "<number of GPUs>) and let each rank pick its own device (local rank, or "
         "CUDA_VISIBLE_DEVICES)";
}

std::vector<GpuIdentity> gather_gpu_identities(Communicator& world, int device) {
  const cuda::DeviceInfo info = cuda::device_info(device);
  GpuIdentity me;
  me.uuid = info.uuid;
  me.device = device;
  me.pci_bus_id = info.pci_bus_id;
  me.host = host_name();
  const auto packed = pack_gpu_identity(me);
  std::vector<uint8_t> all(static_cast<size_t>(kGpuIdentityBytes) * static_cast<size_t>(world.size()));
  world.allgather(packed.data(), all.data(), kGpuIdentityBytes, DType::U8);
  std::vector<GpuIdentity> ids;
  for (int r = 0; r < world.size(); ++r)
    ids.push_back(unpack_gpu_identity(all.data() + static_cast<size_t>(r) * kGpuIdentityBytes));
  return ids;
}

}  // namespace edp::comm

#if EDP_HAVE_CUDA && defined(EDP_HAVE_NCCL)
#include <nccl.h>

#include <exception>

#include "kernels/kernels.h"
#include "stall.h"
#include "cuda/check.h"
#include "comm/device_buffers.h"
#include "edp/core/process.h"
#include "edp/cuda/runtime.h"

#define NCCL_CHECK(call)                                                                         \
  do {                                                                                           \
    const ncclResult_t edp_nccl_r_ = (call);                                                     \
    if (edp_nccl_r_ != ncclSuccess)                                                              \
      throw_nccl_error(edp_nccl_r_, #call, __FILE__, __LINE__, nullptr);                         \
  } while (0)

namespace edp::comm {
namespace {
using cuda::detail::DeviceGuard;

[[noreturn]] void throw_nccl_error(ncclResult_t r, const char* call, const char* file, int line,
                                   ncclComm_t comm) {
  std::string msg = std::string(file) + ":" + std::to_string(line) + ": NCCL call `" + call +
                    "` failed: " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last && *last) msg += " (" + std::string(last) + ")";
  if (r == ncclSystemError || r == ncclRemoteError)
    msg += "; NCCL_DEBUG=INFO prints NCCL's own diagnosis";
  throw Error(msg);
}

using detail::is_device_pointer;
using detail::nccl_op;
using detail::nccl_type;

class NcclRequest : public RequestImpl {
 public:
  NcclRequest(cudaEvent_t done, cudaStream_t caller, ncclComm_t comm)
      : done_(done), caller_(caller), comm_(comm) {}
  ~NcclRequest() override {
    if (done_) (void)cudaEventDestroy(done_);
  }
  bool test() override {
    check_async();
    const cudaError_t e = cudaEventQuery(done_);
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    CUDA_CHECK(e);
    CUDA_CHECK(cudaStreamWaitEvent(caller_, done_, 0));
    return true;
  }
  void wait() override {
    check_async();
    CUDA_CHECK(cudaStreamWaitEvent(caller_, done_, 0));
  }

 private:
  void check_async() {
    ncclResult_t r = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm_, &r));
    if (r != ncclSuccess && r != ncclInProgress)
      throw_nccl_error(r, "asynchronous collective", __FILE__, __LINE__, comm_);
  }
  cudaEvent_t done_;
  cudaStream_t caller_;
  ncclComm_t comm_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::unique_ptr<Communicator> boot, ncclComm_t comm, int device)
      : boot_(std::move(boot)), comm_(comm), device_(device) {
    DeviceGuard g(device_);
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
    NCCL_CHECK(ncclCommCount(comm_, &size_));
    EDP_CHECK(rank_ == boot_->rank() && size_ == boot_->size(), "nccl: NCCL's rank ", rank_, " of ",
              size_, " differs from the bootstrap communicator's ", boot_->rank(), " of ", boot_->size());
  }

  ~NcclCommunicator() override {
    detail::forget_device_ops(this);
    try {
      DeviceGuard g(device_);
      if (std::uncaught_exceptions() > 0) {
        (void)ncclCommAbort(comm_);  // peers may never arrive: do not wait for them
      } else {
        (void)cudaStreamSynchronize(stream_);
        (void)ncclCommDestroy(comm_);
      }
      (void)cudaStreamDestroy(stream_);
    } catch (...) {
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return boot_->local_rank(); }
  int local_size() const override { return boot_->local_size(); }
  std::string backend() const override { return "nccl"; }
  bool device_buffers() const override { return true; }
  bool stream_ordered() const override { return true; }
  ThreadLevel thread_level() const override { return ThreadLevel::Serialized; }

  void allreduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op) override {
    Request r = iallreduce(send, recv, count, dtype, op);
    r.wait();
  }
  void broadcast(void* buf, int64_t count, DType dtype, int root) override {
    Request r = ibroadcast(buf, count, dtype, root);
    r.wait();
  }
  void allgather(const void* send, void* recv, int64_t count, DType dtype) override {
    Request r = iallgather(send, recv, count, dtype);
    r.wait();
  }
  void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op) override {
    check_count(count, "reduce_scatter");
    const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
    Request r = run({"reduce_scatter", count, dtype}, send, bytes * static_cast<size_t>(size_), recv, bytes,
                    [&](const void* s, void* d) {
                      NCCL_CHECK(ncclReduceScatter(s, d, static_cast<size_t>(count), nccl_type(dtype), nccl_op(op),
                                                   comm_, stream_));
                      if (op == ReduceOp::Avg && size_ > 1)
                        cuda::kern::divide(d, static_cast<int>(dtype), count, size_, stream_);
                    });
    r.wait();
  }
  void barrier() override {
    {
      DeviceGuard g(device_);
      CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    check_async();
    boot_->barrier();
  }

  Request iallreduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op) override {
    check_count(count, "allreduce");
    const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
    return run({"allreduce", count, dtype}, send, bytes, recv, bytes, [&](const void* s, void* r) {
      NCCL_CHECK(ncclAllReduce(s, r, static_cast<size_t>(count), nccl_type(dtype), nccl_op(op), comm_, stream_));
      if (op == ReduceOp::Avg && size_ > 1)
        cuda::kern::divide(r, static_cast<int>(dtype), count, size_, stream_);
    });
  }

  Request ibroadcast(void* buf, int64_t count, DType dtype, int root) override {
    check_count(count, "broadcast");
    EDP_CHECK(root >= 0 && root < size_, "nccl broadcast: root ", root, " outside [0, ", size_, ")");
    const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
    return run({"broadcast", count, dtype}, buf, bytes, buf, bytes, [&](const void* s, void* r) {
      NCCL_CHECK(ncclBroadcast(s, r, static_cast<size_t>(count), nccl_type(dtype), root, comm_, stream_));
    });
  }

  Request iallgather(const void* send, void* recv, int64_t count, DType dtype) override {
    check_count(count, "allgather");
    const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
    // In place when send is this rank's block of recv: stage only recv in that case.
    const bool in_place = send == static_cast<const char*>(recv) + static_cast<size_t>(rank_) * bytes;
    return run({"allgather", count, dtype}, in_place ? nullptr : send, bytes, recv, bytes * static_cast<size_t>(size_),
               [&](const void* s, void* r) {
                 const void* src = s ? s : static_cast<const char*>(r) + static_cast<size_t>(rank_) * bytes;
                 NCCL_CHECK(ncclAllGather(src, r, static_cast<size_t>(count), nccl_type(dtype), comm_, stream_));
               });
  }

  Request ibarrier() override {
    barrier();
    return Request();
  }

  std::unique_ptr<Communicator> split(int color, int key) const override {
    std::unique_ptr<Communicator> boot = boot_->split(color, key);
    DeviceGuard g(device_);
    ncclComm_t nc = nullptr;
    NCCL_CHECK(ncclCommSplit(comm_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &nc, nullptr));
    if (color < 0) return nullptr;
    EDP_CHECK(nc != nullptr && boot != nullptr, "nccl split: no communicator for color ", color);
    return std::make_unique<NcclCommunicator>(std::move(boot), nc, device_);
  }

  std::unique_ptr<Communicator> dup() const override { return split(0, rank_); }

 private:
  static void check_count(int64_t count, const char* op) {
    EDP_CHECK(count >= 0, "nccl ", op, ": negative count ", count);
  }

  void check_async() const {
    ncclResult_t r = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm_, &r));
    if (r != ncclSuccess && r != ncclInProgress)
      throw_nccl_error(r, "asynchronous collective", __FILE__, __LINE__, comm_);
  }

  // Runs enqueue(send', recv') on the NCCL stream. Device buffers are used in place and the
  // returned Request orders the caller's stream after the collective. Host buffers are staged
  // through device memory and the call completes before returning. send may be null (in place).
  struct What {
    const char* op;
    int64_t count;
    DType dtype;
  };
  template <typename F>
  Request run(What what, const void* send, size_t send_bytes, void* recv, size_t recv_bytes, F&& enqueue) {
    if (recv_bytes == 0) return Request();
    check_async();
    DeviceGuard g(device_);
    const cudaStream_t caller = static_cast<cudaStream_t>(cuda::current_stream(device_));
    const bool device_bufs = is_device_pointer(recv) && (!send || is_device_pointer(send));
    if (device_bufs) {
      cudaEvent_t ready, done;
      CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
      CUDA_CHECK(cudaEventRecord(ready, caller));
      CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
      CUDA_CHECK(cudaEventDestroy(ready));  // released once recorded work completes
      enqueue(send, recv);
      CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
      CUDA_CHECK(cudaEventRecord(done, stream_));
      watch(what);
      return Request(std::make_unique<NcclRequest>(done, caller, comm_));
    }
    EDP_CHECK(!is_device_pointer(recv) && !(send && is_device_pointer(send)), "nccl: send and receive "
              "buffers must both be in device memory or both in host memory");
    // Host buffers: stage on the NCCL stream, wait for the result.
    cuda::StreamGuard sg(device_, stream_);
    Tensor dsend, drecv({static_cast<int64_t>(recv_bytes)}, DType::U8, Device::cuda(device_));
    if (send) {
      dsend = Tensor({static_cast<int64_t>(send_bytes)}, DType::U8, Device::cuda(device_));
      CUDA_CHECK(cudaMemcpyAsync(dsend.raw(), send, send_bytes, cudaMemcpyHostToDevice, stream_));
    }
    else  // in-place allgather: this rank's block of recv is the input
      CUDA_CHECK(cudaMemcpyAsync(drecv.raw(), recv, recv_bytes, cudaMemcpyHostToDevice, stream_));
    enqueue(send ? dsend.raw() : nullptr, drecv.raw());
    CUDA_CHECK(cudaMemcpyAsync(recv, drecv.raw(), recv_bytes, cudaMemcpyDeviceToHost, stream_));
    watch(what);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    check_async();
    return Request();
  }

  // The stall inspector (comm/stall.h): an event recorded after the collective, polled by the
  // watchdog thread; on a stall it aborts the communicator (ncclCommAbort) before the job ends.
  // The watchdog owns its event (recorded on the NCCL stream after the collective), so the
  // Request may destroy its own at any time.
  void watch(const What& what) {
    cudaEvent_t own;
    CUDA_CHECK(cudaEventCreateWithFlags(&own, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(own, stream_));
    auto ev = std::shared_ptr<CUevent_st>(own, [](cudaEvent_t e) { (void)cudaEventDestroy(e); });
    const int dev = device_;
    ncclComm_t c = comm_;
    detail::watch_device_op(
        this, what.op, "nccl", what.count, what.dtype,
        [ev, dev] {
          (void)cudaSetDevice(dev);
          const cudaError_t e = cudaEventQuery(ev.get());
          if (e == cudaErrorNotReady) {
            (void)cudaGetLastError();
            return false;
          }
          return true;  // done, or failed (the failure surfaces on the job's own threads)
        },
        [c] { (void)ncclCommAbort(c); });
  }

  std::unique_ptr<Communicator> boot_;
  ncclComm_t comm_;
  int device_;
  cudaStream_t stream_ = nullptr;
  int rank_ = 0, size_ = 1;
};

}  // namespace

bool nccl_available() { return cuda::available(); }

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "?";
  // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9
  return std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device) {
  EDP_CHECK(cuda::available(), "make_nccl_communicator: ", cuda::unavailable_reason());
  std::unique_ptr<Communicator> boot = bootstrap.dup();
  const int ndev = cuda::device_count();
  if (device < 0) device = boot->local_rank() % ndev;
  EDP_CHECK(device < ndev, "make_nccl_communicator: cuda:", device, " requested but ", ndev,
            " device(s) are visible");
  cuda::set_device(device);

  // Refuse two ranks on one GPU with a clear message, on every rank alike.
  const std::string dup = duplicate_gpu_error(gather_gpu_identities(*boot, device));
  if (!dup.empty()) throw Error("make_nccl_communicator: " + dup);

  ncclUniqueId id{};
  static_assert(sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES, "ncclUniqueId size");
  if (boot->rank() == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  boot->broadcast(&id, static_cast<int64_t>(sizeof id), DType::U8, 0);
  ncclComm_t comm = nullptr;
  {
    DeviceGuard g(device);
    const ncclResult_t r = ncclCommInitRank(&comm, boot->size(), id, boot->rank());
    if (r != ncclSuccess) throw_nccl_error(r, "ncclCommInitRank", __FILE__, __LINE__, nullptr);
  }
  return std::make_unique<NcclCommunicator>(std::move(boot), comm, device);
}

}  // namespace edp::comm

#else  // no CUDA or no NCCL ----------------------------------------------------------------------------

namespace edp::comm {
bool nccl_available() { return false; }
std::string nccl_version() { return ""; }
std::unique_ptr<Communicator> make_nccl_communicator(Communicator&, int) {
  throw Error(
      "make_nccl_communicator: this build of edp has no NCCL (it needs the CUDA backend and NCCL: "
      "install NCCL or point NCCL_ROOT at it and reconfigure); use the MPI communicator");
}
}  // namespace edp::comm
#endif
