// DataLoader: every index of the sampler exactly once per epoch and in order, batches equal to
// Dataset::get, bitwise the same for any worker count, drop_last, skip (resume), exceptions
// from workers re-thrown in order, restarts and destruction mid-epoch. No timing assertions:
// where a test sleeps, it is only to make a wrong implementation likely to show itself.
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "edp/data/loader.h"
#include "test_util.h"

using namespace edp;
using namespace edp::data;

namespace {

std::shared_ptr<TensorDataset> dataset(int64_t n) {
  return make_synthetic(n, Shape{2, 3}, 5, /*seed=*/42);
}

std::vector<Batch> epoch(DataLoader& dl, int64_t e, int64_t skip = 0) {
  dl.start_epoch(e, skip);
  std::vector<Batch> out;
  Batch b;
  while (dl.next(b)) out.push_back(b);
  return out;
}

bool same(const Batch& a, const Batch& b) {
  return a.x.shape() == b.x.shape() && a.y.shape() == b.y.shape() && a.indices == b.indices &&
         std::memcmp(a.x.raw(), b.x.raw(), a.x.nbytes()) == 0 &&
         std::memcmp(a.y.raw(), b.y.raw(), a.y.nbytes()) == 0;
}

// A dataset that throws a given exception type at one index (while `armed`).
struct Boom : std::runtime_error {
  using std::runtime_error::runtime_error;
};
class ThrowingDataset : public Dataset {
 public:
  ThrowingDataset(std::shared_ptr<TensorDataset> base, int64_t bad) : base_(base), bad_(bad) {}
  int64_t size() const override { return base_->size(); }
  Shape sample_shape() const override { return base_->sample_shape(); }
  int num_classes() const override { return base_->num_classes(); }
  int32_t get(int64_t i, float* out) const override {
    if (armed && i == bad_) throw Boom("sample " + std::to_string(i) + " is broken");
    return base_->get(i, out);
  }
  std::atomic<bool> armed{true};

 private:
  std::shared_ptr<TensorDataset> base_;
  int64_t bad_;
};

// A dataset that is slow per sample, and that checks the prefetch bound: when sample i is
// fetched, its batch must lie within the window of the consumer's position.
class WatchedDataset : public Dataset {
 public:
  WatchedDataset(std::shared_ptr<TensorDataset> base, int64_t batch, int64_t window,
                 std::chrono::microseconds delay)
      : base_(base), batch_(batch), window_(window), delay_(delay) {}
  int64_t size() const override { return base_->size(); }
  Shape sample_shape() const override { return base_->sample_shape(); }
  int num_classes() const override { return base_->num_classes(); }
  int32_t get(int64_t i, float* out) const override {
    // With a SequentialSampler, sample i is in batch i / batch_. The consumer may be inside
    // next() (its position already advanced, `taken` not yet), hence the + 1.
    const int64_t b = i / batch_;
    if (b >= taken.load() + 1 + window_) violations++;
    calls++;
    if (delay_.count()) std::this_thread::sleep_for(delay_);
    return base_->get(i, out);
  }
  mutable std::atomic<int64_t> calls{0}, violations{0};
  std::atomic<int64_t> taken{0};

 private:
  std::shared_ptr<TensorDataset> base_;
  int64_t batch_, window_;
  std::chrono::microseconds delay_;
};

class ListSampler : public Sampler {
 public:
  explicit ListSampler(std::vector<int64_t> v) : v_(std::move(v)) {}
  void set_epoch(int64_t) override {}
  std::vector<int64_t> indices() const override { return v_; }

 private:
  std::vector<int64_t> v_;
};

LoaderOptions opts(int64_t bs, int workers, int prefetch = 2, bool drop_last = false) {
  LoaderOptions o;
  o.batch_size = bs;
  o.workers = workers;
  o.prefetch = prefetch;
  o.drop_last = drop_last;
  return o;
}

}  // namespace

