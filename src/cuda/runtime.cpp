// The CUDA device runtime (include/edp/cuda/runtime.h): error reporting, devices, streams and
// events, one caching allocator per device on cudaMalloc/cudaFree, the DeviceHooks that give
// edp::Tensor its CUDA storage, pinned memory and the asynchronous uploader. A build without
// CUDA compiles the small stub at the end instead (available() is false, the rest throws). Just
// past 600 lines on purpose: the stub mirrors the real functions and stays beside them.
#include "edp/cuda/runtime.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "edp/config.h"
#include "edp/core/knobs.h"
#include "edp/core/log.h"

#if EDP_HAVE_CUDA
#include <atomic>
#include <cmath>
#include <mutex>
#include <vector>

#include "cuda/caching_allocator.h"
#include "cuda/check.h"
#include "cuda/cublas.h"
#include "core/device_hooks.h"
#include "kernels/kernels.h"

namespace edp::cuda {
using detail::DeviceGuard;

// ---- errors --------------------------------------------------------------------------------------
namespace detail {

namespace {
bool sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
      return true;
    default:
      return false;
  }
}

bool sync_after_launch() {
  static const bool on = knobs::get_bool("EDP_CUDA_SYNC");
  return on;
}
}  // namespace

void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  std::string msg = std::string(file) + ":" + std::to_string(line) + ": CUDA call `" + call +
                    "` failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  if (sticky(e))
    msg += ". A kernel failed on the device and the CUDA context is no longer usable; the "
           "failing kernel may be an earlier one: rerun with EDP_CUDA_SYNC=1 (synchronise after "
           "every edp kernel) or CUDA_LAUNCH_BLOCKING=1 to find it";
  else if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorUnsupportedPtxVersion)
    msg += ". This build of edp has no code for this GPU: reconfigure with "
           "-DCMAKE_CUDA_ARCHITECTURES=<the GPU's compute capability, e.g. 90>";
  else if (e == cudaErrorInsufficientDriver)
    msg += ". The NVIDIA driver is older than the CUDA runtime edp was built with";
  else
    (void)cudaGetLastError();  // clear a non-sticky error so later calls are not confused
  throw Error(msg);
}

void throw_cublas_error(cublasStatus_t s, const char* call, const char* file, int line) {
  throw Error(std::string(file) + ":" + std::to_string(line) + ": cuBLAS call `" + call +
              "` failed: " + lazy::cublasGetStatusName(s) + " (" + lazy::cublasGetStatusString(s) + ")");
}

void check_launch(const char* kernel, const char* file, int line) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess && sync_after_launch()) e = cudaDeviceSynchronize();
  if (e != cudaSuccess)
    throw_cuda_error(e, (std::string("launch of ") + kernel).c_str(), file, line);
}

int sm_count(int device) {
  static std::mutex mu;
  static std::vector<int> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (device >= static_cast<int>(cache.size())) cache.resize(static_cast<size_t>(device) + 1, 0);
  int& v = cache[static_cast<size_t>(device)];
  if (v == 0) CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device));
  return v;
}

int sm_count_current() {
  int d = 0;
  CUDA_CHECK(cudaGetDevice(&d));
  return sm_count(d);
}

}  // namespace detail

// ---- devices ---------------------------------------------------------------------------------------
namespace {

constexpr int kMaxDevices = 64;

struct Discovery {
  int count = 0;
  std::string reason;
};

const Discovery& discovery() {
  static const Discovery d = [] {
    Discovery r;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      r.reason = std::string("no CUDA device: cudaGetDeviceCount failed: ") + cudaGetErrorName(e) +
                 " (" + cudaGetErrorString(e) + ")";
    } else if (n == 0) {
      r.reason = "no CUDA device: cudaGetDeviceCount found 0 devices";
    } else {
      r.count = std::min(n, kMaxDevices);
    }
    return r;
  }();
  return d;
}

void check_device(int device) {
  const Discovery& d = discovery();
  EDP_CHECK(d.count > 0, d.reason);
  EDP_CHECK(device >= 0 && device < d.count, "cuda:", device, " requested but ", d.count,
            " CUDA device(s) are visible (CUDA_VISIBLE_DEVICES selects which)");
}

