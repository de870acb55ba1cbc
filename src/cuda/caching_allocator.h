// The bookkeeping of edp's stream-ordered caching device allocator, with the raw memory behind
// an interface so that the whole policy runs (and is tested) on a CPU with a fake backend; the
// CUDA backend (src/cuda/runtime.cpp) plugs in cudaMalloc/cudaFree and CUDA events.
//
// Why: cudaMalloc/cudaFree synchronise the device and cost tens to hundreds of microseconds; a
// training step allocates the same activation sizes every iteration. After the first step every
// request is served from the cache, so the steady state makes no raw allocation at all.
//
// Policy:
//   - Sizes are rounded up to 512 bytes. Requests up to 1 MiB come from the small pool, carved
//     out of 2 MiB segments; larger ones from the large pool: 20 MiB segments for requests under
//     10 MiB, else the request rounded up to 2 MiB. (Separate pools keep small, short-lived
//     blocks from fragmenting the large segments.)
//   - Best fit: the smallest cached block of the same stream and pool that is large enough; it
//     is split when the remainder is worth keeping (>= 512 B small pool, > 1 MiB large pool).
//     A freed block merges with free neighbours of its segment.
//   - Stream order: a block belongs to the stream it was allocated on. Freeing it makes it
//     reusable at once for later work on that stream (the device runs a stream's work in order).
//     A block also used on other streams must be announced with record_stream(); its free then
//     waits for events recorded on those streams at free time before the block is reused.
//   - Out of memory: wait for pending events, release all cached segments, try again; then throw
//     edp::Error with the sizes involved.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "edp/cuda/runtime.h"

namespace edp::cuda {

using StreamId = uintptr_t;  // a cudaStream_t as an integer (0: the legacy default stream)

// What the allocator needs from the device. Implementations must be thread-compatible: the
// allocator calls them under its own lock.
class RawDeviceMemory {
 public:
  virtual ~RawDeviceMemory() = default;
  // nullptr when the device is out of memory (other failures throw).
  virtual void* raw_alloc(size_t bytes) = 0;
  virtual void raw_free(void* p, size_t bytes) = 0;
  // An event recorded now on `stream`; event_done polls it, event_wait blocks the host until it
  // completed; event_release gives it back (the backend may pool events).
  virtual void* record_event(StreamId stream) = 0;
  virtual bool event_done(void* event) = 0;
  virtual void event_wait(void* event) = 0;
  virtual void event_release(void* event) = 0;
  // Bytes free on the device and in total, for out-of-memory messages (0, 0 when unknown).
  virtual void mem_info(size_t& free_bytes, size_t& total_bytes) { free_bytes = total_bytes = 0; }
};

class CachingAllocator {
 public:
  static constexpr size_t kRound = 512;
  static constexpr size_t kSmallRequest = 1 << 20;     // <= this: small pool
  static constexpr size_t kSmallSegment = 2 << 20;
  static constexpr size_t kMediumRequest = 10 << 20;   // < this: a 20 MiB segment
  static constexpr size_t kMediumSegment = 20 << 20;
  static constexpr size_t kLargeRound = 2 << 20;

  // `name` appears in error messages ("cuda:0").
  CachingAllocator(std::unique_ptr<RawDeviceMemory> raw, std::string name);
  ~CachingAllocator();  // releases cached segments; blocks still handed out are leaked
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (0 allowed: a minimal block), 512-byte aligned when the raw
  // backend's pointers are. Throws edp::Error when the device is out of memory.
  void* allocate(size_t bytes, StreamId stream);
  // Returns a block from allocate(); unknown pointers throw edp::Error.
  void free(void* p);
  // The block holding p (any address inside it) will also be used on `stream` (no-op for the
  // block's own stream).
  void record_stream(void* p, StreamId stream);
  // Releases every cached segment that is entirely free (waits for pending events first).
  void empty_cache();

  DeviceAllocatorStats stats() const;
  void reset_peak_stats();
  // The block size a request of `bytes` gets and the segment a miss of that size reserves.
  static size_t round_size(size_t bytes);
  static size_t segment_size(size_t rounded);
  // Segments currently reserved (for tests: the fragmentation picture).
  int64_t segment_count() const;

 private:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;
    size_t requested = 0;
    StreamId stream = 0;
    bool small = false;
    bool allocated = false;
    bool pending = false;  // freed, waiting for events
    Block* prev = nullptr;  // neighbours within the segment
    Block* next = nullptr;
    std::vector<StreamId> other_streams;
    int events_left = 0;
  };
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockLess>;

  Block* find_free(Pool& pool, size_t size, StreamId stream);
  Block* split(Block* b, size_t size);
  void insert_free(Block* b);  // merges with free neighbours
  void process_pending(bool wait);
  void release_cached_segments();
  void* raw_alloc_or_retry(size_t seg, size_t request);
  Pool& pool_of(bool small) { return small ? small_pool_ : large_pool_; }

  std::unique_ptr<RawDeviceMemory> raw_;
  std::string name_;
  mutable std::mutex mu_;
  Pool small_pool_, large_pool_;
  Block* find_live(void* p);  // the allocated or pending block containing p, or null
  std::map<uintptr_t, Block*> live_;  // allocated (and pending) blocks by address
  struct PendingEvent {
    void* event;
    Block* block;
  };
  std::vector<PendingEvent> pending_;
  std::map<void*, size_t> segments_;  // segment base → size
  DeviceAllocatorStats stats_;
};

}  // namespace edp::cuda
