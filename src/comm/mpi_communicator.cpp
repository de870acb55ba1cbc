// The MPI backend of edp::comm::Communicator (Open MPI from Debian; any MPI-3 library works).
// Its grow is mpi_grow.cpp, its start and end mpi_init.cpp; what stays here past 600 lines is the
// collectives and the host shared-memory path they dispatch to, which change together.
// Compiled only when CMake finds MPI. Each collective maps to one MPI call per chunk of at most
// INT_MAX elements (MPI counts are int); Avg is MPI_SUM followed by a division in place.
//
// Ranks that share a host move data through edp's shared memory (host_shm.h), not MPI's, whatever
// started them: on one host allreduce, broadcast and barrier run there entirely; across hosts an
// allreduce reduces within each host, then among one rank per host (MPI), then hands the result
// back within the host. allgather and the non-blocking operations stay MPI's. docs/elastic.md,
// "Which transport", says why and what each pair of ranks uses.
#include "mpi_check.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <random>
#include <csignal>
#include <fstream>
#include <sstream>
#include <thread>
#include <cstdio>
#include <functional>
#include <mutex>
#include <vector>

#include "backend.h"
#include "core/text.h"
#include "edp/comm/membership.h"
#include "edp/core/knobs.h"
#include "edp/core/log.h"
#include "edp/core/process.h"
#include "edp/core/stopwatch.h"
#include "host_shm.h"
#include "stall.h"
#include "mpi_internal.h"

namespace edp::comm::detail {

// Under MPI_THREAD_SERIALIZED two threads inside MPI at once is undefined behaviour; edp makes it
// a loud error instead. Under MPI_THREAD_MULTIPLE the guard is a no-op.
bool g_serialized_check = false;

namespace {
std::mutex g_mpi_entry;

class EntryGuard {
 public:
  explicit EntryGuard(const char* what) {
    if (!g_serialized_check) return;
    lock_ = std::unique_lock<std::mutex>(g_mpi_entry, std::try_to_lock);
    EDP_CHECK(lock_.owns_lock(), "comm: ", what,
              " was called while another thread of this process was inside MPI, but MPI granted "
              "only MPI_THREAD_SERIALIZED: make the main thread wait for the communication "
              "thread's handles before calling MPI, or run with an MPI that grants "
              "MPI_THREAD_MULTIPLE");
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::U8: return MPI_UINT8_T;
    case DType::BF16: break;  // MPI has no bfloat16 sum
  }
  throw Error(std::string("comm: MPI collectives of ") + dtype_name(t) + " are not supported (reduce float32)");
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  throw Error("comm: unsupported reduce op");
}

}  // namespace

int to_mpi(ThreadLevel t) {
  switch (t) {
    case ThreadLevel::Single: return MPI_THREAD_SINGLE;
    case ThreadLevel::Funneled: return MPI_THREAD_FUNNELED;
    case ThreadLevel::Serialized: return MPI_THREAD_SERIALIZED;
    case ThreadLevel::Multiple: return MPI_THREAD_MULTIPLE;
  }
  return MPI_THREAD_SINGLE;
}

ThreadLevel from_mpi(int t) {
  if (t >= MPI_THREAD_MULTIPLE) return ThreadLevel::Multiple;
  if (t >= MPI_THREAD_SERIALIZED) return ThreadLevel::Serialized;
  if (t >= MPI_THREAD_FUNNELED) return ThreadLevel::Funneled;
  return ThreadLevel::Single;
}

ThreadLevel g_granted = ThreadLevel::Single;

namespace {

const char* at(const void* p, int64_t elems, size_t esize) {
  return static_cast<const char*>(p) + static_cast<size_t>(elems) * esize;
}
char* at(void* p, int64_t elems, size_t esize) {
  return static_cast<char*>(p) + static_cast<size_t>(elems) * esize;
}

// A non-blocking operation: its MPI requests (one per chunk) and the step to run once they are
// all complete (Avg's division).
class MpiRequest final : public RequestImpl {
 public:
  std::vector<MPI_Request> reqs;
  std::function<void()> finish;
  OpTicket ticket;  // in the stall inspector's table until complete

  bool test() override {
    EntryGuard g("Request::test");
    int flag = 0;
    MPI_CHECK(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &flag, MPI_STATUSES_IGNORE));
    if (flag) complete();
    return flag != 0;
  }
  void wait() override {
    {
      EntryGuard g("Request::wait");
      MPI_CHECK(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE));
    }
    complete();
  }