thread_local StreamHandle t_current_stream[kMaxDevices] = {};

cudaStream_t stream_of(int device) { return static_cast<cudaStream_t>(t_current_stream[device]); }

// ---- the raw memory behind each device's caching allocator -------------------------------------
class CudaRawMemory : public RawDeviceMemory {
 public:
  explicit CudaRawMemory(int device) : device_(device) {}
  ~CudaRawMemory() override {
    for (cudaEvent_t e : free_events_) (void)cudaEventDestroy(e);
  }
  void* raw_alloc(size_t bytes) override {
    DeviceGuard g(device_);
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    CUDA_CHECK(e);
    return p;
  }
  void raw_free(void* p, size_t) override {
    DeviceGuard g(device_);
    CUDA_CHECK(cudaFree(p));
  }
  void* record_event(StreamId stream) override {
    DeviceGuard g(device_);
    cudaEvent_t e;
    if (!free_events_.empty()) {
      e = free_events_.back();
      free_events_.pop_back();
    } else {
      CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
    CUDA_CHECK(cudaEventRecord(e, reinterpret_cast<cudaStream_t>(stream)));
    return e;
  }
  bool event_done(void* event) override {
    const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    CUDA_CHECK(e);
    return true;
  }
  void event_wait(void* event) override { CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event))); }
  void event_release(void* event) override { free_events_.push_back(static_cast<cudaEvent_t>(event)); }
  void mem_info(size_t& free_bytes, size_t& total_bytes) override {
    DeviceGuard g(device_);
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      free_bytes = total_bytes = 0;
    }
  }

 private:
  int device_;
  std::vector<cudaEvent_t> free_events_;
};

// One allocator per device, created on first use and never destroyed: tensors may be freed
// during static destruction, after which the CUDA context may already be gone.
CachingAllocator& allocator(int device) {
  static std::mutex mu;
  static CachingAllocator* allocs[kMaxDevices] = {};
  check_device(device);
  std::lock_guard<std::mutex> lock(mu);
  if (!allocs[device])
    allocs[device] = new CachingAllocator(std::make_unique<CudaRawMemory>(device),
                                          "cuda:" + std::to_string(device));
  return *allocs[device];
}

std::atomic<int> g_poison{-1};  // -1: not yet read from EDP_CUDA_POISON

bool poison_enabled() {
  int v = g_poison.load();
  if (v < 0) {
    v = knobs::get_bool("EDP_CUDA_POISON") ? 1 : 0;
    g_poison.store(v);
  }
  return v == 1;
}

std::atomic<int> g_tf32{-1};

// ---- the DeviceHooks of edp::Tensor ----------------------------------------------------------------
void* hook_alloc(size_t bytes, int device) {
  CachingAllocator& a = allocator(device);
  const cudaStream_t s = stream_of(device);
  void* p = a.allocate(bytes, reinterpret_cast<StreamId>(s));
  if (poison_enabled() && bytes) {
    DeviceGuard g(device);
    CUDA_CHECK(cudaMemsetAsync(p, 0xFF, bytes, s));
  }
  return p;
}

void hook_free(void* p, size_t, int device) {
  // Called from Storage's destructor: must not throw.
  try {
    allocator(device).free(p);
  } catch (const std::exception& e) {
    log::warn("freeing device memory on cuda:", device, " failed: ", e.what());
  }
}

void hook_copy(void* dst, Device dd, const void* src, Device sd, size_t bytes) {
  if (bytes == 0) return;
  if (dd.is_cuda() && sd.is_cpu()) {
    // From pageable host memory the call returns once the source has been staged, so the
    // caller may free or change it right away; ordered on the destination's current stream.
    DeviceGuard g(dd.index);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_of(dd.index)));
  } else if (dd.is_cpu() && sd.is_cuda()) {
    DeviceGuard g(sd.index);
    const cudaStream_t s = stream_of(sd.index);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));  // the caller reads dst next
  } else if (dd == sd) {
    DeviceGuard g(dd.index);
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_of(dd.index)));
  } else {
    // Between two GPUs: let the source's pending work finish, copy on the destination's
    // stream, and finish the copy before returning (rare path: correctness over overlap).
    {
      DeviceGuard g(sd.index);
      CUDA_CHECK(cudaStreamSynchronize(stream_of(sd.index)));
    }
    DeviceGuard g(dd.index);
    CUDA_CHECK(cudaMemcpyPeerAsync(dst, dd.index, src, sd.index, bytes, stream_of(dd.index)));
    CUDA_CHECK(cudaStreamSynchronize(stream_of(dd.index)));
  }
}

