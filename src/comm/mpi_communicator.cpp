// The MPI backend of edp::comm::Communicator (Open MPI from Debian; any MPI-3 library works).
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

namespace edp::comm::detail {
namespace {

// Under MPI_THREAD_SERIALIZED two threads inside MPI at once is undefined behaviour; edp makes it
// a loud error instead. Under MPI_THREAD_MULTIPLE the guard is a no-op.
bool g_serialized_check = false;
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


}  // namespace

bool mpi_spawned() { return g_spawned; }

namespace {
bool g_unjoined = false;  // a new rank that has not passed the ready handshake yet
}

// Why this job grows in place no more: a grow whose MPI_Comm_spawn never returned was given up
// (Grow::poll, EDP_SPAWN_TIMEOUT), and its threads may still be inside MPI (empty: none was).
std::string g_spawn_stuck;
int g_exit_code = 0;  // mpi_exit_code

bool mpi_unjoined() { return g_unjoined; }

void mpi_ready(Communicator& world, bool ok) {
  // The running ranks' Grow waits for every new rank's part. Waited for without spinning, which
  // on shared cores would take the CPU the running ranks train with.
  int v = ok ? 1 : 0;
  Request r = world.iallreduce(&v, &v, 1, DType::I32, ReduceOp::Min);
  while (!r.test()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  g_unjoined = false;
  if (v == 1) return;
  // The grow is abandoned (this rank or another new one failed during its setup, or the running
  // ranks gave it up): this process ends its program and waits in the exit lobby, idle, until the
  // running job ends (mpi_finalize) — an exit code other than 0 would make mpirun end the
  // running job too.
  if (ok)
    std::fprintf(stderr, "edp: a rank started by a grow leaves: the grow was abandoned (another new rank failed "
                         "before joining, or the running ranks stopped waiting for the new ones)\n");
  std::fflush(stderr);
  mpi_finalize();
  std::_Exit(0);
}

namespace {

// What a grow starts and how: the command, its environment, and where (host by host).
struct SpawnPlan {
  std::vector<std::string> cmd;                     // [wrapper words...] executable args...
  std::string env;                                  // "KEY=VALUE\n..."
  std::vector<std::pair<std::string, int>> per_host;  // empty: wherever Open MPI maps them
  int count = 0;
};

SpawnPlan plan_spawn(const Communicator& current, int count, const std::vector<std::string>& env) {
  SpawnPlan p;
  p.count = count;
  // What to start: [EDP_SPAWN_WRAPPER words...] <this executable> <this program's arguments>.
  {
    std::istringstream w(knobs::get_string("EDP_SPAWN_WRAPPER"));
    for (std::string word; w >> word;) p.cmd.push_back(word);
  }
  const std::vector<std::string> line = own_command_line();
  p.cmd.push_back(self_executable());
  for (size_t i = 1; i < line.size(); ++i) p.cmd.push_back(line[i]);
  p.env = "EDP_SPAWN_RANK_BASE=" + std::to_string(current.size()) + "\n";
  p.env += "EDP_SPAWN_JOB_PROCESSES=" + std::to_string(g_job_processes + count) + "\n";
  // The new processes use the PMIx store this one does (see pmix_store in mpi_init).
  if (const char* gds = std::getenv("PMIX_MCA_gds"); gds && *gds) p.env += std::string("PMIX_MCA_gds=") + gds + "\n";
  for (const auto& e : env) p.env += e + "\n";
  // Several hosts (edprun's EDP_LAUNCH_HOSTS): the new ranks go where a start at the grown size
  // would put them, host by host in rank order (one command per host, each naming its host), not
  // wherever Open MPI finds a free slot first; the shim places them by the same rule.
  const auto hosts = knobs::launch_hosts();
  const int from = current.size(), to = current.size() + count;
  for (int r = from; r < to && !hosts.empty(); ++r) {
    const knobs::HostSlot s = knobs::fill_slot(hosts, to, r);
    if (s.host < 0) {  // more ranks than the hosts take: let Open MPI map them
      p.per_host.clear();
      break;
    }
    const std::string& h = hosts[static_cast<size_t>(s.host)].name;
    if (p.per_host.empty() || p.per_host.back().first != h) p.per_host.emplace_back(h, 0);
    ++p.per_host.back().second;
  }
  return p;
}

// Every running rank (`comm`, root 0) starts the processes together: "" when they started (`inter`
// connects the running ranks with them), else why not (on rank 0; Open MPI 4.1 returns the error
// to the root only, see Grow::Impl::connect).
std::string spawn_over(SpawnPlan& p, MPI_Comm comm, MPI_Comm& inter) {
  std::vector<char*> args;
  for (size_t i = 1; i < p.cmd.size(); ++i) args.push_back(p.cmd[i].data());
  args.push_back(nullptr);
  char cwd[4096];
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "env", p.env.c_str());
  if (getcwd(cwd, sizeof cwd)) MPI_Info_set(info, "wdir", cwd);
  // The job's own mapping (edprun: --map-by slot:PE=n --bind-to core) planned the cores for the
  // ranks it started; new ranks are mapped one slot each and left unbound (Open MPI 4.1 would
  // otherwise refuse: "no available cpus").
  MPI_Info_set(info, "map_by", "slot");
  MPI_Info_set(info, "bind_to", "none");
  std::vector<int> errcodes(static_cast<size_t>(p.count), MPI_SUCCESS);
  int rc = MPI_SUCCESS;
  if (p.per_host.empty()) {
    rc = MPI_Comm_spawn(p.cmd[0].c_str(), args.data(), p.count, info, 0, comm, &inter, errcodes.data());
  } else {
    const int n = static_cast<int>(p.per_host.size());
    std::vector<char*> commands(static_cast<size_t>(n), p.cmd[0].data());
    std::vector<char**> argvs(static_cast<size_t>(n), args.data());
    std::vector<int> maxprocs;
    std::vector<MPI_Info> infos;
    for (const auto& [h, k] : p.per_host) {
      MPI_Info hi;
      MPI_Info_dup(info, &hi);
      MPI_Info_set(hi, "host", h.c_str());
      infos.push_back(hi);
      maxprocs.push_back(k);
    }
    rc = MPI_Comm_spawn_multiple(n, commands.data(), argvs.data(), maxprocs.data(), infos.data(), 0, comm, &inter,
                                 errcodes.data());
    for (auto& hi : infos) MPI_Info_free(&hi);
  }
  MPI_Info_free(&info);
  bool ok = rc == MPI_SUCCESS && inter != MPI_COMM_NULL;
  for (int e : errcodes) ok = ok && e == MPI_SUCCESS;
  if (ok) return "";
  if (inter != MPI_COMM_NULL) MPI_Comm_free(&inter);
  char msg[MPI_MAX_ERROR_STRING + 1] = {0};
  int len = 0;
  if (rc != MPI_SUCCESS) MPI_Error_string(rc, msg, &len);
  return ::edp::detail::concat("MPI_Comm_spawn could not start ", p.count, " rank(s) of ", p.cmd[0],
                               rc != MPI_SUCCESS ? ": " : "", msg,
                               " (under plain mpirun: no free slot — give mpirun more slots, e.g. --oversubscribe, "
                               "or use edprun)");
}

}  // namespace

}  // namespace edp::comm::detail

