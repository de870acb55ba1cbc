// The caching device allocator's policy, run on the CPU against a fake device: fake addresses,
// a capacity for out-of-memory, and events whose completion the test controls per stream.
// Checks block reuse and splitting, merging, per-stream pools, deferred reuse after
// record_stream, the out-of-memory path, statistics, the steady state of a training-like
// allocation pattern (no raw allocation after the first iteration), and, under a random
// workload, that live blocks never overlap and the byte counts add up.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "edp/core/error.h"
#include "edp/core/random.h"
#include "cuda/caching_allocator.h"

namespace {
using edp::cuda::CachingAllocator;
using edp::cuda::StreamId;
constexpr size_t MiB = 1 << 20;

class FakeDevice : public edp::cuda::RawDeviceMemory {
 public:
  explicit FakeDevice(size_t capacity) : capacity_(capacity) {}
  void* raw_alloc(size_t bytes) override {
    if (used_ + bytes > capacity_) return nullptr;
    used_ += bytes;
    const uintptr_t p = next_;
    next_ += (bytes + 4095) / 4096 * 4096 + 4096;  // gaps: segments are never adjacent
    live_[p] = bytes;
    ++allocs;
    return reinterpret_cast<void*>(p);
  }
  void raw_free(void* p, size_t bytes) override {
    auto it = live_.find(reinterpret_cast<uintptr_t>(p));
    ASSERT_NE(it, live_.end()) << "raw_free of an unknown segment";
    ASSERT_EQ(it->second, bytes) << "raw_free with a different size";
    used_ -= bytes;
    live_.erase(it);
    ++frees;
  }
  struct Ev {
    StreamId stream;
    bool done = false;
  };
  void* record_event(StreamId s) override {
    events_.push_back(std::make_unique<Ev>(Ev{s}));
    ++events_recorded;
    return events_.back().get();
  }
  bool event_done(void* e) override { return static_cast<Ev*>(e)->done; }
  void event_wait(void* e) override {
    static_cast<Ev*>(e)->done = true;
    ++host_waits;
  }
  void event_release(void* e) override {
    ++events_released;
    EXPECT_TRUE(static_cast<Ev*>(e)->done) << "an event was released before it completed";
  }
  void mem_info(size_t& free_b, size_t& total_b) override {
    free_b = capacity_ - used_;
    total_b = capacity_;
  }
  // The device reached every event recorded so far on stream s.
  void complete(StreamId s) {
    for (auto& e : events_)
      if (e->stream == s) e->done = true;
  }
  size_t used() const { return used_; }

  int allocs = 0, frees = 0, events_recorded = 0, events_released = 0, host_waits = 0;

 private:
  size_t capacity_, used_ = 0;
  uintptr_t next_ = 0x100000000ull;
  std::map<uintptr_t, size_t> live_;
  std::vector<std::unique_ptr<Ev>> events_;
};

struct Fixture {
  explicit Fixture(size_t capacity = 1024 * MiB) {
    auto d = std::make_unique<FakeDevice>(capacity);
    dev = d.get();
    alloc = std::make_unique<CachingAllocator>(std::move(d), "cuda:fake");
  }
  FakeDevice* dev;
  std::unique_ptr<CachingAllocator> alloc;
};

uintptr_t u(void* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(CachingAllocator, SizeClasses) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::segment_size(512), 2 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(MiB), 2 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(MiB + 512), 20 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(10 * MiB), 10 * MiB);
  EXPECT_EQ(CachingAllocator::segment_size(11 * MiB + 512), 12 * MiB);
}

TEST(CachingAllocator, SmallBlocksShareOneSegment) {
  Fixture f;
  void* a = f.alloc->allocate(1000, 0);
  void* b = f.alloc->allocate(3000, 0);
  void* c = f.alloc->allocate(512 * 1024, 0);
  EXPECT_EQ(f.dev->allocs, 1);
  EXPECT_EQ(f.alloc->segment_count(), 1);
  // Consecutive, 512-byte granular, non-overlapping.
  EXPECT_EQ(u(b) - u(a), 1024u);
  EXPECT_EQ(u(c) - u(b), 3072u);
  const auto st = f.alloc->stats();
  EXPECT_EQ(st.allocated_bytes, 1024 + 3072 + 512 * 1024);
  EXPECT_EQ(st.requested_bytes, 1000 + 3000 + 512 * 1024);
  EXPECT_EQ(st.reserved_bytes, static_cast<int64_t>(2 * MiB));
  EXPECT_EQ(st.cached_bytes, st.reserved_bytes - st.allocated_bytes);
  f.alloc->free(a);
  f.alloc->free(b);
  f.alloc->free(c);
  EXPECT_EQ(f.alloc->stats().allocated_bytes, 0);
}

