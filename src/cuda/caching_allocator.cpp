// The caching device allocator's bookkeeping (see src/cuda/caching_allocator.h). Plain
// C++: compiled in every build, tested with a fake raw backend on machines without a GPU.
#include "cuda/caching_allocator.h"

#include <algorithm>
#include <cstdio>

#include "edp/core/error.h"

namespace edp::cuda {

namespace {
std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) {
    b /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}
}  // namespace

bool CachingAllocator::BlockLess::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
}

CachingAllocator::CachingAllocator(std::unique_ptr<RawDeviceMemory> raw, std::string name)
    : raw_(std::move(raw)), name_(std::move(name)) {
  EDP_CHECK(raw_ != nullptr, "CachingAllocator needs a raw memory backend");
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    process_pending(true);
    release_cached_segments();
  } catch (...) {
    // Destruction must not throw; a device that is already gone keeps its memory anyway.
  }
  for (Pool* pool : {&small_pool_, &large_pool_})
    for (Block* b : *pool) delete b;
  for (auto& [p, b] : live_) delete b;
}

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes == 0) return kRound;
  return (bytes + kRound - 1) / kRound * kRound;
}

size_t CachingAllocator::segment_size(size_t rounded) {
  if (rounded <= kSmallRequest) return kSmallSegment;
  if (rounded < kMediumRequest) return kMediumSegment;
  return (rounded + kLargeRound - 1) / kLargeRound * kLargeRound;
}

CachingAllocator::Block* CachingAllocator::find_free(Pool& pool, size_t size, StreamId stream) {
  Block key;
  key.stream = stream;
  key.size = size;
  key.ptr = nullptr;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

// Cuts b down to `size`; returns the remainder (a new free block right after b in its segment).
CachingAllocator::Block* CachingAllocator::split(Block* b, size_t size) {
  Block* rest = new Block;
  rest->ptr = static_cast<char*>(b->ptr) + size;
  rest->size = b->size - size;
  rest->stream = b->stream;
  rest->small = b->small;
  rest->prev = b;
  rest->next = b->next;
  if (b->next) b->next->prev = rest;
  b->next = rest;
  b->size = size;
  ++stats_.splits;
  return rest;
}

void CachingAllocator::insert_free(Block* b) {
  Pool& pool = pool_of(b->small);
  auto is_free = [](const Block* n) { return n && !n->allocated && !n->pending; };
  if (is_free(b->prev)) {
    Block* p = b->prev;
    pool.erase(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    delete b;
    b = p;
    ++stats_.merges;
  }
  if (is_free(b->next)) {
    Block* n = b->next;
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    delete n;
    ++stats_.merges;
  }
  pool.insert(b);
}

void CachingAllocator::process_pending(bool wait) {
  for (size_t i = 0; i < pending_.size();) {
    PendingEvent pe = pending_[i];
    bool done;
    if (wait) {
      raw_->event_wait(pe.event);
      done = true;
    } else {
      done = raw_->event_done(pe.event);
    }
    if (!done) {
      ++i;
      continue;
    }
    raw_->event_release(pe.event);
    pending_[i] = pending_.back();
    pending_.pop_back();
    Block* b = pe.block;
    if (--b->events_left == 0) {
      b->pending = false;
      live_.erase(reinterpret_cast<uintptr_t>(b->ptr));
      --stats_.pending_frees;
      insert_free(b);
    }
  }
}

void CachingAllocator::release_cached_segments() {
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev || b->next) {
        ++it;
        continue;
      }
      it = pool->erase(it);
      raw_->raw_free(b->ptr, b->size);
      segments_.erase(b->ptr);
      stats_.reserved_bytes -= static_cast<int64_t>(b->size);
      ++stats_.raw_frees;
      delete b;
    }
  }
}