TEST(DataLoader, EveryIndexOnceInSamplerOrder) {
  auto ds = dataset(103);
  for (int workers : {0, 1, 3}) {
    auto sampler = std::make_shared<RandomSampler>(103, 7);
    DataLoader dl(ds, sampler, opts(10, workers));
    for (int64_t e : {0, 1}) {
      auto batches = epoch(dl, e);
      ASSERT_EQ(static_cast<int64_t>(batches.size()), 11) << "workers " << workers;
      EXPECT_EQ(dl.batches_per_epoch(), 11);
      std::vector<int64_t> seen;
      for (const auto& b : batches) seen.insert(seen.end(), b.indices.begin(), b.indices.end());
      EXPECT_EQ(seen, epoch_permutation(103, 7, e)) << "workers " << workers << " epoch " << e;
      EXPECT_EQ(batches.back().size(), 3);
      for (size_t k = 0; k + 1 < batches.size(); ++k) EXPECT_EQ(batches[k].size(), 10);
    }
  }
}

TEST(DataLoader, BatchContentsEqualDatasetGet) {
  auto ds = dataset(50);
  DataLoader dl(ds, std::make_shared<RandomSampler>(50, 3), opts(8, 2));
  std::vector<float> row(6);
  for (const auto& b : epoch(dl, 4)) {
    ASSERT_EQ(b.x.shape(), (Shape{b.size(), 2, 3}));
    ASSERT_EQ(b.x.dtype(), DType::F32);
    ASSERT_EQ(b.y.dtype(), DType::I32);
    ASSERT_EQ(b.y.shape(), (Shape{b.size()}));
    for (int64_t r = 0; r < b.size(); ++r) {
      const int32_t label = ds->get(b.indices[r], row.data());
      EXPECT_EQ(b.y.data<int32_t>()[r], label);
      EXPECT_EQ(std::memcmp(b.x.data<float>() + r * 6, row.data(), sizeof(float) * 6), 0);
    }
  }
}

TEST(DataLoader, BitwiseSameForAnyWorkerCount) {
  auto ds = dataset(257);
  auto run = [&](int workers, int prefetch) {
    DataLoader dl(ds, std::make_shared<RandomSampler>(257, 11), opts(16, workers, prefetch));
    auto a = epoch(dl, 0);
    auto b = epoch(dl, 5);
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const auto ref = run(0, 2);
  for (auto [w, p] : {std::pair{1, 1}, {1, 4}, {3, 1}, {3, 2}, {8, 3}}) {
    const auto got = run(w, p);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t k = 0; k < ref.size(); ++k)
      EXPECT_TRUE(same(got[k], ref[k])) << "workers " << w << " prefetch " << p << " batch " << k;
  }
}

TEST(DataLoader, DropLast) {
  auto ds = dataset(103);
  for (int workers : {0, 2}) {
    DataLoader dl(ds, std::make_shared<SequentialSampler>(103), opts(10, workers, 2, true));
    EXPECT_EQ(dl.batches_per_epoch(), 10);  // before start_epoch: from the sampler
    auto batches = epoch(dl, 0);
    ASSERT_EQ(batches.size(), 10u);
    for (const auto& b : batches) EXPECT_EQ(b.size(), 10);
    EXPECT_EQ(batches.back().indices.back(), 99);
  }
  // An exact multiple loses nothing; fewer samples than a batch gives no batch at all.
  DataLoader exact(dataset(100), std::make_shared<SequentialSampler>(100), opts(10, 1, 2, true));
  EXPECT_EQ(epoch(exact, 0).size(), 10u);
  DataLoader tiny(dataset(7), std::make_shared<SequentialSampler>(7), opts(10, 1, 2, true));
  EXPECT_EQ(epoch(tiny, 0).size(), 0u);
  DataLoader keep(dataset(7), std::make_shared<SequentialSampler>(7), opts(10, 1, 2, false));
  EXPECT_EQ(epoch(keep, 0).size(), 1u);
}