void hook_fill(void* p, DType t, int64_t n, double value, int device) {
  if (n <= 0) return;
  DeviceGuard g(device);
  const cudaStream_t s = stream_of(device);
  const size_t es = dtype_size(t);
  if (value == 0.0) {  // +0.0 and -0.0 alike: all-zero bits for every dtype
    if (!std::signbit(value)) {
      CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<size_t>(n) * es, s));
      return;
    }
  }
  uint64_t pattern = 0;
  switch (t) {
    case DType::F32: { const float v = static_cast<float>(value); std::memcpy(&pattern, &v, 4); break; }
    case DType::F64: { std::memcpy(&pattern, &value, 8); break; }
    case DType::I32: { const int32_t v = static_cast<int32_t>(value); std::memcpy(&pattern, &v, 4); break; }
    case DType::I64: { const int64_t v = static_cast<int64_t>(value); std::memcpy(&pattern, &v, 8); break; }
    case DType::U8: { const uint8_t v = static_cast<uint8_t>(value); std::memcpy(&pattern, &v, 1); break; }
    case DType::BF16: throw Error("fill: a bfloat16 device tensor can only be zero-filled");
  }
  kern::fill(p, static_cast<int>(es), pattern, n, s);
}

// Registered at load time. The linker keeps this file whenever any CUDA op or runtime function
// is used (they all call into it), which is what makes device tensors work.
const bool g_registered = [] {
  DeviceHooks h;
  h.alloc = hook_alloc;
  h.free = hook_free;
  h.copy = hook_copy;
  h.fill = hook_fill;
  register_device_hooks(h);
  return true;
}();

}  // namespace

bool available() { return g_registered && discovery().count > 0; }
std::string unavailable_reason() { return discovery().reason; }
int device_count() { return discovery().count; }

std::string DeviceInfo::uuid_str() const {
  char buf[64];
  const uint8_t* u = uuid.data();
  std::snprintf(buf, sizeof buf,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                u[14], u[15]);
  return buf;
}

DeviceInfo device_info(int device) {
  check_device(device);
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  DeviceInfo d;
  d.index = device;
  d.name = prop.name;
  d.sm_count = prop.multiProcessorCount;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.total_memory = prop.totalGlobalMem;
  char bus[32] = {};
  CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, device));
  d.pci_bus_id = bus;
  static_assert(sizeof(prop.uuid.bytes) == 16, "cudaUUID_t is 16 bytes");
  std::memcpy(d.uuid.data(), prop.uuid.bytes, 16);
  return d;
}

void set_device(int device) {
  check_device(device);
  CUDA_CHECK(cudaSetDevice(device));
}

int current_device() {
  int d = 0;
  CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void synchronize(int device) {
  if (device < 0) {
    for (int d = 0; d < device_count(); ++d) synchronize(d);
    return;
  }
  check_device(device);
  DeviceGuard g(device);
  CUDA_CHECK(cudaDeviceSynchronize());
}

// ---- streams and events --------------------------------------------------------------------------------
StreamHandle current_stream(int device) {
  check_device(device);
  return t_current_stream[device];
}

StreamGuard::StreamGuard(int device, StreamHandle stream) : device_(device) {
  check_device(device);
  prev_ = t_current_stream[device];
  t_current_stream[device] = stream;
}

StreamGuard::~StreamGuard() { t_current_stream[device_] = prev_; }

Stream::Stream(int device) : device_(device) {
  check_device(device);
  DeviceGuard g(device);
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  s_ = s;
}

Stream::~Stream() {
  if (s_) {
    (void)cudaStreamSynchronize(static_cast<cudaStream_t>(s_));
    (void)cudaStreamDestroy(static_cast<cudaStream_t>(s_));
  }
}

void Stream::synchronize() { CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(s_))); }

