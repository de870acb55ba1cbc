// The colocated communicator's CUDA half (see include/edp/comm/colocated.h for the algorithm):
// persistent CUDA-IPC staging buffers and inter-process events inside a GPU group, NCCL among
// one leader per GPU, host-memory MPI (the world communicator) for everything else.
//
// NCCL is loaded at run time (dlopen libnccl.so.2) rather than linked: a CUDA build of edp then
// needs no NCCL to build or to run on one GPU, and the error names the library when several GPU
// groups need it. Only nccl.h's types are used at compile time.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "edp/comm/colocated.h"
#include "edp/config.h"
#include "edp/core/error.h"
#include "edp/core/knobs.h"
#include "device_buffers.h"

#if __has_include(<nccl.h>)
#include <nccl.h>
#define EDP_COLOCATED_NCCL_HEADER 1
#else
#define EDP_COLOCATED_NCCL_HEADER 0
#endif

namespace edp::comm {

namespace {

using ::edp::detail::concat;

#define EDP_CUDA_OK(call)                                                                              \
  do {                                                                                                 \
    const cudaError_t edp_e_ = (call);                                                                 \
    if (edp_e_ != cudaSuccess)                                                                         \
      throw ::edp::Error(concat(__FILE__, ":", __LINE__, ": ", #call, " failed: ", cudaGetErrorString(edp_e_))); \
  } while (0)

constexpr int kMaxGroup = 48;  // MPS clients per GPU (Volta and later)

// ---- kernels -------------------------------------------------------------------------------------

template <typename T>
struct Peers {
  const T* p[kMaxGroup];
};

template <typename T>
__device__ T combine(T a, T b, int op) {
  if (op == 2) return a > b ? a : b;  // Max
  if (op == 3) return a < b ? a : b;  // Min
  return a + b;                       // Sum, Avg
}

// out[i] = in[i] (+) peers[0][i] (+) ... in rank order, so every run adds in the same order.
template <typename T>
__global__ void reduce_kernel(T* out, const T* in, Peers<T> peers, int npeers, int64_t n, int op) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    T acc = in[i];
    for (int j = 0; j < npeers; ++j) acc = combine(acc, peers.p[j][i], op);
    out[i] = acc;
  }
}

// Avg: a division, as the MPI backend does (exact for sums divisible by n; C++ semantics for
// integers).
template <typename T>
__global__ void divide_kernel(T* buf, int64_t n, T d) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    buf[i] = buf[i] / d;
}

unsigned grid_for(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096)); }

template <typename T>
void launch_reduce(void* out, const void* in, const std::vector<void*>& peers, int64_t off, int64_t n, ReduceOp op,
                   cudaStream_t s) {
  Peers<T> p{};
  for (size_t j = 0; j < peers.size(); ++j) p.p[j] = static_cast<const T*>(peers[j]);
  reduce_kernel<T><<<grid_for(n), 256, 0, s>>>(static_cast<T*>(out), static_cast<const T*>(in) + off, p,
                                               static_cast<int>(peers.size()), n, static_cast<int>(op));
}

void reduce(DType t, void* out, const void* in, const std::vector<void*>& peers, int64_t off, int64_t n, ReduceOp op,
            cudaStream_t s) {
  switch (t) {
    case DType::F32: launch_reduce<float>(out, in, peers, off, n, op, s); break;
    case DType::F64: launch_reduce<double>(out, in, peers, off, n, op, s); break;
    case DType::I32: launch_reduce<int32_t>(out, in, peers, off, n, op, s); break;
    case DType::I64: launch_reduce<int64_t>(out, in, peers, off, n, op, s); break;
    case DType::U8: launch_reduce<uint8_t>(out, in, peers, off, n, op, s); break;
    case DType::BF16: throw Error("colocated: bfloat16 reductions are not supported (reduce float32)");
  }
  EDP_CUDA_OK(cudaGetLastError());
}