 private:
  void complete() {
    ticket.done();
    if (finish) finish();
    finish = nullptr;
  }
};

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed on destruction) unless it is MPI_COMM_WORLD. Collective over
  // `comm`: the ranks learn which of them share a host and set up their shared memory.
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    EntryGuard g("Communicator construction");
    MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &size_));
    max_chunk_ = max_chunk_elements(INT_MAX);
    place_ranks();
    if (max_local_ > 1) setup_host_path();
    transport_ = describe_transport();
  }

  // Forgets the handle (someone else disconnects or frees it).
  void release() {
    free_host_path(false);
    comm_ = MPI_COMM_WORLD;
  }

  ~MpiCommunicator() override {
    free_host_path();
    if (comm_ == MPI_COMM_WORLD) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string backend() const override { return "mpi"; }
  ThreadLevel thread_level() const override { return g_granted; }

  void allreduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op) override {
    check_count(count, "allreduce");
    EntryGuard g("allreduce");
    const size_t es = dtype_size(dtype);
    const bool in_place = send == recv;
    (void)mpi_type(dtype);  // the same types on every path
    if (host_path_) {
      OpTicket t("allreduce", hosts_ == 1 ? "shm" : "shm+mpi", count, dtype);
      if (!in_place && count > 0) std::memcpy(recv, send, static_cast<size_t>(count) * es);
      host_allreduce(recv, count, dtype, op);
    } else {
      OpTicket t("allreduce", "mpi", count, dtype);
      for (int64_t off = 0; off < count; off += max_chunk_) {
        const int n = chunk(count, off);
        MPI_CHECK(MPI_Allreduce(in_place ? MPI_IN_PLACE : at(send, off, es), at(recv, off, es), n,
                                mpi_type(dtype), mpi_op(op), comm_));
      }
    }
    if (op == ReduceOp::Avg) divide_inplace(recv, count, dtype, size_);
  }

  void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op) override {
    check_count(count, "reduce_scatter");
    EntryGuard g("reduce_scatter");
    (void)mpi_type(dtype);
    if (host_path_ && hosts_ == 1) {
      OpTicket t("reduce_scatter", "shm", count, dtype);
      shm_->reduce_scatter(send, recv, count, dtype, op);
    } else {
      OpTicket t("reduce_scatter", "mpi", count, dtype);
      EDP_CHECK(count <= INT_MAX, "comm::reduce_scatter: blocks of ", count, " elements are more than MPI's int counts");
      const size_t block = static_cast<size_t>(count) * dtype_size(dtype);
      if (recv == static_cast<const char*>(send) + static_cast<size_t>(rank_) * block) {
        // In place: MPI's in-place form reduces the whole buffer into its first block.
        void* buf = const_cast<void*>(send);
        MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, buf, static_cast<int>(count), mpi_type(dtype), mpi_op(op), comm_));
        if (recv != buf && block > 0) std::memmove(recv, buf, block);
      } else {
        MPI_CHECK(MPI_Reduce_scatter_block(send, recv, static_cast<int>(count), mpi_type(dtype), mpi_op(op), comm_));
      }
    }
    if (op == ReduceOp::Avg) divide_inplace(recv, count, dtype, size_);
  }

  void alltoallv(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                 const std::vector<int64_t>& recv_counts, DType dtype) override {
    EDP_CHECK(static_cast<int>(send_counts.size()) == size_ && static_cast<int>(recv_counts.size()) == size_,
              "comm::alltoallv: ", send_counts.size(), " send and ", recv_counts.size(),
              " receive counts for a communicator of ", size_, " ranks");
    EntryGuard g("alltoallv");
    const size_t es = dtype_size(dtype);
    int64_t sent = 0, received = 0;
    for (int r = 0; r < size_; ++r) {
      check_count(send_counts[static_cast<size_t>(r)], "alltoallv");
      check_count(recv_counts[static_cast<size_t>(r)], "alltoallv");
      sent += send_counts[static_cast<size_t>(r)];
      received += recv_counts[static_cast<size_t>(r)];
    }
    OpTicket t("alltoallv", "mpi", std::max(sent, received), dtype);
    // Bytes, in messages of at most max_chunk_ bytes; MPI keeps the messages of one pair in order.
    constexpr int kTag = 0x3ed;
    std::vector<MPI_Request> reqs;
    int64_t so = 0, ro = 0;
    for (int r = 0; r < size_; ++r) {
      const int64_t sb = send_counts[static_cast<size_t>(r)] * static_cast<int64_t>(es);
      const int64_t rb = recv_counts[static_cast<size_t>(r)] * static_cast<int64_t>(es);
      if (r == rank_) {
        EDP_CHECK(sb == rb, "comm::alltoallv: rank ", rank_, " sends itself ", send_counts[static_cast<size_t>(r)],
                  " element(s) and expects ", recv_counts[static_cast<size_t>(r)]);
        if (sb > 0) std::memmove(static_cast<char*>(recv) + ro, static_cast<const char*>(send) + so, static_cast<size_t>(sb));
      } else {
        for (int64_t off = 0; off < rb; off += max_chunk_) {
          reqs.emplace_back();
          MPI_CHECK(MPI_Irecv(static_cast<char*>(recv) + ro + off, chunk(rb, off), MPI_BYTE, r, kTag, comm_, &reqs.back()));
        }
        for (int64_t off = 0; off < sb; off += max_chunk_) {
          reqs.emplace_back();
          MPI_CHECK(MPI_Isend(const_cast<char*>(static_cast<const char*>(send)) + so + off, chunk(sb, off), MPI_BYTE, r,
                              kTag, comm_, &reqs.back()));
        }
      }
      so += sb;
      ro += rb;
    }
    MPI_CHECK(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE));
  }

  void broadcast(void* buf, int64_t count, DType dtype, int root) override {
    check_count(count, "broadcast");
    check_root(root, "broadcast");
    EntryGuard g("broadcast");
    const size_t es = dtype_size(dtype);
    if (host_path_ && hosts_ == 1) {
      OpTicket t("broadcast", "shm", count, dtype);
      shm_->broadcast(buf, count * static_cast<int64_t>(es), root);
      return;
    }
    OpTicket t("broadcast", "mpi", count, dtype);
    for (int64_t off = 0; off < count; off += max_chunk_)
      MPI_CHECK(MPI_Bcast(at(buf, off, es), chunk(count, off), mpi_type(dtype), root, comm_));
  }

  void allgather(const void* send, void* recv, int64_t count, DType dtype) override {
    check_count(count, "allgather");
    EntryGuard g("allgather");
    OpTicket t("allgather", "mpi", count, dtype);
    const size_t es = dtype_size(dtype);
    const bool in_place = send == at(recv, count * rank_, es);
    for (int64_t off = 0; off < count; off += max_chunk_) {
      const int n = chunk(count, off);
      RecvType rt(count, n, dtype);
      MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : at(send, off, es), n, mpi_type(dtype),
                              at(recv, off, es), rt.count, rt.type, comm_));
    }
  }

  void barrier() override {
    EntryGuard g("barrier");
    if (host_path_ && hosts_ == 1) {
      OpTicket t("barrier", "shm", 0, DType::U8);
      shm_->barrier();
      return;
    }
    OpTicket t("barrier", "mpi", 0, DType::U8);
    MPI_CHECK(MPI_Barrier(comm_));
  }

  std::string transport() const override { return transport_; }
  bool as_fast_as_one_launch() const override { return host_path_ || !apart_; }

  Request iallreduce(const void* send, void* recv, int64_t count, DType dtype,
                     ReduceOp op) override {
    check_count(count, "iallreduce");
    EntryGuard g("iallreduce");
    auto r = std::make_unique<MpiRequest>();
    r->ticket = OpTicket("allreduce", "mpi", count, dtype);
    const size_t es = dtype_size(dtype);
    const bool in_place = send == recv;
    for (int64_t off = 0; off < count; off += max_chunk_) {
      r->reqs.emplace_back();
      MPI_CHECK(MPI_Iallreduce(in_place ? MPI_IN_PLACE : at(send, off, es), at(recv, off, es),
                               chunk(count, off), mpi_type(dtype), mpi_op(op), comm_,
                               &r->reqs.back()));
    }
    if (op == ReduceOp::Avg) {
      const int n = size_;
      r->finish = [recv, count, dtype, n] { divide_inplace(recv, count, dtype, n); };
    }
    return Request(std::move(r));
  }

  Request ibroadcast(void* buf, int64_t count, DType dtype, int root) override {
    check_count(count, "ibroadcast");
    check_root(root, "ibroadcast");
    EntryGuard g("ibroadcast");
    auto r = std::make_unique<MpiRequest>();
    r->ticket = OpTicket("broadcast", "mpi", count, dtype);
    const size_t es = dtype_size(dtype);
    for (int64_t off = 0; off < count; off += max_chunk_) {
      r->reqs.emplace_back();
      MPI_CHECK(MPI_Ibcast(at(buf, off, es), chunk(count, off), mpi_type(dtype), root, comm_,
                           &r->reqs.back()));
    }
    return Request(std::move(r));
  }

  Request iallgather(const void* send, void* recv, int64_t count, DType dtype) override {
    check_count(count, "iallgather");
    EntryGuard g("iallgather");
    auto r = std::make_unique<MpiRequest>();
    r->ticket = OpTicket("allgather", "mpi", count, dtype);
    const size_t es = dtype_size(dtype);
    const bool in_place = send == at(recv, count * rank_, es);
    for (int64_t off = 0; off < count; off += max_chunk_) {
      const int n = chunk(count, off);
      RecvType rt(count, n, dtype);  // freeing a type after posting is allowed (MPI-3 §4.1.9)
      r->reqs.emplace_back();
      MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : at(send, off, es), n, mpi_type(dtype),
                               at(recv, off, es), rt.count, rt.type, comm_, &r->reqs.back()));
    }
    return Request(std::move(r));
  }

  Request ibarrier() override {
    EntryGuard g("ibarrier");
    auto r = std::make_unique<MpiRequest>();
    r->ticket = OpTicket("barrier", "mpi", 0, DType::U8);
    r->reqs.emplace_back();
    MPI_CHECK(MPI_Ibarrier(comm_, &r->reqs.back()));
    return Request(std::move(r));
  }

  std::unique_ptr<Communicator> split(int color, int key) const override {
    MPI_Comm c = MPI_COMM_NULL;
    {
      EntryGuard g("split");
      OpTicket t("communicator split", "mpi", 0, DType::U8);
      MPI_CHECK(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &c));
    }
    if (c == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(c);
  }

  std::unique_ptr<Communicator> dup() const override {
    MPI_Comm c = MPI_COMM_NULL;
    {
      EntryGuard g("dup");
      OpTicket t("communicator dup", "mpi", 0, DType::U8);
      MPI_CHECK(MPI_Comm_dup(comm_, &c));
    }
    return std::make_unique<MpiCommunicator>(c);
  }

 private:
  // Where each rank's `n` elements of a chunk land in allgather's receive buffer: one element of
  // a type spanning n elements whose extent is a whole rank block (`count` elements), so rank
  // j's chunk goes to recv + off + j*count. Unchunked, it is plainly (count, dtype).
  struct RecvType {
    MPI_Datatype type = MPI_DATATYPE_NULL;
    int count = 0;
    bool derived = false;
    RecvType(int64_t block, int n, DType dtype) {
      if (block == n) {
        type = mpi_type(dtype);
        count = n;
        return;
      }
      MPI_Datatype contig;
      MPI_CHECK(MPI_Type_contiguous(n, mpi_type(dtype), &contig));
      const MPI_Aint extent = static_cast<MPI_Aint>(block) * static_cast<MPI_Aint>(dtype_size(dtype));
      MPI_CHECK(MPI_Type_create_resized(contig, 0, extent, &type));
      MPI_Type_free(&contig);
      MPI_CHECK(MPI_Type_commit(&type));
      count = 1;
      derived = true;
    }
    ~RecvType() {
      if (derived) MPI_Type_free(&type);
    }
  };

  int chunk(int64_t count, int64_t off) const {
    return static_cast<int>(std::min<int64_t>(max_chunk_, count - off));
  }
  static void check_count(int64_t count, const char* op) {
    EDP_CHECK(count >= 0, "comm::", op, ": negative element count ", count);
  }
  void check_root(int root, const char* op) const {
    EDP_CHECK(root >= 0 && root < size_, "comm::", op, ": root ", root,
              " is not a rank of this communicator (size ", size_, ")");
  }

  // Which ranks share a host, and from which launch each came (mpirun's, or a grow's spawn): every
  // rank learns every rank's keys, so every decision below is the same on all of them.
  void place_ranks() {
    const char* ns = std::getenv("PMIX_NAMESPACE");  // one per launch: mpirun's job, each spawn
    const uint64_t mine[2] = {host_key(), std::hash<std::string>{}(ns ? ns : "")};
    std::vector<uint64_t> all(2 * static_cast<size_t>(size_));
    MPI_CHECK(MPI_Allgather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, comm_));
    std::vector<uint64_t> hosts;
    std::vector<int> per_host;
    std::vector<std::vector<uint64_t>> launches;  // per host, the launches of its ranks
    for (int r = 0; r < size_; ++r) {
      const uint64_t h = all[2 * static_cast<size_t>(r)], l = all[2 * static_cast<size_t>(r) + 1];
      const size_t i = static_cast<size_t>(std::find(hosts.begin(), hosts.end(), h) - hosts.begin());
      if (i == hosts.size()) {
        hosts.push_back(h);
        per_host.push_back(0);
        launches.emplace_back();
      }
      if (r == rank_) {
        host_ = static_cast<int>(i);
        local_rank_ = per_host[i];
      }
      ++per_host[i];
      auto& ls = launches[i];
      if (std::find(ls.begin(), ls.end(), l) == ls.end()) ls.push_back(l);
    }
    hosts_ = static_cast<int>(hosts.size());
    local_size_ = per_host[static_cast<size_t>(host_)];
    for (int r = 0; r < size_; ++r)
      if (all[2 * static_cast<size_t>(r)] == mine[0]) {
        leader_ = r;
        break;
      }
    max_local_ = *std::max_element(per_host.begin(), per_host.end());
    for (size_t i = 0; i < hosts.size(); ++i) {
      const int n = per_host[i], k = static_cast<int>(launches[i].size());
      together_ = together_ || n > k;  // two ranks of one launch on this host
      apart_ = apart_ || k > 1;        // two launches on this host
    }
  }

  // Collective: the shared memory of each host's ranks, all or nothing over the communicator (a
  // host whose ranks cannot share it, or a rank with EDP_HOST_SHM=off, sends every rank to MPI).
  // Two collectives: the first rank of each host creates the segment and every rank learns its
  // host's name and stamp from one allgather; the others map it and all agree.
  void setup_host_path() {
    const bool wanted = knobs::get_string("EDP_HOST_SHM") != "off";
    const int64_t slot = HostShm::slot_bytes_for(max_local_);
    std::string why;
    std::unique_ptr<HostShm> shm;
    struct Record {
      uint64_t nonce = 0;  // 0: no segment
      char name[56] = {};
    };
    static_assert(sizeof(Record) == 64);
    Record mine;
    if (local_size_ > 1 && local_rank_ == 0 && wanted) {
      try {
        mine.nonce = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}() ^ 1;
        shm = HostShm::create(local_size_, slot, mine.nonce);
        std::snprintf(mine.name, sizeof mine.name, "%s", shm->name().c_str());
      } catch (const std::exception& e) {
        why = e.what();
        mine.nonce = 0;
      }
    }
    std::vector<Record> all(static_cast<size_t>(size_));
    MPI_CHECK(MPI_Allgather(&mine, sizeof(Record), MPI_BYTE, all.data(), sizeof(Record), MPI_BYTE, comm_));
    const Record& head = all[static_cast<size_t>(leader_)];
    if (local_size_ > 1 && local_rank_ != 0 && wanted && head.nonce != 0) {
      try {
        shm = HostShm::attach(std::string(head.name, strnlen(head.name, sizeof head.name)), local_rank_, local_size_,
                              slot, head.nonce);
      } catch (const std::exception& e) {
        why = e.what();
      }
    }
    int ok = wanted && (local_size_ == 1 || shm) ? 1 : 0;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm_));
    if (shm && local_rank_ == 0) shm->unlink_name();  // every member has mapped it, or given up
    if (!ok) {
      static std::atomic<bool> said{false};  // once per process, not per communicator
      if (!why.empty() && !said.exchange(true))
        log::warn(why, "; MPI carries the collectives between ranks of a host (docs/elastic.md, \"Which transport\")");
      return;
    }
    if (hosts_ > 1) MPI_CHECK(MPI_Comm_split(comm_, local_rank_ == 0 ? 0 : MPI_UNDEFINED, rank_, &leaders_));
    shm_ = std::move(shm);
    host_chunk_bytes_ = slot;
    host_path_ = true;
  }

  void free_host_path(bool free_comms = true) {
    shm_.reset();
    int fin = 0;
    MPI_Finalized(&fin);
    if (leaders_ != MPI_COMM_NULL && free_comms && !fin) MPI_Comm_free(&leaders_);
    leaders_ = MPI_COMM_NULL;
    host_path_ = false;
  }

  // In place. Within the host through shared memory; across hosts the host's sum is reduced among
  // one rank per host (MPI) chunk by chunk, with the same chunks on every host.
  void host_allreduce(void* buf, int64_t count, DType dtype, ReduceOp op) {
    if (hosts_ == 1) {
      shm_->allreduce(buf, count, dtype, op);
      return;
    }
    const MPI_Datatype t = mpi_type(dtype);
    const MPI_Op o = mpi_op(op);
    auto cross = [&](void* p, int64_t n) {
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, p, static_cast<int>(n), t, o, leaders_));
    };
    if (shm_) {
      shm_->allreduce(buf, count, dtype, op, cross);
      return;
    }
    const size_t es = dtype_size(dtype);  // alone on this host: the others' chunks
    const int64_t per = host_chunk_bytes_ / static_cast<int64_t>(es);
    for (int64_t off = 0; off < count; off += per) cross(at(buf, off, es), std::min(per, count - off));
  }

  // What moves data between which ranks (Communicator::transport).
  std::string describe_transport() const {
    std::vector<std::string> parts;
    if (together_)
      parts.emplace_back(std::string("same host, same launch: ") +
                         (host_path_ ? "edp shared memory" : "MPI (Open MPI: its shared memory)"));
    if (apart_)
      parts.emplace_back(std::string("same host, separate launches (a grow's spawn): ") +
                         (host_path_ ? "edp shared memory" : "MPI (Open MPI 4.1: TCP on loopback)"));
    if (hosts_ > 1)
      parts.emplace_back(std::string("other hosts: MPI (Open MPI's network transport") +
                         (host_path_ && max_local_ > 1 ? ", one rank per host)" : ")"));
    if (parts.empty()) return "one rank";
    return text::join(parts, "; ");
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  int64_t max_chunk_ = INT_MAX;
  int host_ = 0, hosts_ = 1, max_local_ = 1;  // this rank's host (index), the hosts, the most ranks on one
  int leader_ = 0;                            // the first rank of this rank's host
  bool together_ = false, apart_ = false;     // some host has two ranks of one launch / of two launches
  bool host_path_ = false;                    // the collectives go through shm_ (and leaders_)
  std::unique_ptr<HostShm> shm_;              // null when this rank is alone on its host
  MPI_Comm leaders_ = MPI_COMM_NULL;          // across hosts: the first rank of each host
  int64_t host_chunk_bytes_ = 0;
  std::string transport_;

 public:
  MPI_Comm handle() const { return comm_; }
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm) { return std::make_unique<MpiCommunicator>(comm); }
MPI_Comm mpi_handle(const Communicator& c) {
  const auto* m = dynamic_cast<const MpiCommunicator*>(&c);
  return m ? m->handle() : MPI_COMM_NULL;
}
void mpi_release(Communicator& c) {
  if (auto* m = dynamic_cast<MpiCommunicator*>(&c)) m->release();
}