namespace edp::comm {

using detail::MpiCommunicator;

struct Grow::Impl {
  int rank = 0, count = 0;
  MPI_Comm dup = MPI_COMM_NULL;  // the running ranks' traffic of this grow, apart from the job's
  detail::SpawnPlan plan;
  std::thread thread;
  // This rank's thread: 0 connecting, 4 connected and posting the ready barrier, 1 posted,
  // 2 failed; 3 (rank 0 only): given up by poll() while the thread was still connecting.
  std::atomic<int> stage{0};
  std::atomic<bool> done{false};  // the thread has left connect()
  Stopwatch since;                // since the grow began: rank 0 bounds the spawn with it
  double timeout = 0;             // EDP_SPAWN_TIMEOUT (0: no bound)
  bool abandoned = false;         // every rank: poll() gave the grow up, its thread perhaps still in MPI
  std::unique_ptr<MpiCommunicator> grown;
  Request ready;     // the ready handshake: MIN over every rank of the grown job of "set up, 1"
  int ready_ok = 1;  // the running ranks' part, then the result
  std::string failure;  // the thread's: why the spawn failed (read after join)
  std::string error;
  bool joined = false;

  // The thread's stage, unless rank 0 has given the grow up meanwhile (3 stays).
  void set_stage(int to) {
    int cur = stage.load();
    while (cur != 3 && !stage.compare_exchange_weak(cur, to)) {
    }
  }