Event::Event(bool timing) {
  cudaEvent_t e;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  e_ = e;
}

Event::~Event() {
  if (e_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(e_));
}

void Event::record(StreamHandle stream) {
  CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(e_), static_cast<cudaStream_t>(stream)));
}

void Event::block(StreamHandle stream) const {
  CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(e_), 0));
}

bool Event::query() const {
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(e_));
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  CUDA_CHECK(e);
  return true;
}

void Event::synchronize() const { CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(e_))); }

float Event::elapsed_ms(const Event& start) const {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.e_), static_cast<cudaEvent_t>(e_)));
  return ms;
}

// ---- memory -------------------------------------------------------------------------------------------
DeviceAllocatorStats allocator_stats(int device) { return allocator(device).stats(); }
void reset_peak_stats(int device) { allocator(device).reset_peak_stats(); }

void empty_cache(int device) {
  if (device < 0) {
    for (int d = 0; d < device_count(); ++d) empty_cache(d);
    return;
  }
  allocator(device).empty_cache();
}

void record_stream(const Tensor& t, StreamHandle stream) {
  EDP_CHECK(t.defined() && t.device().is_cuda(), "record_stream: ", t.defined() ? t.str() : "undefined tensor",
            " is not a CUDA tensor");
  if (t.nbytes() == 0) return;
  allocator(t.device().index).record_stream(t.raw(), reinterpret_cast<StreamId>(stream));
}

void set_alloc_poison(bool on) { g_poison.store(on ? 1 : 0); }

PinnedBuffer::PinnedBuffer(size_t bytes) : n_(bytes) {
  if (bytes) CUDA_CHECK(cudaHostAlloc(&p_, bytes, cudaHostAllocDefault));
}

PinnedBuffer::~PinnedBuffer() {
  if (p_) (void)cudaFreeHost(p_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept : p_(o.p_), n_(o.n_) {
  o.p_ = nullptr;
  o.n_ = 0;
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) (void)cudaFreeHost(p_);
    p_ = o.p_;
    n_ = o.n_;
    o.p_ = nullptr;
    o.n_ = 0;
  }
  return *this;
}

struct AsyncUploader::Impl {
  struct Slot {
    PinnedBuffer buf;
    cudaEvent_t done = nullptr;
    bool used = false;
  };
  int device = 0;
  cudaStream_t copy = nullptr;
  std::vector<Slot> slots;
  size_t next = 0;
};

AsyncUploader::AsyncUploader(Device device, int slots) : device_(device), impl_(std::make_unique<Impl>()) {
  EDP_CHECK(device.is_cuda(), "AsyncUploader: ", device.str(), " is not a CUDA device");
  EDP_CHECK(slots >= 1, "AsyncUploader: needs at least one staging slot");
  check_device(device.index);
  DeviceGuard g(device.index);
  impl_->device = device.index;
  CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->copy, cudaStreamNonBlocking));
  impl_->slots.resize(static_cast<size_t>(slots));
  for (auto& s : impl_->slots) CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
}

AsyncUploader::~AsyncUploader() {
  if (!impl_) return;
  (void)cudaStreamSynchronize(impl_->copy);
  for (auto& s : impl_->slots)
    if (s.done) (void)cudaEventDestroy(s.done);
  impl_->slots.clear();  // frees the pinned buffers
  (void)cudaStreamDestroy(impl_->copy);
}