void divide(DType t, void* buf, int64_t n, int d, cudaStream_t s) {
  switch (t) {
    case DType::F32: divide_kernel<float><<<grid_for(n), 256, 0, s>>>(static_cast<float*>(buf), n, float(d)); break;
    case DType::F64: divide_kernel<double><<<grid_for(n), 256, 0, s>>>(static_cast<double*>(buf), n, double(d)); break;
    case DType::I32: divide_kernel<int32_t><<<grid_for(n), 256, 0, s>>>(static_cast<int32_t*>(buf), n, int32_t(d)); break;
    case DType::I64: divide_kernel<int64_t><<<grid_for(n), 256, 0, s>>>(static_cast<int64_t*>(buf), n, int64_t(d)); break;
    case DType::U8: divide_kernel<uint8_t><<<grid_for(n), 256, 0, s>>>(static_cast<uint8_t*>(buf), n, uint8_t(d)); break;
    case DType::BF16: throw Error("colocated: bfloat16 averaging is not supported (reduce float32)");
  }
  EDP_CUDA_OK(cudaGetLastError());
}

// ---- NCCL, loaded at run time ----------------------------------------------------------------------

#if EDP_COLOCATED_NCCL_HEADER
struct Nccl {
  ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
  ncclResult_t (*init_rank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*destroy)(ncclComm_t) = nullptr;
  const char* (*error_string)(ncclResult_t) = nullptr;

