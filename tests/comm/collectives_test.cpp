// Collectives of the world communicator under mpirun (world sizes 1-4), in exact arithmetic:
// inputs are small integers, so every sum/avg/max/min has one right answer in every dtype and
// results are compared bit for bit (tolerance 0). Sizes 0, 1, a prime and a few MiB; in place and
// out of place; blocking and non-blocking; also split, dup, Tensor overloads and CommThread.
// The same binary runs again with EDP_COMM_MAX_CHUNK=1000 (chunked MPI calls), with
// EDP_COMM_THREAD_LEVEL=serialized, with EDP_HOST_SHM=off (MPI's own data path between ranks of a
// host) and with the ranks split over two "hosts" by EDP_HOSTNAME (the hierarchical path: shared
// memory within a host, MPI among one rank per host; see tests/comm/CMakeLists.txt). Sizes of a
// few MiB span several shared-memory chunks (1 MiB each).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "edp/comm/agree.h"
#include "edp/comm/comm_thread.h"
#include "edp/comm/communicator.h"
#include "edp/core/error.h"
#include "edp/core/knobs.h"
#include "edp/core/process.h"

using edp::DType;
using edp::comm::Communicator;
using edp::comm::ReduceOp;
using edp::comm::Request;

namespace {

Communicator& W() { return edp::comm::world(); }

// Every rank's host key, in rank order.
std::vector<uint64_t> host_keys() {
  const int64_t mine = static_cast<int64_t>(edp::host_key());
  std::vector<int64_t> all(static_cast<size_t>(W().size()));
  W().allgather(&mine, all.data(), 1, DType::I64);
  return {all.begin(), all.end()};
}

// Rank r's i-th input: an integer in [-30, 30], different across ranks and positions.
int64_t value(int rank, int64_t i) { return (i * 7 + rank * 13) % 61 - 30; }

template <typename T>
std::vector<T> input(int rank, int64_t n) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<T>(value(rank, i));
  return v;
}

template <typename T>
std::vector<T> expected_reduce(int size, int64_t n, ReduceOp op) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t acc = value(0, i);
    for (int r = 1; r < size; ++r) {
      const int64_t x = value(r, i);
      if (op == ReduceOp::Sum || op == ReduceOp::Avg) acc += x;
      if (op == ReduceOp::Max) acc = std::max(acc, x);
      if (op == ReduceOp::Min) acc = std::min(acc, x);
    }
    T e = static_cast<T>(acc);
    // Avg is documented as the sum divided by size in the buffer's type.
    if (op == ReduceOp::Avg) e = static_cast<T>(e / static_cast<T>(size));
    v[static_cast<size_t>(i)] = e;
  }
  return v;
}

// Exact comparison; the message names the first mismatch and how many there are.
template <typename T>
::testing::AssertionResult same(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0 && bad++ == 0) first = i;
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements differ; first at "
                                       << first << ": got " << +got[first] << ", want " << +want[first];
}

// A few MiB per buffer: large enough for MPI's large-message algorithms, small enough for the
// whole suite to stay quick with 4 ranks on 2 cores.
constexpr int64_t kBigBytes = 3 << 20;

template <typename T>
std::vector<int64_t> sizes() {
  return {0, 1, 1009, kBigBytes / static_cast<int64_t>(sizeof(T)) + 3};
}

enum class Mode { Blocking, TestLoop, Wait };
const char* mode_name(Mode m) { return m == Mode::Blocking ? "blocking" : m == Mode::TestLoop ? "test-loop" : "wait"; }

void finish(Request& r, Mode m) {
  if (m == Mode::TestLoop) {
    while (!r.test()) {
    }  // test() drives MPI's progress
    EXPECT_TRUE(r.done());
  } else {
    r.wait();
  }
}

template <typename T>
class Collectives : public ::testing::Test {};
using DTypes = ::testing::Types<float, double, int32_t, int64_t>;
TYPED_TEST_SUITE(Collectives, DTypes);