void* CachingAllocator::allocate(size_t bytes, StreamId stream) {
  const size_t size = round_size(bytes);
  const bool small = size <= kSmallRequest;
  std::lock_guard<std::mutex> lock(mu_);
  process_pending(false);
  Pool& pool = pool_of(small);
  Block* b = find_free(pool, size, stream);
  if (b) {
    ++stats_.cache_hits;
  } else {
    const size_t seg = segment_size(size);
    void* p = raw_->raw_alloc(seg);
    if (!p) {
      // Out of memory: first let blocks waiting on other streams come back, then give every
      // wholly free segment back to the device and ask again.
      ++stats_.oom_retries;
      process_pending(true);
      b = find_free(pool, size, stream);
      if (!b) {
        release_cached_segments();
        p = raw_->raw_alloc(seg);
      }
      if (!b && !p) {
        size_t free_b = 0, total_b = 0;
        raw_->mem_info(free_b, total_b);
        throw Error("out of GPU memory on " + name_ + ": cannot reserve " +
                    human_bytes(static_cast<double>(seg)) + " for a request of " +
                    human_bytes(static_cast<double>(bytes)) + "; edp has " +
                    human_bytes(static_cast<double>(stats_.allocated_bytes)) +
                    " in use and " + human_bytes(static_cast<double>(stats_.reserved_bytes)) +
                    " reserved" +
                    (total_b ? ", the device reports " + human_bytes(static_cast<double>(free_b)) +
                                   " free of " + human_bytes(static_cast<double>(total_b))
                             : std::string()) +
                    ". Reduce the batch size or the model, or free tensors that are no longer needed");
      }
    }
    if (b) {
      ++stats_.cache_hits;
    } else {
      b = new Block;
      b->ptr = p;
      b->size = seg;
      b->stream = stream;
      b->small = small;
      segments_[p] = seg;
      stats_.reserved_bytes += static_cast<int64_t>(seg);
      stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
      ++stats_.raw_allocs;
      ++stats_.cache_misses;
    }
  }
  b->allocated = true;  // before the split: the remainder must not merge back into b
  const size_t rest = b->size - size;
  if (small ? rest >= kRound : rest > kSmallRequest) insert_free(split(b, size));
  b->requested = bytes;
  live_[reinterpret_cast<uintptr_t>(b->ptr)] = b;
  stats_.allocated_bytes += static_cast<int64_t>(b->size);
  stats_.requested_bytes += static_cast<int64_t>(bytes);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return b->ptr;
}

void CachingAllocator::free(void* p) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(p));
  EDP_CHECK(it != live_.end() && it->second->allocated, "CachingAllocator(", name_,
            "): free of a pointer that is not an allocated block (double free?)");
  Block* b = it->second;
  b->allocated = false;
  stats_.allocated_bytes -= static_cast<int64_t>(b->size);
  stats_.requested_bytes -= static_cast<int64_t>(b->requested);
  if (b->other_streams.empty()) {
    live_.erase(it);
    insert_free(b);
    return;
  }
  b->pending = true;
  ++stats_.pending_frees;
  for (StreamId s : b->other_streams) {
    pending_.push_back({raw_->record_event(s), b});
    ++b->events_left;
  }
  b->other_streams.clear();
}

void CachingAllocator::record_stream(void* p, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  Block* b = find_live(p);
  EDP_CHECK(b && b->allocated, "CachingAllocator(", name_,
            "): record_stream on a pointer that is not inside an allocated block");
  if (stream == b->stream) return;
  if (std::find(b->other_streams.begin(), b->other_streams.end(), stream) == b->other_streams.end())
    b->other_streams.push_back(stream);
}

CachingAllocator::Block* CachingAllocator::find_live(void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = live_.upper_bound(a);
  if (it == live_.begin()) return nullptr;
  --it;
  Block* b = it->second;
  return a < it->first + b->size ? b : nullptr;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  process_pending(true);
  release_cached_segments();
}

DeviceAllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  DeviceAllocatorStats s = stats_;
  s.cached_bytes = s.reserved_bytes - s.allocated_bytes;
  return s;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

int64_t CachingAllocator::segment_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(segments_.size());
}

}  // namespace edp::cuda
