// Host memory for tensors. Large blocks are cached by exact size and reused: a training step
// allocates the same activation sizes every iteration, and returning them to the OS would make
// every step pay page faults again (expensive in VMs). Small blocks go straight to malloc.
// The cache is bounded (EDP_HOST_CACHE_MB, default 2048); beyond it blocks are freed.
#pragma once
#include <cstddef>
#include <cstdint>

namespace edp {

struct HostAllocatorStats {
  int64_t allocated_bytes = 0;  // handed out and not yet returned
  int64_t cached_bytes = 0;     // held for reuse
  int64_t peak_allocated_bytes = 0;
  int64_t hits = 0, misses = 0;
};

void* host_alloc(size_t bytes);          // 64-byte aligned
void host_free(void* p, size_t bytes);   // bytes as passed to host_alloc
HostAllocatorStats host_allocator_stats();
void host_allocator_release_cache();     // frees every cached block

}  // namespace edp