TYPED_TEST(Collectives, AllreduceEveryOpSizeAndPlacement) {
  using T = TypeParam;
  const DType dt = edp::dtype_of<T>::value;
  const int rank = W().rank(), size = W().size();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min})
    for (int64_t n : sizes<T>())
      for (bool in_place : {true, false})
        for (Mode mode : {Mode::Blocking, Mode::TestLoop, Mode::Wait}) {
          SCOPED_TRACE(std::string(edp::dtype_name(dt)) + " " + edp::comm::reduce_op_name(op) + " n=" +
                       std::to_string(n) + (in_place ? " in-place " : " out-of-place ") + mode_name(mode));
          std::vector<T> send = input<T>(rank, n);
          std::vector<T> recv(static_cast<size_t>(n), static_cast<T>(99));
          T* out = in_place ? send.data() : recv.data();
          if (mode == Mode::Blocking) {
            W().allreduce(send.data(), out, n, dt, op);
          } else {
            Request r = W().iallreduce(send.data(), out, n, dt, op);
            finish(r, mode);
          }
          const std::vector<T>& got = in_place ? send : recv;
          ASSERT_TRUE(same(got, expected_reduce<T>(size, n, op)));
          if (!in_place) {
            ASSERT_TRUE(same(send, input<T>(rank, n))) << "the send buffer was modified";
          }
        }
}

// Block r of every rank's input, reduced, lands on rank r: the same values as the allreduce's
// block r (exact arithmetic), for every op and for blocks of 0, 1, a prime and a few MiB.
TYPED_TEST(Collectives, ReduceScatterGivesEachRankItsBlock) {
  using T = TypeParam;
  const DType dt = edp::dtype_of<T>::value;
  const int rank = W().rank(), size = W().size();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min})
    for (int64_t n : sizes<T>()) {
      SCOPED_TRACE(std::string(edp::dtype_name(dt)) + " " + edp::comm::reduce_op_name(op) + " n=" + std::to_string(n));
      const std::vector<T> send = input<T>(rank, n * size);
      std::vector<T> recv(static_cast<size_t>(n), static_cast<T>(99));
      W().reduce_scatter(send.data(), recv.data(), n, dt, op);
      const std::vector<T> all = expected_reduce<T>(size, n * size, op);
      ASSERT_TRUE(same(recv, std::vector<T>(all.begin() + n * rank, all.begin() + n * (rank + 1))));
      ASSERT_TRUE(same(send, input<T>(rank, n * size))) << "the send buffer was modified";
      // In place: the result lands in this rank's own block of the buffer.
      std::vector<T> buf = input<T>(rank, n * size);
      W().reduce_scatter(buf.data(), buf.data() + n * rank, n, dt, op);
      ASSERT_TRUE(same(std::vector<T>(buf.begin() + n * rank, buf.begin() + n * (rank + 1)),
                       std::vector<T>(all.begin() + n * rank, all.begin() + n * (rank + 1))))
          << "in place";
    }
}

TYPED_TEST(Collectives, BroadcastFromEveryRoot) {
  using T = TypeParam;
  const DType dt = edp::dtype_of<T>::value;
  const int rank = W().rank(), size = W().size();
  for (int root = 0; root < size; ++root)
    for (int64_t n : sizes<T>())
      for (Mode mode : {Mode::Blocking, Mode::TestLoop, Mode::Wait}) {
        SCOPED_TRACE("root=" + std::to_string(root) + " n=" + std::to_string(n) + " " + mode_name(mode));
        std::vector<T> buf = rank == root ? input<T>(root, n) : std::vector<T>(static_cast<size_t>(n), T(-99));
        if (mode == Mode::Blocking) {
          W().broadcast(buf.data(), n, dt, root);
        } else {
          Request r = W().ibroadcast(buf.data(), n, dt, root);
          finish(r, mode);
        }
        ASSERT_TRUE(same(buf, input<T>(root, n)));
      }
}