TEST(DataLoader, SkipResumesMidEpoch) {
  auto ds = dataset(95);
  for (int workers : {0, 3}) {
    DataLoader dl(ds, std::make_shared<RandomSampler>(95, 5), opts(10, workers));
    const auto full = epoch(dl, 2);
    ASSERT_EQ(full.size(), 10u);
    dl.start_epoch(2);
    Batch b;
    for (int k = 0; k < 4; ++k) ASSERT_TRUE(dl.next(b));
    const int64_t resume_at = dl.next_batch_index();
    EXPECT_EQ(resume_at, 4);
    const auto rest = epoch(dl, 2, resume_at);
    ASSERT_EQ(rest.size(), 6u);
    for (size_t k = 0; k < rest.size(); ++k) EXPECT_TRUE(same(rest[k], full[4 + k])) << k;
    EXPECT_EQ(epoch(dl, 2, 10).size(), 0u);  // skipping the whole epoch is allowed
    EXPECT_THROW_WITH(dl.start_epoch(2, 11), Error, "skip=11", "0..10");
    EXPECT_THROW_WITH(dl.start_epoch(2, -1), Error, "skip=-1");
  }
}

TEST(DataLoader, WorkerExceptionsAreRethrownInOrder) {
  auto base = dataset(100);
  for (int workers : {0, 1, 3}) {
    // Sample 57 sits in batch 5 (sequential, batch 10): batches 0..4 arrive, then the error.
    auto ds = std::make_shared<ThrowingDataset>(base, 57);
    DataLoader dl(ds, std::make_shared<SequentialSampler>(100), opts(10, workers, 2));
    dl.start_epoch(0);
    Batch b;
    for (int k = 0; k < 5; ++k) {
      ASSERT_TRUE(dl.next(b)) << "workers " << workers;
      EXPECT_EQ(b.indices.front(), 10 * k);
    }
    EXPECT_THROW_WITH(dl.next(b), Boom, "sample 57 is broken");
    EXPECT_THROW_WITH(dl.next(b), Boom, "sample 57 is broken");  // sticky until restart
    // A new epoch clears the error and runs to the end once the data is fixed.
    ds->armed = false;
    EXPECT_EQ(epoch(dl, 1).size(), 10u) << "workers " << workers;
  }
}

TEST(DataLoader, EarliestFailingBatchWins) {
  // Two broken samples, several workers: the error reported is always the first in order,
  // after exactly the batches before it — as with workers=0. The sleep makes one or the
  // other fail first, so both "replace a later error" and "keep an earlier one" are exercised.
  class TwoBad : public Dataset {
   public:
    TwoBad(std::shared_ptr<TensorDataset> b, bool early_first) : b_(b), early_first_(early_first) {}
    int64_t size() const override { return b_->size(); }
    Shape sample_shape() const override { return b_->sample_shape(); }
    int num_classes() const override { return b_->num_classes(); }
    int32_t get(int64_t i, float* out) const override {
      if (i == 95 || i == 31) {
        // Both batches get claimed (the window covers the epoch), then fail 2 and 10 ms in.
        const bool first = early_first_ == (i == 31);
        std::this_thread::sleep_for(std::chrono::milliseconds(first ? 2 : 10));
        throw Boom(i == 31 ? "early" : "late");
      }
      return b_->get(i, out);
    }

   private:
    std::shared_ptr<TensorDataset> b_;
    bool early_first_;
  };
  for (bool early_first : {false, true})
    for (int workers : {0, 4}) {
      DataLoader dl(std::make_shared<TwoBad>(dataset(100), early_first),
                    std::make_shared<SequentialSampler>(100), opts(10, workers, 3));
      dl.start_epoch(0);
      // Give both failures time to happen before the consumer looks (a wrong implementation
      // that lets the later error replace the earlier one then hangs or reports "late").
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      Batch b;
      for (int k = 0; k < 3; ++k) ASSERT_TRUE(dl.next(b));
      EXPECT_THROW_WITH(dl.next(b), Boom, "early");
    }
}

TEST(DataLoader, BadSamplerIndexIsAnError) {
  auto ds = dataset(10);
  for (int workers : {0, 2}) {
    DataLoader dl(ds, std::make_shared<ListSampler>(std::vector<int64_t>{0, 1, 2, 10, 4}),
                  opts(2, workers));
    dl.start_epoch(0);
    Batch b;
    ASSERT_TRUE(dl.next(b));
    EXPECT_THROW_WITH(dl.next(b), Error, "index 10", "position 3", "10 samples");
  }
}