Tensor AsyncUploader::upload(const Tensor& cpu) {
  EDP_CHECK(cpu.defined() && cpu.device().is_cpu(), "AsyncUploader.upload: expected a CPU tensor, got ",
            cpu.defined() ? cpu.str() : "an undefined tensor");
  const int dev = impl_->device;
  DeviceGuard g(dev);
  const size_t bytes = cpu.nbytes();
  Impl::Slot& slot = impl_->slots[impl_->next];
  impl_->next = (impl_->next + 1) % impl_->slots.size();
  if (slot.used) CUDA_CHECK(cudaEventSynchronize(slot.done));  // its previous copy has read it
  if (slot.buf.size() < bytes) slot.buf = PinnedBuffer(std::max(bytes, 2 * slot.buf.size()));
  if (bytes) std::memcpy(slot.buf.data(), cpu.raw(), bytes);
  const cudaStream_t compute = stream_of(dev);
  // The destination is allocated in the copy stream's pool (its first user) and announced to
  // the compute stream, so it is not reused before the compute work that reads it is done.
  Tensor dst;
  {
    StreamGuard sg(dev, impl_->copy);
    dst = Tensor(cpu.shape(), cpu.dtype(), device_);
  }
  record_stream(dst, compute);
  if (bytes)
    CUDA_CHECK(cudaMemcpyAsync(dst.raw(), slot.buf.data(), bytes, cudaMemcpyHostToDevice, impl_->copy));
  CUDA_CHECK(cudaEventRecord(slot.done, impl_->copy));
  slot.used = true;
  CUDA_CHECK(cudaStreamWaitEvent(compute, slot.done, 0));
  return dst;
}

// ---- math modes ------------------------------------------------------------------------------------
bool tf32_enabled() {
  int v = g_tf32.load();
  if (v < 0) {
    v = knobs::get_bool("EDP_TF32") ? 1 : 0;
    g_tf32.store(v);
  }
  return v == 1;
}

void set_tf32(bool on) { g_tf32.store(on ? 1 : 0); }

}  // namespace edp::cuda

#else  // !EDP_HAVE_CUDA ---------------------------------------------------------------------------

namespace edp::cuda {
namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw Error(std::string(what) +
              ": this build of edp has no CUDA backend (configure with -DEDP_CUDA=ON on a "
              "machine with nvcc)");
}
bool g_tf32 = true;
}  // namespace

bool available() { return false; }
std::string unavailable_reason() {
  return "no CUDA device: this build of edp has no CUDA backend (EDP_CUDA=OFF or no nvcc)";
}
int device_count() { return 0; }
std::string DeviceInfo::uuid_str() const { return "GPU-?"; }
DeviceInfo device_info(int) { no_cuda("device_info"); }
void set_device(int) { no_cuda("set_device"); }
int current_device() { no_cuda("current_device"); }
void synchronize(int) {}
StreamHandle current_stream(int) { no_cuda("current_stream"); }
StreamGuard::StreamGuard(int device, StreamHandle) : device_(device), prev_(nullptr) { no_cuda("StreamGuard"); }
StreamGuard::~StreamGuard() = default;
Stream::Stream(int device) : device_(device) { no_cuda("Stream"); }
Stream::~Stream() = default;
void Stream::synchronize() {}
Event::Event(bool) { no_cuda("Event"); }
Event::~Event() = default;
void Event::record(StreamHandle) {}
void Event::block(StreamHandle) const {}
bool Event::query() const { return true; }
void Event::synchronize() const {}
float Event::elapsed_ms(const Event&) const { return 0; }
DeviceAllocatorStats allocator_stats(int) { no_cuda("allocator_stats"); }
void reset_peak_stats(int) { no_cuda("reset_peak_stats"); }
void empty_cache(int) {}
void record_stream(const Tensor&, StreamHandle) { no_cuda("record_stream"); }
void set_alloc_poison(bool) {}
PinnedBuffer::PinnedBuffer(size_t) { no_cuda("PinnedBuffer"); }
PinnedBuffer::~PinnedBuffer() = default;
PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept : p_(o.p_), n_(o.n_) {}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&&) noexcept { return *this; }
struct AsyncUploader::Impl {};
AsyncUploader::AsyncUploader(Device device, int) : device_(device) { no_cuda("AsyncUploader"); }
AsyncUploader::~AsyncUploader() = default;
Tensor AsyncUploader::upload(const Tensor&) { no_cuda("AsyncUploader.upload"); }
bool tf32_enabled() { return g_tf32; }
void set_tf32(bool on) { g_tf32 = on; }

}  // namespace edp::cuda

#endif  // EDP_HAVE_CUDA