  static const Nccl& get() {
    static Nccl n = [] {
      Nccl x;
      void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
      if (!lib) lib = dlopen("/usr/local/cuda/lib/libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
      if (!lib) return x;
      x.get_unique_id = reinterpret_cast<decltype(x.get_unique_id)>(dlsym(lib, "ncclGetUniqueId"));
      x.init_rank = reinterpret_cast<decltype(x.init_rank)>(dlsym(lib, "ncclCommInitRank"));
      x.all_reduce = reinterpret_cast<decltype(x.all_reduce)>(dlsym(lib, "ncclAllReduce"));
      x.destroy = reinterpret_cast<decltype(x.destroy)>(dlsym(lib, "ncclCommDestroy"));
      x.error_string = reinterpret_cast<decltype(x.error_string)>(dlsym(lib, "ncclGetErrorString"));
      return x;
    }();
    return n;
  }
  bool ok() const { return get_unique_id && init_rank && all_reduce && destroy && error_string; }
  void check(ncclResult_t r, const char* what) const {
    if (r != ncclSuccess) throw Error(concat("colocated communicator: ", what, " failed: ", error_string(r)));
  }
};

using detail::nccl_op;
using detail::nccl_type;
#endif

using detail::is_device_pointer;

struct Exchange {  // what every rank tells the others when the communicator is made
  char host[64];
  unsigned char uuid[16];
};

std::string uuid_string(const unsigned char* b) {
  char u[48];
  std::snprintf(u, sizeof u, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
                b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return u;
}

// A request that completed when it was made (see the class comment).
class DoneRequest final : public RequestImpl {
 public:
  bool test() override { return true; }
  void wait() override {}
};

// ---- the communicator --------------------------------------------------------------------------------

// Non-blocking calls complete before they return (the group barriers between chunks are host
// calls); DDP issues its collectives from a communication thread, which gives the overlap.
class ColocatedCommunicator final : public Communicator {
 public:
  ColocatedCommunicator(std::unique_ptr<Communicator> world, ColocatedOptions opt) : world_(std::move(world)) {
    opt.staging_bytes = static_cast<size_t>(
        knobs::get_int("EDP_COLOCATED_CHUNK_BYTES", static_cast<int64_t>(opt.staging_bytes)));
    EDP_CHECK(opt.staging_bytes >= 64, "colocated staging buffer of ", opt.staging_bytes, " bytes is too small");
    staging_bytes_ = opt.staging_bytes;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      cudaGetLastError();
      throw Error("the colocated communicator needs a CUDA device on every rank; this rank sees none");
    }
    EDP_CUDA_OK(cudaGetDevice(&device_));
    cudaDeviceProp prop{};
    EDP_CUDA_OK(cudaGetDeviceProperties(&prop, device_));
    int ipc_events = 0;
    cudaDeviceGetAttribute(&ipc_events, cudaDevAttrIpcEventSupport, device_);

    // Who shares which GPU: every rank's (host, GPU UUID).
    Exchange me{};
    gethostname(me.host, sizeof me.host - 1);
    std::memcpy(me.uuid, prop.uuid.bytes, 16);
    std::vector<Exchange> all(static_cast<size_t>(world_->size()));
    world_->allgather(&me, all.data(), sizeof(Exchange), DType::U8);
    std::vector<ColocationKey> keys;
    for (const auto& e : all) keys.push_back({std::string(e.host, strnlen(e.host, sizeof e.host)), uuid_string(e.uuid)});
    g_ = plan_colocated_groups(keys, world_->rank(), kMaxGroup);
    const int ok_ipc = world_->allreduce_value(g_.group_size == 1 || ipc_events ? 1 : 0, ReduceOp::Min);
    EDP_CHECK(ok_ipc, "a GPU shared by several ranks does not support IPC events (cudaDevAttrIpcEventSupport = 0)");
    group_ = world_->split(g_.group, world_->rank());

    // Persistent staging buffer and inter-process event of this rank; handles exchanged once.
    EDP_CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    EDP_CUDA_OK(cudaEventCreateWithFlags(&user_ev_, cudaEventDisableTiming));
    EDP_CUDA_OK(cudaMalloc(&staging_, staging_bytes_));
    EDP_CUDA_OK(cudaEventCreateWithFlags(&ev_, cudaEventDisableTiming | cudaEventInterprocess));
    struct Handles {
      cudaIpcMemHandle_t mem;
      cudaIpcEventHandle_t ev;
    } mine{}, *theirs = nullptr;
    std::vector<Handles> hs(static_cast<size_t>(g_.group_size));
    if (g_.group_size > 1) {
      EDP_CUDA_OK(cudaIpcGetMemHandle(&mine.mem, staging_));
      EDP_CUDA_OK(cudaIpcGetEventHandle(&mine.ev, ev_));
      group_->allgather(&mine, hs.data(), sizeof(Handles), DType::U8);
      theirs = hs.data();
    }
    if (g_.is_leader()) {  // the leader reads every member's staging buffer
      for (int j = 1; j < g_.group_size; ++j) open_peer(theirs[j]);
    } else {  // a member reads the leader's
      open_peer(theirs[0]);
    }

    // NCCL among the leaders, one per GPU.
    if (g_.num_groups > 1) {
#if EDP_COLOCATED_NCCL_HEADER
      leaders_ = world_->split(g_.is_leader() ? 0 : kNoColor, world_->rank());
      if (g_.is_leader()) {
        const Nccl& nccl = Nccl::get();
        EDP_CHECK(nccl.ok(), "the colocated communicator spans ", g_.num_groups,
                  " GPUs and needs NCCL among their leaders, but libnccl.so.2 could not be loaded (install NCCL or "
                  "add its directory to LD_LIBRARY_PATH)");
        ncclUniqueId id{};
        if (g_.leader_index == 0) nccl.check(nccl.get_unique_id(&id), "ncclGetUniqueId");
        leaders_->broadcast(&id, sizeof id, DType::U8, 0);
        nccl.check(nccl.init_rank(&nccl_, g_.num_groups, id, g_.leader_index), "ncclCommInitRank");
      }
#else
      throw Error("the colocated communicator spans several GPUs and needs NCCL, but edp was built without nccl.h");
#endif
    }
    world_->barrier();
  }

  ~ColocatedCommunicator() override {
    // Members close their mappings of the leader's buffer before the leader frees it.
    try {
      world_->barrier();
    } catch (...) {
    }
    for (void* p : peer_buf_) cudaIpcCloseMemHandle(p);
    for (cudaEvent_t e : peer_ev_) cudaEventDestroy(e);
    try {
      world_->barrier();
    } catch (...) {
    }
#if EDP_COLOCATED_NCCL_HEADER
    if (nccl_) Nccl::get().destroy(nccl_);
#endif
    if (staging_) cudaFree(staging_);
    if (ev_) cudaEventDestroy(ev_);
    if (user_ev_) cudaEventDestroy(user_ev_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return world_->rank(); }
  int size() const override { return world_->size(); }
  int local_rank() const override { return world_->local_rank(); }
  int local_size() const override { return world_->local_size(); }
  std::string backend() const override { return "colocated"; }
  bool device_buffers() const override { return true; }  // host-blocking: stream_ordered() is false
  ThreadLevel thread_level() const override { return world_->thread_level(); }

  void allreduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op) override {
    EDP_CHECK(count >= 0, "comm::allreduce: negative element count ", count);
    if (count == 0) return;
    const int dev = is_device_pointer(send) + is_device_pointer(recv);
    if (dev == 0) return world_->allreduce(send, recv, count, dtype, op);  // host buffers: MPI
    EDP_CHECK(dev == 2, "colocated allreduce: send and recv must both be device buffers or both host buffers");
    EDP_CUDA_OK(cudaSetDevice(device_));
    // Order after the caller's work on the legacy default stream.
    EDP_CUDA_OK(cudaEventRecord(user_ev_, cudaStreamLegacy));
    EDP_CUDA_OK(cudaStreamWaitEvent(stream_, user_ev_, 0));
    const size_t es = dtype_size(dtype);
    const auto steps = colocated_allreduce_steps(g_, op);
    for (const auto& [off, n] : colocated_chunks(count, es, staging_bytes_)) {
      const size_t bytes = static_cast<size_t>(n) * es;
      char* out = static_cast<char*>(recv) + static_cast<size_t>(off) * es;
      for (ColocatedStep s : steps) {
        switch (s) {
          case ColocatedStep::CopyToStaging:
            EDP_CUDA_OK(cudaMemcpyAsync(staging_, static_cast<const char*>(send) + static_cast<size_t>(off) * es, bytes,
                                        cudaMemcpyDeviceToDevice, stream_));
            EDP_CUDA_OK(cudaEventRecord(ev_, stream_));
            break;
          case ColocatedStep::GroupBarrier:
            if (g_.group_size > 1) group_->barrier();
            break;
          case ColocatedStep::LeaderReduce:
            for (cudaEvent_t e : peer_ev_) EDP_CUDA_OK(cudaStreamWaitEvent(stream_, e, 0));
            reduce(dtype, staging_, send, peer_buf_, off, n, op, stream_);
            break;
          case ColocatedStep::LeadersAllreduce: {
#if EDP_COLOCATED_NCCL_HEADER
            const Nccl& nccl = Nccl::get();
            nccl.check(nccl.all_reduce(staging_, staging_, static_cast<size_t>(n), nccl_type(dtype), nccl_op(op), nccl_,
                                       stream_),
                       "ncclAllReduce");
#endif
            break;
          }
          case ColocatedStep::Scale:
            divide(dtype, staging_, n, g_.world_size, stream_);
            break;
          case ColocatedStep::CopyResultOwn:
            EDP_CUDA_OK(cudaMemcpyAsync(out, staging_, bytes, cudaMemcpyDeviceToDevice, stream_));
            EDP_CUDA_OK(cudaEventRecord(ev_, stream_));
            break;
          case ColocatedStep::CopyResultLeader:
            EDP_CUDA_OK(cudaStreamWaitEvent(stream_, peer_ev_[0], 0));
            EDP_CUDA_OK(cudaMemcpyAsync(out, peer_buf_[0], bytes, cudaMemcpyDeviceToDevice, stream_));
            break;
        }
      }
    }
    // Blocking semantics, as the MPI backend: the result is in recv when this returns.
    EDP_CUDA_OK(cudaStreamSynchronize(stream_));
  }

  void broadcast(void* buf, int64_t count, DType dtype, int root) override {
    if (!is_device_pointer(buf)) return world_->broadcast(buf, count, dtype, root);
    std::vector<char> host(static_cast<size_t>(count) * dtype_size(dtype));
    EDP_CUDA_OK(cudaDeviceSynchronize());
    if (world_->rank() == root) EDP_CUDA_OK(cudaMemcpy(host.data(), buf, host.size(), cudaMemcpyDeviceToHost));
    world_->broadcast(host.data(), count, dtype, root);
    EDP_CUDA_OK(cudaMemcpy(buf, host.data(), host.size(), cudaMemcpyHostToDevice));
  }

  void allgather(const void* send, void* recv, int64_t count, DType dtype) override {
    if (!is_device_pointer(recv)) return world_->allgather(send, recv, count, dtype);
    const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
    std::vector<char> mine(bytes), all(bytes * static_cast<size_t>(size()));
    EDP_CUDA_OK(cudaDeviceSynchronize());
    EDP_CUDA_OK(cudaMemcpy(mine.data(), send, bytes, cudaMemcpyDeviceToHost));
    world_->allgather(mine.data(), all.data(), count, dtype);
    EDP_CUDA_OK(cudaMemcpy(recv, all.data(), all.size(), cudaMemcpyHostToDevice));
  }

  void barrier() override { world_->barrier(); }

  Request iallreduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op) override {
    allreduce(send, recv, count, dtype, op);
    return Request(std::make_unique<DoneRequest>());
  }
  Request ibroadcast(void* buf, int64_t count, DType dtype, int root) override {
    broadcast(buf, count, dtype, root);
    return Request(std::make_unique<DoneRequest>());
  }
  Request iallgather(const void* send, void* recv, int64_t count, DType dtype) override {
    allgather(send, recv, count, dtype);
    return Request(std::make_unique<DoneRequest>());
  }
  Request ibarrier() override {
    barrier();
    return Request(std::make_unique<DoneRequest>());
  }