TEST(DataLoader, RestartMidEpoch) {
  auto ds = dataset(200);
  auto ref_dl = DataLoader(ds, std::make_shared<RandomSampler>(200, 1), opts(7, 0));
  const auto ref = epoch(ref_dl, 3);
  DataLoader dl(ds, std::make_shared<RandomSampler>(200, 1), opts(7, 3, 2));
  for (int round = 0; round < 5; ++round) {
    dl.start_epoch(round);  // abandon after a few batches, with workers busy prefetching
    Batch b;
    for (int k = 0; k < round; ++k) ASSERT_TRUE(dl.next(b));
  }
  const auto got = epoch(dl, 3);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t k = 0; k < ref.size(); ++k) EXPECT_TRUE(same(got[k], ref[k])) << k;
  Batch b;
  EXPECT_FALSE(dl.next(b));  // stays at the end
}

TEST(DataLoader, PrefetchIsBounded) {
  const int64_t bs = 4;
  for (auto [workers, prefetch] : {std::pair{1, 1}, {2, 2}, {4, 1}}) {
    auto ds = std::make_shared<WatchedDataset>(dataset(400), bs, workers * prefetch,
                                               std::chrono::microseconds(0));
    DataLoader dl(ds, std::make_shared<SequentialSampler>(400), opts(bs, workers, prefetch));
    dl.start_epoch(0);
    Batch b;
    while (dl.next(b)) {
      // A slow consumer: unbounded workers would run far ahead meanwhile.
      std::this_thread::sleep_for(std::chrono::microseconds(300));
      ds->taken++;
    }
    EXPECT_EQ(ds->calls.load(), 400);
    EXPECT_EQ(ds->violations.load(), 0) << "workers " << workers << " prefetch " << prefetch;
  }
}

TEST(DataLoader, DestructionMidEpochDoesNotHang) {
  // The ctest timeout is the failure signal here; the test asserts only what it can see.
  auto base = dataset(300);
  for (int taken : {0, 1, 5}) {
    auto ds = std::make_shared<WatchedDataset>(base, 10, 1000, std::chrono::microseconds(200));
    {
      DataLoader dl(ds, std::make_shared<SequentialSampler>(300), opts(10, 3, 2));
      dl.start_epoch(0);
      Batch b;
      for (int k = 0; k < taken; ++k) ASSERT_TRUE(dl.next(b));
    }
    // The workers were stopped: nothing fetches any more.
    const int64_t after = ds->calls.load();
    EXPECT_LT(after, 300);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(ds->calls.load(), after);
  }
  // Never started, and started then restarted: both destroy cleanly.
  { DataLoader dl(base, std::make_shared<SequentialSampler>(300), opts(10, 2)); }
  {
    DataLoader dl(base, std::make_shared<SequentialSampler>(300), opts(10, 2));
    dl.start_epoch(0);
    dl.start_epoch(1);
  }
}

TEST(DataLoader, ArgumentChecks) {
  auto ds = dataset(10);
  auto s = std::make_shared<SequentialSampler>(10);
  EXPECT_THROW_WITH(DataLoader(nullptr, s, opts(2, 1)), Error, "dataset is null");
  EXPECT_THROW_WITH(DataLoader(ds, nullptr, opts(2, 1)), Error, "sampler is null");
  EXPECT_THROW_WITH(DataLoader(ds, s, opts(0, 1)), Error, "batch_size");
  EXPECT_THROW_WITH(DataLoader(ds, s, opts(2, -1)), Error, "workers");
  EXPECT_THROW_WITH(DataLoader(ds, s, opts(2, 2, 0)), Error, "prefetch");
  DataLoader dl(ds, s, opts(3, 0, 0));  // prefetch is irrelevant without workers
  Batch b;
  EXPECT_THROW_WITH(dl.next(b), Error, "start_epoch");
  EXPECT_EQ(dl.batches_per_epoch(), 4);
}