  // Every running rank, on its own thread (or inline without MPI_THREAD_MULTIPLE): the spawn over
  // all running ranks, the merge that puts them first, in their order, and the ready barrier.
  // (A spawn over MPI_COMM_SELF on rank 0 followed by MPI_Intercomm_create would keep a failed
  // spawn on rank 0 alone, but Open MPI 4.1 then mismatched the grown communicator's first
  // collectives when two or more ranks were started. Spawns beyond mpirun's slots, the failure
  // that Open MPI reports on the root only, are refused before this; see Grow::Grow.)
  void connect() {
    try {
      MPI_Comm inter = MPI_COMM_NULL, merged = MPI_COMM_NULL;
      std::string why = detail::spawn_over(plan, dup, inter);
      // Every rank decides alike, whatever each one's MPI said; rank 0's message goes to all.
      int ok = why.empty() ? 1 : 0;
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, dup));
      int64_t n = static_cast<int64_t>(why.size());
      MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT64_T, 0, dup));
      why.resize(static_cast<size_t>(n));
      MPI_CHECK(MPI_Bcast(why.data(), static_cast<int>(n), MPI_CHAR, 0, dup));
      if (!ok) {
        if (inter != MPI_COMM_NULL) MPI_Comm_free(&inter);
        failure = why.empty() ? "MPI_Comm_spawn failed on another rank" : why;
        set_stage(2);
        done = true;
        return;
      }
      MPI_CHECK(MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN));
      MPI_CHECK(MPI_Intercomm_merge(inter, 0, &merged));  // 0: the running ranks come first
      MPI_Comm_free(&inter);
      detail::add_grow_lobby(merged);  // with the new ranks' in mpi_init
      grown = std::make_unique<MpiCommunicator>(merged);
      // Rank 0 gave the grow up while this spawn was under way (poll, EDP_SPAWN_TIMEOUT): the new
      // ranks, connected after all, learn it from the handshake (its MIN is 0) and leave.
      int expected = 0;
      if (!stage.compare_exchange_strong(expected, 4)) ready_ok = 0;
      ready = grown->iallreduce(&ready_ok, &ready_ok, 1, DType::I32, ReduceOp::Min);  // the new ranks' ready_barrier()
      set_stage(1);
    } catch (const std::exception& e) {
      failure = e.what();
      set_stage(2);
    }
    done = true;
  }

  void join() {
    if (thread.joinable()) thread.join();
    joined = true;
  }
};

namespace {

// Grows given up while their threads were still inside MPI_Comm_spawn (EDP_SPAWN_TIMEOUT), with
// the state their (detached) threads use: never freed, since a thread may never return.
std::mutex g_abandoned_mu;
std::vector<Grow::Impl*> g_abandoned;

}  // namespace

Grow::Grow(Communicator& current, int count, const std::vector<std::string>& env) : impl_(std::make_unique<Impl>()) {
  EDP_CHECK(count >= 1, "comm::Grow: count must be >= 1, got ", count);
  auto* cur = dynamic_cast<MpiCommunicator*>(&current);
  if (!cur) throw SpawnError("cannot start new ranks on a '" + current.backend() + "' communicator: only MPI spawns");
  // A spawn given up earlier may still hold its threads inside MPI; another one beside it is not
  // risked (set alike on every rank, by poll's broadcast).
  if (!detail::g_spawn_stuck.empty()) throw SpawnError(detail::g_spawn_stuck);
  // Under plain mpirun without --oversubscribe, a spawn beyond mpirun's slots fails — and Open
  // MPI 4.1 then leaves mpirun running after the job ends. So such a spawn is refused here, alike
  // on every rank, before MPI is asked. Open MPI's own variables: the slots of the allocation,
  // and whether mpirun may oversubscribe.
  const char* uni = std::getenv("OMPI_UNIVERSE_SIZE");
  const char* over = std::getenv("OMPI_MCA_rmaps_base_oversubscribe");
  const int64_t universe = uni ? std::strtoll(uni, nullptr, 10) : 0;
  const bool oversubscribe = over && std::string(over) == "1";
  if (universe > 0 && !oversubscribe && detail::g_job_processes + count > universe)
    throw SpawnError(::edp::detail::concat(
        "mpirun has ", universe, " slot(s) and this job's processes hold ", detail::g_job_processes,
        " of them (ranks that left a shrink keep theirs until the job ends): ", count,
        " more do not fit; give mpirun more slots (--oversubscribe, a hostfile) or use edprun"));
  Impl& m = *impl_;
  m.rank = current.rank();
  m.count = count;
  m.timeout = knobs::get_double("EDP_SPAWN_TIMEOUT");
  m.plan = detail::plan_spawn(current, count, env);
  MPI_CHECK(MPI_Comm_dup(cur->handle(), &m.dup));
  MPI_CHECK(MPI_Comm_set_errhandler(m.dup, MPI_ERRORS_RETURN));
  if (detail::g_granted >= ThreadLevel::Multiple)
    m.thread = std::thread([&m] { m.connect(); });
  else
    m.connect();  // without MPI_THREAD_MULTIPLE: here, blocking (and unbounded)
}

