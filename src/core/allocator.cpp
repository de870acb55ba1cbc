// The caching host allocator (see allocator.h).
#include "edp/core/allocator.h"

#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "edp/core/error.h"
#include "edp/core/knobs.h"

namespace edp {

namespace {
constexpr size_t kCacheMin = 64 * 1024;  // below this malloc's own bins do well

size_t rounded(size_t bytes) {
  const size_t r = ((bytes + 63) / 64) * 64;
  return r ? r : 64;
}

int64_t cache_limit() {
  static const int64_t limit = knobs::get_int("EDP_HOST_CACHE_MB") << 20;
  return limit;
}

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;
  HostAllocatorStats stats;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: tensors may outlive static destructors
  return *c;
}
}  // namespace

void* host_alloc(size_t bytes) {
  const size_t n = rounded(bytes);
  Cache& c = cache();
  if (n >= kCacheMin) {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.free_blocks.find(n);
    if (it != c.free_blocks.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.stats.cached_bytes -= static_cast<int64_t>(n);
      c.stats.allocated_bytes += static_cast<int64_t>(n);
      c.stats.peak_allocated_bytes = std::max(c.stats.peak_allocated_bytes, c.stats.allocated_bytes);
      ++c.stats.hits;
      return p;
    }
  }
  void* p = std::aligned_alloc(64, n);
  if (!p) throw Error("out of host memory allocating " + std::to_string(bytes) + " bytes");
  std::lock_guard<std::mutex> lock(c.mu);
  c.stats.allocated_bytes += static_cast<int64_t>(n);
  c.stats.peak_allocated_bytes = std::max(c.stats.peak_allocated_bytes, c.stats.allocated_bytes);
  ++c.stats.misses;
  return p;
}

void host_free(void* p, size_t bytes) {
  if (!p) return;
  const size_t n = rounded(bytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.stats.allocated_bytes -= static_cast<int64_t>(n);
    if (n >= kCacheMin && c.stats.cached_bytes + static_cast<int64_t>(n) <= cache_limit()) {
      c.free_blocks[n].push_back(p);
      c.stats.cached_bytes += static_cast<int64_t>(n);
      return;
    }
  }
  std::free(p);
}

HostAllocatorStats host_allocator_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

void host_allocator_release_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  for (auto& [n, v] : c.free_blocks)
    for (void* p : v) std::free(p);
  c.free_blocks.clear();
  c.stats.cached_bytes = 0;
}

}  // namespace edp