TEST(CachingAllocator, FreedBlockIsReusedOnItsStream) {
  Fixture f;
  void* a = f.alloc->allocate(5000, 7);
  f.alloc->free(a);
  void* b = f.alloc->allocate(4800, 7);  // same rounded size class
  EXPECT_EQ(a, b);
  EXPECT_EQ(f.dev->allocs, 1);
  EXPECT_EQ(f.alloc->stats().cache_hits, 1);
  EXPECT_EQ(f.alloc->stats().cache_misses, 1);
  f.alloc->free(b);
}

TEST(CachingAllocator, StreamsHaveSeparatePools) {
  Fixture f;
  void* a = f.alloc->allocate(5000, 1);
  f.alloc->free(a);
  void* b = f.alloc->allocate(5000, 2);
  EXPECT_NE(a, b);
  EXPECT_EQ(f.dev->allocs, 2);  // stream 2 may not take stream 1's block without an event
  void* c = f.alloc->allocate(5000, 1);
  EXPECT_EQ(a, c);
  f.alloc->free(b);
  f.alloc->free(c);
}

TEST(CachingAllocator, NeighboursMergeWhenFreed) {
  Fixture f;
  void* a = f.alloc->allocate(4096, 0);
  void* b = f.alloc->allocate(4096, 0);
  void* c = f.alloc->allocate(4096, 0);
  f.alloc->free(b);
  f.alloc->free(a);  // merges with b
  const int64_t merges = f.alloc->stats().merges;
  EXPECT_GE(merges, 1);
  void* d = f.alloc->allocate(8192, 0);  // fits exactly where a and b were
  EXPECT_EQ(d, a);
  f.alloc->free(c);
  f.alloc->free(d);
  // Everything merged back into one segment-sized free block: one cached segment, releasable.
  f.alloc->empty_cache();
  EXPECT_EQ(f.dev->frees, 1);
  EXPECT_EQ(f.alloc->stats().reserved_bytes, 0);
  EXPECT_EQ(f.dev->used(), 0u);
}

TEST(CachingAllocator, LargeRequestsSplitTheirSegment) {
  Fixture f;
  void* a = f.alloc->allocate(3 * MiB, 0);   // 20 MiB segment, 17 MiB left
  void* b = f.alloc->allocate(5 * MiB, 0);   // from the remainder
  EXPECT_EQ(f.dev->allocs, 1);
  EXPECT_EQ(u(b) - u(a), 3 * MiB);
  void* c = f.alloc->allocate(12 * MiB, 0);  // exactly the 12 MiB remainder
  EXPECT_EQ(f.dev->allocs, 1) << "12 MiB fits the 12 MiB remainder";
  EXPECT_EQ(u(c) - u(b), 5 * MiB);
  f.alloc->free(a);
  f.alloc->free(b);
  f.alloc->free(c);
}

TEST(CachingAllocator, RecordStreamDefersReuseUntilTheOtherStreamIsDone) {
  Fixture f;
  void* p = f.alloc->allocate(12 * MiB, 1);  // exactly one 12 MiB segment, no split
  f.alloc->record_stream(p, 2);
  f.alloc->record_stream(static_cast<char*>(p) + 100, 2);  // interior address, same block: no-op
  f.alloc->record_stream(p, 1);                            // own stream: no-op
  f.alloc->free(p);
  EXPECT_EQ(f.dev->events_recorded, 1);
  EXPECT_EQ(f.alloc->stats().pending_frees, 1);
  void* q = f.alloc->allocate(12 * MiB, 1);
  EXPECT_NE(p, q) << "reused while stream 2 may still read it";
  EXPECT_EQ(f.dev->allocs, 2);
  f.dev->complete(2);
  void* r = f.alloc->allocate(12 * MiB, 1);
  EXPECT_EQ(p, r);
  EXPECT_EQ(f.dev->allocs, 2);
  EXPECT_EQ(f.dev->events_released, 1);
  EXPECT_EQ(f.alloc->stats().pending_frees, 0);
  EXPECT_EQ(f.dev->host_waits, 0) << "the normal path must not block the host";
  f.alloc->free(q);
  f.alloc->free(r);
}