// The processes mpirun (or one MPI_Comm_spawn) started together; every one of them takes part in
// the exit lobby (see mpi_finalize).
MPI_Comm g_exit_comm = MPI_COMM_NULL;
// And one communicator for each grow this process took part in, on either side (a copy of the
// merged communicator, made right after the merge): the processes a grow started wait in the
// exit lobby for those that started them, whether the grow joined them or failed, so that no
// group of spawned processes ends while the job runs (see mpi_finalize).
std::mutex g_lobby_mu;
std::vector<MPI_Comm> g_grow_lobbies;
void add_grow_lobby(MPI_Comm merged) {  // collective over `merged`
  MPI_Comm lobby = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_dup(merged, &lobby));
  MPI_CHECK(MPI_Comm_set_errhandler(lobby, MPI_ERRORS_RETURN));
  std::lock_guard<std::mutex> lock(g_lobby_mu);
  g_grow_lobbies.push_back(lobby);
}
bool g_spawned = false;
// Processes of this mpirun job so far: those it started and every one spawned since (a rank that
// left in a shrink waits in the exit lobby until the end, so it still holds its slot).
int g_job_processes = 0;

// This program's command line, from /proc/self/cmdline (what the rank shim exec'd).
std::vector<std::string> own_command_line() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> out;
  std::string arg;
  while (std::getline(f, arg, '\0')) out.push_back(arg);
  return out;
}

}  // namespace edp::comm::detail