  std::unique_ptr<Communicator> split(int color, int key) const override {
    auto sub = world_->split(color, key);
    if (!sub) return nullptr;
    return std::make_unique<ColocatedCommunicator>(std::move(sub), ColocatedOptions{staging_bytes_});
  }
  std::unique_ptr<Communicator> dup() const override {
    return std::make_unique<ColocatedCommunicator>(world_->dup(), ColocatedOptions{staging_bytes_});
  }

 private:
  template <typename H>
  void open_peer(const H& h) {
    void* p = nullptr;
    EDP_CUDA_OK(cudaIpcOpenMemHandle(&p, h.mem, cudaIpcMemLazyEnablePeerAccess));
    peer_buf_.push_back(p);
    cudaEvent_t e = nullptr;
    EDP_CUDA_OK(cudaIpcOpenEventHandle(&e, h.ev));
    peer_ev_.push_back(e);
  }

  std::unique_ptr<Communicator> world_, group_, leaders_;
  ColocatedGroups g_;
  size_t staging_bytes_ = 0;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ev_ = nullptr, user_ev_ = nullptr;
  void* staging_ = nullptr;
  std::vector<void*> peer_buf_;       // leader: members' staging; member: the leader's
  std::vector<cudaEvent_t> peer_ev_;  // the matching events
#if EDP_COLOCATED_NCCL_HEADER
  ncclComm_t nccl_ = nullptr;
#endif
};

}  // namespace

bool colocated_available() { return true; }

std::unique_ptr<Communicator> make_colocated_communicator(const Communicator& world, ColocatedOptions options) {
  return std::make_unique<ColocatedCommunicator>(world.dup(), options);
}

}  // namespace edp::comm
