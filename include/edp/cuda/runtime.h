// The CUDA device runtime as the rest of edp sees it: device discovery and selection, streams
// and events, the caching allocator's statistics, pinned host memory and asynchronous
// host→device uploads, and the TF32 switch. No CUDA header is included: streams and events are
// opaque handles, so CPU-only code (and a build without CUDA, where available() is false and the
// rest throws) can include this file.
//
// Streams. Every edp op enqueues its work on the *current stream* of the tensor's device: by
// default the legacy default stream (so work is ordered with anything else a program does on
// it, e.g. plain cudaMemcpy); StreamGuard switches it for the calling thread. Work on other
// streams (the NCCL communication stream, the upload copy stream) is ordered with events.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "edp/core/tensor.h"

namespace edp::cuda {

// The caching device allocator's counters (src/cuda/caching_allocator.h has the policy).
struct DeviceAllocatorStats {
  int64_t allocated_bytes = 0;       // in blocks handed out (rounded sizes)
  int64_t requested_bytes = 0;       // as asked for
  int64_t reserved_bytes = 0;        // in segments obtained from the device
  int64_t cached_bytes = 0;          // reserved - allocated: held for reuse (incl. pending)
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  int64_t raw_allocs = 0;            // cudaMalloc calls
  int64_t raw_frees = 0;             // cudaFree calls
  int64_t cache_hits = 0;            // requests served from a cached block
  int64_t cache_misses = 0;          // requests that needed a new segment
  int64_t splits = 0, merges = 0;
  int64_t pending_frees = 0;         // blocks waiting for events of other streams
  int64_t oom_retries = 0;           // times the cache was released to satisfy a request
};

using StreamHandle = void*;  // a cudaStream_t; nullptr is the legacy default stream

// ---- devices ---------------------------------------------------------------------------------
// True when this build has the CUDA backend and at least one device is visible. Never throws.
bool available();
// Why available() is false ("no CUDA device: cudaGetDeviceCount: no CUDA-capable device is
// detected", "this build of edp has no CUDA backend"); empty when it is true.
std::string unavailable_reason();
int device_count();  // 0 when unavailable

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  size_t total_memory = 0;
  std::string pci_bus_id;            // "0000:3b:00.0"
  std::array<uint8_t, 16> uuid{};    // globally unique
  std::string uuid_str() const;      // "GPU-xxxxxxxx-xxxx-..."
};
DeviceInfo device_info(int device);

void set_device(int device);
int current_device();
// Blocks the host until all work on `device` finished (all devices when -1).
void synchronize(int device = -1);

// ---- streams and events ----------------------------------------------------------------------
StreamHandle current_stream(int device);
// Makes `stream` the current stream of `device` for this thread while alive.
class StreamGuard {
 public:
  StreamGuard(int device, StreamHandle stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  StreamHandle prev_;
};

// An owned non-blocking stream (does not synchronise with the legacy default stream).
class Stream {
 public:
  explicit Stream(int device);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  StreamHandle handle() const { return s_; }
  int device() const { return device_; }
  void synchronize();

 private:
  int device_;
  StreamHandle s_ = nullptr;
};

class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(StreamHandle stream);
  // Makes `stream` wait (on the device) until this event has completed.
  void block(StreamHandle stream) const;
  bool query() const;  // completed?
  void synchronize() const;
  // Milliseconds between `start` and this event (both recorded with timing = true).
  float elapsed_ms(const Event& start) const;
  void* handle() const { return e_; }

 private:
  void* e_ = nullptr;
};

// ---- memory ----------------------------------------------------------------------------------
DeviceAllocatorStats allocator_stats(int device);
void reset_peak_stats(int device);
// Gives every cached, wholly free segment back to the device (cudaFree).
void empty_cache(int device = -1);
// The block of device tensor `t` will also be used on `stream`: it is not reused after t is
// freed until the work enqueued on `stream` by then has completed.
void record_stream(const Tensor& t, StreamHandle stream);
// Debug aid for tests: every new device allocation is filled with 0xFF bytes (NaN for floats,
// -1 for integers) so that elements an op forgets to write are caught. Also EDP_CUDA_POISON=1.
void set_alloc_poison(bool on);

// Page-locked host memory (cudaHostAlloc), required for truly asynchronous copies.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  void* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

// Host→device copies for the data-loader path: the CPU batch is copied into a pinned staging
// slot, then cudaMemcpyAsync on a private copy stream moves it to the device while the compute
// stream keeps working; the compute stream waits for the copy through an event, the host never
// does (except to reuse a staging slot whose previous copy is still running). The returned
// tensor may be used at once by any op on the device's current stream.
class AsyncUploader {
 public:
  explicit AsyncUploader(Device device, int slots = 3);
  ~AsyncUploader();
  AsyncUploader(const AsyncUploader&) = delete;
  AsyncUploader& operator=(const AsyncUploader&) = delete;
  Tensor upload(const Tensor& cpu);
  Device device() const { return device_; }

 private:
  struct Impl;
  Device device_;
  std::unique_ptr<Impl> impl_;
};

// ---- math modes ------------------------------------------------------------------------------
// TF32 tensor-core math for float32 matrix products and convolutions: on by default, off with
// EDP_TF32=0 or set_tf32(false). TF32 keeps 10 mantissa bits in the products (relative error
// ~1e-3); sums stay float32.
bool tf32_enabled();
void set_tf32(bool on);

}  // namespace edp::cuda
