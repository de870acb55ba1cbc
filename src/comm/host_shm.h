// Collectives among the ranks of one host through a shared-memory segment: the data path of the
// MPI backend between ranks that share a host (mpi_communicator.cpp), whatever started them.
//
// Why below MPI: Open MPI 4.1 connects processes of one mpirun job through shared memory (vader),
// but a rank started later by MPI_Comm_spawn belongs to another job, and vader does not connect
// jobs: gradients between an elastic job's old and new ranks on one host went over TCP on
// loopback, whose progress needs CPU time a busy host does not give (docs/elastic.md, "Which
// transport"). A segment that every rank of the host maps serves ranks started together and
// ranks spawned later alike, so a grown job moves its gradients the way a job started at that
// size does.
//
// The segment: a header (a word for futex waits, each member's phase counter on a cache line of
// its own), then two buffer sets (used alternately, so that one collective's copy-in does not wait
// for the previous one's copy-out), each with one slot per member and a result area, one slot
// each. A collective moves its buffer in chunks of one slot:
//   allreduce  each member copies its chunk into its slot | all arrive | member i reduces slice i
//              of every slot (members in order: the same bits on every member and every run) into
//              the result | all arrive | [across hosts: member 0 reduces the result with the other
//              hosts (MPI) | all arrive] | each copies the result out | all arrive (no wait);
//              a small chunk on one host: copy in | all arrive | each reduces the whole chunk from
//              the slots into its own buffer | all arrive (no wait)
//   reduce_scatter  each member copies a piece of every block into its slot | all arrive | member i
//              reduces piece i of every slot into its own output | all arrive (no wait)
//   broadcast  the root copies in | all arrive | each copies out | all arrive (no wait)
//   barrier    all arrive | wait for all
// "Arrive" publishes the member's next phase number; a member waits for the others' counters to
// reach it, spinning briefly and then sleeping on the futex (a waiting rank leaves the core to the
// ranks that compute, which matters on busy and oversubscribed hosts). Every member calls the same
// collectives in the same order (the MPI contract), so the phase numbers agree.
//
// Nothing here can tell a frozen member from a slow one: a collective registers an OpTicket like
// the MPI ones, and the stall inspector ends the job after EDP_COMM_TIMEOUT, naming the ranks that
// did not arrive. The segment's name is unlinked as soon as every member has mapped it, so nothing
// is left in /dev/shm when the processes end, however they end.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "edp/comm/communicator.h"

namespace edp::comm::detail {

class HostShm {
 public:
  static constexpr int64_t kMaxSlotBytes = int64_t{1} << 20;
  static constexpr int kMaxMembers = 256;
  // Up to this size an allreduce chunk is reduced whole by every member (one round of waiting
  // instead of two; more arithmetic, which small chunks do not feel).
  static constexpr int64_t kWholeBytes = int64_t{16} << 10;

  // The slot size (and so the chunk of every collective) when the largest host group of a
  // communicator has `max_members` ranks: 1 MiB, less for large groups (a buffer set stays near
  // 16 MiB). Every host uses the same, so that the hosts' chunks match in a hierarchical allreduce.
  static int64_t slot_bytes_for(int max_members);
  int64_t slot_bytes() const { return slot_bytes_; }

  // Member 0: creates a segment for `size` members under an unpredictable name (O_EXCL: never an
  // existing file or a planted link), stamped with `nonce`. Throws edp::Error with the reason.
  static std::unique_ptr<HostShm> create(int size, int64_t slot_bytes, uint64_t nonce);
  // The other members: maps the segment `name` made by member 0 and checks its stamp (another
  // /dev/shm, as in a container beside the host, would not have it). Throws edp::Error.
  static std::unique_ptr<HostShm> attach(const std::string& name, int rank, int size, int64_t slot_bytes,
                                         uint64_t nonce);
  ~HostShm();
  HostShm(const HostShm&) = delete;
  HostShm& operator=(const HostShm&) = delete;

  const std::string& name() const { return name_; }
  // Member 0, once every member has mapped the segment.
  void unlink_name();

  int rank() const { return rank_; }
  int size() const { return size_; }

  // In place on `buf` (count elements of dtype; F32, F64, I32, I64, U8). Avg is reduced as Sum
  // (the caller divides). With `cross`, member 0 calls cross(host_sum, n) on each chunk's host
  // result before the members read it (the hierarchical allreduce across hosts); it must leave
  // the chunk's reduction over every host there.
  void allreduce(void* buf, int64_t count, DType dtype, ReduceOp op,
                 const std::function<void(void*, int64_t)>& cross = {});
  // `in` holds size() blocks of `count` elements; out gets block rank() reduced over the members
  // in member order (the allreduce's bits). Avg is reduced as Sum. One round of waiting per chunk.
  void reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp op);
  void broadcast(void* buf, int64_t bytes, int root);
  void barrier();

 private:
  struct Header;
  HostShm(std::string name, void* base, size_t bytes, int rank, int size, int64_t slot_bytes);
  static size_t segment_bytes(int size, int64_t slot_bytes);
  static size_t header_bytes(int size);

  char* slot(int set, int member) const;
  char* result(int set) const;
  void arrive();
  // Until every member's phase (or, with `member` >= 0, that member's) is at least `phase`.
  void wait_for(uint64_t phase, int member = -1);
  bool reached(uint64_t phase, int member) const;
  // Before writing buffer set `set`: every member has finished reading it.
  void claim(int set);

  std::string name_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  Header* hdr_ = nullptr;
  int rank_ = 0, size_ = 1;
  int64_t slot_bytes_ = kMaxSlotBytes;
  uint64_t phase_ = 0;         // this member's phase: the number of its arrivals
  uint64_t set_free_[2] = {};  // the phase at which every member has finished with each set
  int next_set_ = 0;
  bool unlinked_ = false;
};

}  // namespace edp::comm::detail