TYPED_TEST(Collectives, AllgatherInAndOutOfPlace) {
  using T = TypeParam;
  const DType dt = edp::dtype_of<T>::value;
  const int rank = W().rank(), size = W().size();
  for (int64_t n : sizes<T>())
    for (bool in_place : {true, false})
      for (Mode mode : {Mode::Blocking, Mode::TestLoop, Mode::Wait}) {
        SCOPED_TRACE("n=" + std::to_string(n) + (in_place ? " in-place " : " out-of-place ") + mode_name(mode));
        std::vector<T> send = input<T>(rank, n);
        std::vector<T> recv(static_cast<size_t>(n * size), T(-99));
        const T* s = send.data();
        if (in_place) {
          std::copy(send.begin(), send.end(), recv.begin() + n * rank);
          s = recv.data() + n * rank;
        }
        if (mode == Mode::Blocking) {
          W().allgather(s, recv.data(), n, dt);
        } else {
          Request r = W().iallgather(s, recv.data(), n, dt);
          finish(r, mode);
        }
        std::vector<T> want;
        for (int r = 0; r < size; ++r) {
          auto part = input<T>(r, n);
          want.insert(want.end(), part.begin(), part.end());
        }
        ASSERT_TRUE(same(recv, want));
      }
}

TEST(Comm, RankSizeLocalAndLaunchInfo) {
  const int rank = W().rank(), size = W().size();
  EXPECT_GE(rank, 0);
  EXPECT_LT(rank, size);
  EXPECT_EQ(W().backend(), "mpi");
  // The ranks of a host are those with its host name (EDP_HOSTNAME splits one machine into
  // several "hosts"), counted in rank order.
  const std::vector<uint64_t> hosts = host_keys();
  int local_rank = 0, local_size = 0;
  for (int r = 0; r < size; ++r) {
    if (hosts[static_cast<size_t>(r)] != hosts[static_cast<size_t>(rank)]) continue;
    if (r < rank) ++local_rank;
    ++local_size;
  }
  EXPECT_EQ(W().local_size(), local_size);
  EXPECT_EQ(W().local_rank(), local_rank);
  const auto li = edp::comm::launch_info();
  if (li.launched_by_mpirun) {
    EXPECT_EQ(li.rank, rank);
    EXPECT_EQ(li.size, size);
    if (!edp::knobs::is_set("EDP_HOSTNAME")) {  // mpirun's own view: one machine, one host
      EXPECT_EQ(li.local_rank, W().local_rank());
      EXPECT_EQ(li.local_size, W().local_size());
    }
  } else {
    EXPECT_EQ(size, 1) << "without mpirun the world is a singleton";
  }
  // The ranks agree on the size, and each rank appears once.
  EXPECT_EQ(W().allreduce_value(1, ReduceOp::Sum), size);
  EXPECT_EQ(W().allreduce_value(int64_t{rank}, ReduceOp::Sum), int64_t{size} * (size - 1) / 2);
  W().barrier();
  Request b = W().ibarrier();
  b.wait();
}

// The data path each pair of ranks uses, as the communicator names it: edp's shared memory
// between ranks of one host unless EDP_HOST_SHM=off, MPI between hosts. (The stall test checks
// that an allreduce of one host really runs there: its report names the path, "on shm".)
TEST(Comm, TransportNamesEachPairOfRanks) {
  const std::string t = W().transport();
  SCOPED_TRACE("transport: " + t);
  const std::vector<uint64_t> hosts = host_keys();
  const size_t distinct = std::set<uint64_t>(hosts.begin(), hosts.end()).size();
  const bool shared_host = distinct < hosts.size(), shm = edp::knobs::get_string("EDP_HOST_SHM") != "off";
  if (W().size() == 1) {
    EXPECT_EQ(t, "one rank");
    return;
  }
  EXPECT_EQ(t.find("same host, same launch: edp shared memory") != std::string::npos, shared_host && shm);
  EXPECT_EQ(t.find("same host, same launch: MPI") != std::string::npos, shared_host && !shm);
  EXPECT_EQ(t.find("other hosts: MPI") != std::string::npos, distinct > 1);
  EXPECT_EQ(t.find("separate launches") != std::string::npos, false) << "every rank came from one mpirun";
}