Grow::~Grow() {
  if (impl_->abandoned) {  // its thread may still be inside MPI: kept for the end
    if (impl_->thread.joinable()) impl_->thread.detach();
    std::lock_guard<std::mutex> lock(g_abandoned_mu);
    g_abandoned.push_back(impl_.release());
    return;
  }
  impl_->join();
  if (impl_->dup != MPI_COMM_NULL) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Comm_free(&impl_->dup);
  }
}

Grow::State Grow::poll(Communicator& current) {
  Impl& m = *impl_;
  // 0: starting; 1: ready; 2: the spawn failed; 3: a new rank failed before it was ready;
  // 4: the spawn has not returned within EDP_SPAWN_TIMEOUT and is given up.
  int v = 0;
  if (current.rank() == 0) {
    const int st = m.stage;
    if (st == 2) {
      v = 2;
    } else if (st == 1 && m.ready.test()) {
      v = m.ready_ok ? 1 : 3;
    } else if (st == 0 && m.timeout > 0 && m.since.seconds() > m.timeout) {
      int expected = 0;
      if (m.stage.compare_exchange_strong(expected, 3)) v = 4;
    }
  } else if (m.stage == 1) {
    // The handshake progresses only inside MPI calls on every rank in it, and the job's own
    // collectives may not enter MPI at all (ranks of one host share memory).
    (void)m.ready.test();
  }
  current.broadcast(&v, 1, DType::I32, 0);
  if (v == 0) return State::kStarting;
  if (v == 4) {
    // Nothing interrupts a thread inside MPI_Comm_spawn: it is left there, and the job goes on at
    // its size. Should the spawn return after all, the thread tells the new ranks that the grow
    // is abandoned (the handshake), and they end.
    m.abandoned = true;
    m.error = ::edp::detail::concat(
        "the new ranks did not start within ", m.timeout, " s (EDP_SPAWN_TIMEOUT): MPI_Comm_spawn has not returned, "
        "the new processes are stuck in their MPI initialisation (docs/elastic.md, 'A spawn that does not return')");
    detail::g_spawn_stuck = ::edp::detail::concat(
        "an earlier grow of this job was given up because its MPI_Comm_spawn did not return within ", m.timeout,
        " s (EDP_SPAWN_TIMEOUT); this job does not start new ranks in place again");
    return State::kFailed;
  }
  m.join();  // every rank's thread has entered the handshake (1, 3), or has left after the spawn (2)
  if (v == 2) {
    // Rank 0's message on every rank.
    m.error = m.failure;
    int64_t n = static_cast<int64_t>(m.error.size());
    current.broadcast(&n, 1, DType::I64, 0);
    m.error.resize(static_cast<size_t>(n));
    current.broadcast(m.error.data(), n, DType::U8, 0);
    return State::kFailed;
  }
  m.ready.wait();
  if (v == 3) {
    // The grown communicator is dropped unused (MPI_Comm_disconnect hung here with Open MPI 4.1).
    // The new ranks have ended their programs and wait, idle, in the exit lobby until this job
    // ends (the grow's lobby, mpi_finalize), like ranks that left in a shrink.
    m.grown->release();
    detail::g_job_processes += m.count;  // they hold their slots until the end
    m.error = "a new rank failed during its setup, before it joined (its own message is above); the new ranks "
              "wait idle for the job's end";
    return State::kFailed;
  }
  return State::kReady;
}

std::unique_ptr<Communicator> Grow::take() {
  Impl& m = *impl_;
  EDP_CHECK(m.joined && m.grown, "comm::Grow::take() before poll() returned kReady");
  detail::g_job_processes += m.count;
  return std::move(m.grown);
}