TEST(CachingAllocator, RecordStreamOutsideABlockThrows) {
  Fixture f;
  void* p = f.alloc->allocate(1000, 0);
  EXPECT_THROW(f.alloc->record_stream(reinterpret_cast<void*>(0x10), 1), edp::Error);
  EXPECT_THROW(f.alloc->record_stream(static_cast<char*>(p) + 1024, 1), edp::Error);
  f.alloc->free(p);
  EXPECT_THROW(f.alloc->record_stream(p, 1), edp::Error);
}

TEST(CachingAllocator, DoubleAndUnknownFreeThrow) {
  Fixture f;
  void* p = f.alloc->allocate(1000, 0);
  f.alloc->free(p);
  EXPECT_THROW(f.alloc->free(p), edp::Error);
  EXPECT_THROW(f.alloc->free(reinterpret_cast<void*>(0x1234)), edp::Error);
  f.alloc->free(nullptr);  // no-op, like free()
}

TEST(CachingAllocator, OutOfMemoryReleasesTheCacheAndRetries) {
  Fixture f(40 * MiB);
  void* a = f.alloc->allocate(12 * MiB, 0);
  void* b = f.alloc->allocate(12 * MiB, 0);
  void* c = f.alloc->allocate(12 * MiB, 0);
  f.alloc->free(a);
  f.alloc->free(b);
  f.alloc->free(c);
  EXPECT_EQ(f.alloc->stats().cached_bytes, static_cast<int64_t>(36 * MiB));
  void* d = f.alloc->allocate(30 * MiB, 0);  // 36 + 30 > 40: the cache must go first
  EXPECT_NE(d, nullptr);
  const auto st = f.alloc->stats();
  EXPECT_EQ(st.oom_retries, 1);
  EXPECT_EQ(f.dev->frees, 3);
  EXPECT_EQ(st.reserved_bytes, static_cast<int64_t>(30 * MiB));
  f.alloc->free(d);
}

TEST(CachingAllocator, OutOfMemoryWaitsForPendingBlocksBeforeGivingUp) {
  Fixture f(24 * MiB);
  void* a = f.alloc->allocate(12 * MiB, 1);
  f.alloc->record_stream(a, 2);
  f.alloc->free(a);                           // pending on stream 2
  void* b = f.alloc->allocate(12 * MiB, 1);   // second segment: 24 MiB used
  void* c = f.alloc->allocate(12 * MiB, 1);   // no room: must wait for a's event, then reuse a
  EXPECT_EQ(c, a);
  EXPECT_EQ(f.dev->host_waits, 1);
  f.alloc->free(b);
  f.alloc->free(c);
}