TEST(Comm, ThreadLevelIsWhatWasAsked) {
  const char* s = std::getenv("EDP_COMM_THREAD_LEVEL");
  const auto want = s && std::string(s) == "serialized" ? edp::comm::ThreadLevel::Serialized
                                                        : edp::comm::ThreadLevel::Multiple;
  EXPECT_EQ(W().thread_level(), want) << edp::comm::thread_level_name(W().thread_level());
}

TEST(Comm, SplitByParityWithReversedKeys) {
  const int rank = W().rank(), size = W().size();
  auto sub = W().split(rank % 2, -rank);
  ASSERT_NE(sub, nullptr);
  int members = 0, above = 0, rank_sum = 0;
  for (int r = rank % 2; r < size; r += 2) {
    ++members;
    rank_sum += r;
    if (r > rank) ++above;
  }
  EXPECT_EQ(sub->size(), members);
  EXPECT_EQ(sub->rank(), above) << "key -rank orders the new ranks by descending old rank";
  EXPECT_EQ(sub->allreduce_value(rank, ReduceOp::Sum), rank_sum);
  // Broadcast from the sub-communicator's rank 0 (the highest old rank of the parity class).
  int v = rank;
  sub->broadcast(&v, 1, DType::I32, 0);
  EXPECT_EQ(v, rank + 2 * above);
}

TEST(Comm, SplitWithNoColorGivesNull) {
  const int rank = W().rank(), size = W().size();
  auto sub = W().split(rank == 0 ? Communicator::kNoColor : 7, rank);
  if (rank == 0) {
    EXPECT_EQ(sub, nullptr);
  } else {
    ASSERT_NE(sub, nullptr);
    EXPECT_EQ(sub->size(), size - 1);
    EXPECT_EQ(sub->rank(), rank - 1);
    EXPECT_EQ(sub->allreduce_value(1, ReduceOp::Sum), size - 1);
  }
}

TEST(Comm, DupIsIndependentAndEqual) {
  auto d = W().dup();
  EXPECT_EQ(d->rank(), W().rank());
  EXPECT_EQ(d->size(), W().size());
  // Interleave a pending operation on the dup with a blocking one on the world: they are
  // separate communication contexts, so this is legal and must not mix up the data.
  int64_t a = W().rank() + 1;
  Request r = d->iallreduce(&a, &a, 1, DType::I64, ReduceOp::Sum);
  const int64_t b = W().allreduce_value(int64_t{10}, ReduceOp::Sum);
  r.wait();
  EXPECT_EQ(a, int64_t{W().size()} * (W().size() + 1) / 2);
  EXPECT_EQ(b, 10 * W().size());
}

TEST(Comm, TensorOverloads) {
  const int rank = W().rank(), size = W().size();
  auto t = edp::Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, float(rank)});
  W().allreduce(t, ReduceOp::Max);
  EXPECT_EQ(t.item(5), float(size - 1));
  EXPECT_EQ(t.item(0), 1.0f);

  auto in = edp::Tensor::from_vector<int32_t>({2}, {rank, 2 * rank});
  edp::Tensor out = edp::Tensor::zeros({size, 2}, DType::I32);
  W().allgather(in, out);
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(out.item(2 * r), r);
    EXPECT_EQ(out.item(2 * r + 1), 2 * r);
  }
  edp::Tensor sum = edp::Tensor::zeros({2}, DType::I32);
  W().allreduce(in, sum, ReduceOp::Sum);
  EXPECT_EQ(sum.item(1), size * (size - 1));

  edp::Tensor b = edp::Tensor::full({4}, rank == 0 ? 5.0 : -1.0, DType::F64);
  W().broadcast(b, 0);
  EXPECT_EQ(b.item(3), 5.0);

  // Checks that fail the same way on every rank, before any communication.
  edp::Tensor wrong = edp::Tensor::zeros({size + 1, 2}, DType::I32);
  EXPECT_THROW(W().allgather(in, wrong), edp::ShapeError);
  edp::Tensor wrong_type = edp::Tensor::zeros({2}, DType::F32);
  EXPECT_THROW(W().allreduce(in, wrong_type, ReduceOp::Sum), edp::ShapeError);
  EXPECT_THROW(W().broadcast(b, size), edp::Error);
  EXPECT_THROW(W().allreduce(nullptr, nullptr, -1, DType::F32, ReduceOp::Sum), edp::Error);
}