const std::string& Grow::error() const { return impl_->error; }

namespace detail {

// At the end of the process: the grows given up (EDP_SPAWN_TIMEOUT) whose spawn returned after all
// finish their handshake (the new ranks learn that the grow is abandoned and end). True when a
// thread is still inside MPI_Comm_spawn: its new processes are stuck.
bool finish_abandoned_grows() {
  std::lock_guard<std::mutex> lock(g_abandoned_mu);
  bool stuck = false;
  for (Grow::Impl* m : g_abandoned) {
    if (!m->done) {
      if (m->rank == 0 && !stuck)
        std::fprintf(stderr,
                     "edp: the new processes of a grow given up earlier are still stuck in their MPI initialisation "
                     "(EDP_SPAWN_TIMEOUT; docs/elastic.md); mpirun cannot end while they run, so this job's processes "
                     "end with a non-zero exit code after finalising MPI, and mpirun stops them\n");
      stuck = true;
      continue;
    }
    if (m->grown) {
      while (!m->ready.test()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      m->grown->release();
    }
    if (m->dup != MPI_COMM_NULL) MPI_Comm_free(&m->dup);
  }
  return stuck;
}

}  // namespace detail

void ready_barrier(Communicator& world) { detail::mpi_ready(world, true); }

}  // namespace edp::comm

namespace edp::comm::detail {

void mpi_watch(Communicator* c) {
  if (!c) {
    mpi_stop_stall_inspector();
    return;
  }
  auto* m = dynamic_cast<MpiCommunicator*>(c);
  EDP_CHECK(m, "comm::watch_communicator: the stall inspector watches MPI communicators, not '", c->backend(), "'");
  MPI_Comm h = m->handle();
  mpi_start_stall_inspector(g_granted, &h);
}

// Open MPI 4.1 with PMIx 4 (Debian 12's libpmix2 4.2): now and then a process started by
// MPI_Comm_spawn waits forever in PMIx_Init for its job's data, the processes started with it
// wait for it in MPI_Init, and the running ranks in MPI_Comm_spawn. Measured with grows that
// fail three times per job on a loaded 2-core machine: 13 of 308 jobs hung; with PMIx's hash
// store of job data instead of its shared-memory one, 2 of 1127. So every process of an edp
// program asks PMIx for the hash store (EDP_PMIX_GDS), unless the user chose one (PMIX_MCA_gds);
// Grow::Grow passes the choice on to the new ranks. The grow lobbies (mpi_finalize) remove what
// set it off; EDP_SPAWN_TIMEOUT bounds the wait for whatever else keeps a spawn.
namespace {
void pmix_store() {
  const std::string gds = knobs::get_string("EDP_PMIX_GDS");
  if (gds != "auto") setenv("PMIX_MCA_gds", gds.c_str(), 0);
}
}  // namespace

BackendInit mpi_init(int* argc, char*** argv, const EnvironmentOptions& options) {
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  EDP_CHECK(!fin, "edp::comm::Environment: MPI was already finalised in this process and cannot "
                  "be initialised again");
  BackendInit out;
  int provided = MPI_THREAD_SINGLE;
  if (!inited) {
    pmix_store();
    const int rc = MPI_Init_thread(argc, argv, to_mpi(options.requested), &provided);
    EDP_CHECK(rc == MPI_SUCCESS, "MPI_Init_thread failed (error ", rc,
              "); is Open MPI installed and, under a container as root, are "
              "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 set?");
    out.owns = true;
  } else {
    MPI_CHECK(MPI_Query_thread(&provided));
  }
  out.granted = from_mpi(provided);
  g_granted = out.granted;
  g_serialized_check = out.granted < ThreadLevel::Multiple;
  if (out.granted < options.required) {
    const std::string msg = ::edp::detail::concat(
        "MPI granted ", thread_level_name(out.granted), " but edp needs at least ",
        thread_level_name(options.required),
        " (a communication thread issues collectives while the main thread computes). Use an "
        "MPI built with thread support (Open MPI: ompi_info | grep 'Thread support'), or ask "
        "for a level it grants with EDP_COMM_THREAD_LEVEL");
    if (out.owns) MPI_Finalize();
    throw Error(msg);
  }
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &g_exit_comm));
  // A process started by a Grow joins the running job now: its world is the grown job, not the
  // group spawned with it.
  MPI_Comm parent = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_get_parent(&parent));
  g_spawned = parent != MPI_COMM_NULL;
  {
    int n = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    g_job_processes = g_spawned ? static_cast<int>(knobs::get_int("EDP_SPAWN_JOB_PROCESSES", n)) : n;
  }
  if (g_spawned) {
    // The other side of Grow::Impl::connect: the merge that puts us after the running ranks. Our
    // own setup follows; the stall inspector watches the grown job from the join on
    // (watch_communicator).
    MPI_CHECK(MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN));
    MPI_Comm merged = MPI_COMM_NULL;
    MPI_CHECK(MPI_Intercomm_merge(parent, 1, &merged));  // 1: after the ranks that spawned it
    MPI_Comm_free(&parent);
    add_grow_lobby(merged);  // with the running ranks' in Grow::Impl::connect
    g_unjoined = true;
    out.world = std::make_unique<MpiCommunicator>(merged);
    return out;
  }
  out.world = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD);
  {
    MPI_Comm watched = static_cast<MpiCommunicator*>(out.world.get())->handle();
    mpi_start_stall_inspector(out.granted, &watched);
  }

  const LaunchInfo li = launch_info();
  if (!g_spawned && li.launched_by_mpirun && (li.size != out.world->size() || li.rank != out.world->rank())) {
    const std::string msg = ::edp::detail::concat(
        "mpirun started this process as rank ", li.rank, " of ", li.size,
        " (OMPI_COMM_WORLD_*), but MPI_Init reports rank ", out.world->rank(), " of ",
        out.world->size(), ": the program is linked against a different MPI library than the "
        "mpirun that launched it");
    out.world.reset();
    if (out.owns) MPI_Finalize();
    throw Error(msg);
  }
  return out;
}