TEST(CachingAllocator, OutOfMemoryThrowsAnActionableError) {
  Fixture f(32 * MiB);
  void* a = f.alloc->allocate(4 * MiB, 0);  // a 20 MiB segment, partly in use: not releasable
  try {
    f.alloc->allocate(30 * MiB, 0);
    FAIL() << "expected an out-of-memory error";
  } catch (const edp::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of GPU memory on cuda:fake"), std::string::npos) << m;
    EXPECT_NE(m.find("30.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("Reduce the batch size"), std::string::npos) << m;
  }
  // The allocator is still usable afterwards.
  void* b = f.alloc->allocate(1000, 0);
  f.alloc->free(b);
  f.alloc->free(a);
}

TEST(CachingAllocator, PeakStatistics) {
  Fixture f;
  void* a = f.alloc->allocate(3 * MiB, 0);
  void* b = f.alloc->allocate(2 * MiB, 0);
  f.alloc->free(a);
  f.alloc->free(b);
  auto st = f.alloc->stats();
  EXPECT_EQ(st.peak_allocated_bytes, static_cast<int64_t>(5 * MiB));
  EXPECT_EQ(st.allocated_bytes, 0);
  EXPECT_EQ(st.peak_reserved_bytes, static_cast<int64_t>(20 * MiB));
  f.alloc->reset_peak_stats();
  EXPECT_EQ(f.alloc->stats().peak_allocated_bytes, 0);
}

// A training step allocates the same sizes in the same order each iteration (activations kept
// for backward, temporaries freed at once, gradients of activations freed in reverse). Best fit
// may place blocks differently in the second iteration than in the first (which started from an
// empty cache), so the steady state is required from the third iteration on.
TEST(CachingAllocator, TrainingPatternReachesASteadyStateWithoutRawAllocations) {
  Fixture f;
  const std::vector<size_t> acts = {256 * 32 * 28 * 28 * 4, 256 * 32 * 14 * 14 * 4,
                                    256 * 64 * 14 * 14 * 4, 256 * 64 * 7 * 7 * 4, 256 * 128 * 4,
                                    256 * 10 * 4, 40, 8};
  int after_first = -1;
  int64_t peak_after_first = 0;
  for (int step = 0; step < 6; ++step) {
    std::vector<void*> kept;
    for (size_t s : acts) {
      kept.push_back(f.alloc->allocate(s, 0));
      void* tmp = f.alloc->allocate(s / 3 + 17, 0);  // a scratch buffer of the op
      f.alloc->free(tmp);
    }
    for (size_t i = acts.size(); i-- > 0;) {
      void* grad = f.alloc->allocate(acts[i], 0);
      f.alloc->free(kept[i]);
      f.alloc->free(grad);
    }
    if (step == 1) {
      after_first = f.dev->allocs;
      peak_after_first = f.alloc->stats().peak_reserved_bytes;
    }
  }
  EXPECT_EQ(f.dev->allocs, after_first) << "raw allocations after the warm-up steps";
  EXPECT_EQ(f.dev->frees, 0);
  EXPECT_EQ(f.alloc->stats().peak_reserved_bytes, peak_after_first);
  EXPECT_EQ(f.alloc->stats().allocated_bytes, 0);
  EXPECT_GT(f.alloc->stats().cache_hits, 5 * static_cast<int64_t>(acts.size()));
}

// Random allocations and frees on two streams: live blocks never overlap, each lies inside a
// reserved segment, and the byte counts agree with what is live.
TEST(CachingAllocator, RandomWorkloadKeepsInvariants) {
  Fixture f(256 * MiB);
  edp::Rng rng(1234);
  struct Live {
    uintptr_t p;
    size_t size;  // the rounded size: the block may be larger (an unsplit large remainder)
    size_t requested;
  };
  std::vector<Live> live;
  for (int it = 0; it < 4000; ++it) {
    const bool do_alloc = live.empty() || rng.uniform() < 0.55;
    if (do_alloc) {
      const double r = rng.uniform();
      size_t bytes = r < 0.7 ? rng.below(64 * 1024) : r < 0.95 ? rng.below(4 * MiB) : rng.below(24 * MiB);
      const StreamId s = rng.below(2);
      void* p;
      try {
        p = f.alloc->allocate(bytes, s);
      } catch (const edp::Error&) {
        continue;  // full: fine, as long as the invariants hold
      }
      if (rng.uniform() < 0.1) f.alloc->record_stream(p, 1 - s);
      live.push_back({u(p), CachingAllocator::round_size(bytes), bytes});
    } else {
      const size_t i = static_cast<size_t>(rng.below(live.size()));
      f.alloc->free(reinterpret_cast<void*>(live[i].p));
      live[i] = live.back();
      live.pop_back();
    }
    if (rng.uniform() < 0.05) {
      f.dev->complete(0);
      f.dev->complete(1);
    }
    if (it % 97 == 0) {
      std::vector<Live> sorted = live;
      std::sort(sorted.begin(), sorted.end(), [](const Live& a, const Live& b) { return a.p < b.p; });
      for (size_t k = 1; k < sorted.size(); ++k)
        ASSERT_LE(sorted[k - 1].p + sorted[k - 1].size, sorted[k].p) << "overlapping blocks";
      int64_t rounded = 0, requested = 0;
      for (const Live& l : live) {
        rounded += static_cast<int64_t>(l.size);
        requested += static_cast<int64_t>(l.requested);
      }
      const auto st = f.alloc->stats();
      ASSERT_EQ(st.requested_bytes, requested);
      ASSERT_GE(st.allocated_bytes, rounded);
      ASSERT_LE(st.allocated_bytes - rounded, static_cast<int64_t>(live.size() * MiB));
      ASSERT_LE(st.allocated_bytes, st.reserved_bytes);
      ASSERT_EQ(static_cast<size_t>(st.reserved_bytes), f.dev->used());
    }
  }
  for (const Live& l : live) f.alloc->free(reinterpret_cast<void*>(l.p));
  f.dev->complete(0);
  f.dev->complete(1);
  f.alloc->empty_cache();
  EXPECT_EQ(f.alloc->stats().reserved_bytes, 0);
  EXPECT_EQ(f.dev->used(), 0u) << "segments not returned after everything was freed";
  EXPECT_EQ(f.dev->events_recorded, f.dev->events_released);
}

}  // namespace