TEST(CommThread, ManyQueuedAllreducesCompleteInOrder) {
  edp::comm::CommThread ct(W().dup());
  const int size = W().size();
  // 16 buckets of different sizes, queued before any completes, as DDP's backward does.
  std::vector<std::vector<float>> buckets;
  for (int b = 0; b < 16; ++b) buckets.push_back(input<float>(W().rank() + b, 1000 + 977 * b));
  std::vector<Request> reqs;
  for (auto& v : buckets)
    reqs.push_back(ct.allreduce(v.data(), static_cast<int64_t>(v.size()), DType::F32, ReduceOp::Sum));
  // Meanwhile the main thread may compute; here it only checks that waiting in any order works.
  for (int b = 15; b >= 0; --b) {
    reqs[static_cast<size_t>(b)].wait();
    std::vector<float> want(buckets[static_cast<size_t>(b)].size(), 0.0f);
    for (int r = 0; r < size; ++r) {
      auto x = input<float>(r + b, static_cast<int64_t>(want.size()));
      for (size_t i = 0; i < want.size(); ++i) want[i] += x[i];
    }
    EXPECT_TRUE(same(buckets[static_cast<size_t>(b)], want)) << "bucket " << b;
  }
  ct.synchronize();
}

TEST(CommThread, AFailedTaskFailsTheRestWithoutCommunicating) {
  edp::comm::CommThread ct(W().dup());
  int64_t x = 1;
  Request ok = ct.allreduce(&x, 1, DType::I64, ReduceOp::Sum);
  // Fails on every rank alike (no collective inside), so no rank is left waiting.
  Request bad = ct.submit([](Communicator&) { throw edp::Error("bucket 3 has the wrong size"); });
  int64_t y = 1;
  Request skipped = ct.allreduce(&y, 1, DType::I64, ReduceOp::Sum);
  ok.wait();
  EXPECT_EQ(x, W().size());
  EXPECT_THROW(bad.wait(), edp::Error);
  try {
    skipped.wait();
    ADD_FAILURE() << "a task after a failure ran";
  } catch (const edp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bucket 3 has the wrong size"), std::string::npos) << e.what();
  }
  EXPECT_EQ(y, 1) << "the skipped allreduce must not have touched its buffer";
  EXPECT_THROW(ct.synchronize(), edp::Error);
}

}  // namespace

// comm::check_agreement: silent when the ranks agree; otherwise every rank throws one message
// naming each differing setting with each value and its ranks.
TEST(Agreement, NamesEachDifferenceWithRanksAndValues) {
  Communicator& w = W();
  const std::vector<edp::comm::Setting> same = {{"batch", "64"}, {"lr", "0.1"}};
  EXPECT_NO_THROW(edp::comm::check_agreement(w, same, "test"));
  if (w.size() < 2) return;
  // Rank 1 differs on "batch"; every rank differs on "seed"; "lr" agrees.
  const std::vector<edp::comm::Setting> mine = {
      {"batch", w.rank() == 1 ? "32" : "64"}, {"lr", "0.1"}, {"seed", std::to_string(100 + w.rank())}};
  try {
    edp::comm::check_agreement(w, mine, "test");
    ADD_FAILURE() << "no error";
  } catch (const edp::Error& e) {
    const std::string m = e.what();
    std::string others = "ranks 0";
    for (int r = 2; r < w.size(); ++r) others += "," + std::to_string(r);
    if (w.size() == 2) others = "rank 0";
    EXPECT_NE(m.find("batch: '64' on " + others + "; '32' on rank 1"), std::string::npos) << m;
    EXPECT_NE(m.find("seed: '100' on rank 0; '101' on rank 1"), std::string::npos) << m;
    EXPECT_EQ(m.find("lr:"), std::string::npos) << m;
  }
  // Different lists of names (different programs): an error, not a hang.
  std::vector<edp::comm::Setting> names = same;
  if (w.rank() == 1) names.emplace_back("extra", "1");
  EXPECT_THROW(edp::comm::check_agreement(w, names, "test"), edp::Error);
}