namespace {
volatile sig_atomic_t g_stuck_exit_code = 0;
extern "C" void stuck_exit(int) { _exit(g_stuck_exit_code); }
}  // namespace

void mpi_finalize() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin) return;
  mpi_stop_stall_inspector();
  const bool spawn_stuck = finish_abandoned_grows();
  // The exit lobby: Open MPI 4.1's MPI_Finalize waits (spinning) for every process started
  // together with this one. A rank that left an elastic job early waits here instead, in
  // non-blocking barriers polled every 50 ms, which costs no CPU; the others pass at once. The
  // barriers: the processes started together with this one, and each grow's (g_grow_lobbies).
  // So the processes of a grow, also of one that failed or that all left in a shrink, wait for
  // the job's end too: a spawned group that ended while the job ran made a later spawn hang now
  // and then (Open MPI 4.1, PMIx 4; docs/elastic.md, "A spawn that does not return").
  {
    std::vector<MPI_Comm> comms;
    {
      std::lock_guard<std::mutex> lock(g_lobby_mu);
      comms.swap(g_grow_lobbies);
    }
    if (g_exit_comm != MPI_COMM_NULL) comms.push_back(g_exit_comm);
    std::vector<MPI_Request> reqs;
    for (MPI_Comm c : comms) {
      MPI_Request r = MPI_REQUEST_NULL;
      if (MPI_Ibarrier(c, &r) == MPI_SUCCESS) reqs.push_back(r);
    }
    for (int done = 0; !reqs.empty() &&
                       MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE) == MPI_SUCCESS &&
                       !done;)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (MPI_Comm& c : comms) MPI_Comm_free(&c);
    g_exit_comm = MPI_COMM_NULL;
  }
  if (spawn_stuck) {
    // MPI is still finalised, as the job's other processes do; but the thread left inside
    // MPI_Comm_spawn may crash once the library is torn down under it (seen: a SIGSEGV now and
    // then), which then ends the process with that exit code instead.
    g_stuck_exit_code = g_exit_code != 0 ? g_exit_code : kStallExitCode;
    std::fflush(nullptr);
    std::signal(SIGSEGV, stuck_exit);
    std::signal(SIGBUS, stuck_exit);
  }
  MPI_Finalize();
  if (spawn_stuck) std::_Exit(g_stuck_exit_code);  // not exit(): that thread is still there
}

void mpi_exit_code(int code) { g_exit_code = code; }

void mpi_abort(int code) {
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (inited && !fin) MPI_Abort(MPI_COMM_WORLD, code);
}

void mpi_world_position(int& rank, int& size) {
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  if (!inited || fin) return;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
}

}  // namespace edp::comm::detail
