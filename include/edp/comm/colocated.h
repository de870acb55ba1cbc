// The colocated communicator: several ranks per GPU (edprun --ranks-per-gpu K). NCCL refuses
// two ranks on one GPU, so the allreduce of device buffers is hierarchical:
//   1. ranks are grouped by (host, GPU UUID); the lowest world rank of a group is its leader;
//   2. inside a group, each member copies its chunk into its own persistent staging buffer
//      (cudaMalloc'ed once, shared with the leader through CUDA IPC) and records an
//      inter-process event; after a host barrier of the group (which orders event records before
//      event waits across processes — no cross-process spin kernels, MPS does not promise
//      co-residency) the leader's stream waits on those events and one kernel reduces
//      leader's input + every member's staging buffer into the leader's staging buffer;
//   3. across groups, the leaders allreduce that buffer with NCCL (a communicator of one leader
//      per GPU, made with ncclCommInitRank; the ncclUniqueId travels over the world
//      communicator);
//   4. Avg divides by the total number of ranks (not by the number of GPUs, as NCCL's avg
//      would), then the leader records its event, the group meets at a second barrier, and
//      every member copies the result out of the leader's staging buffer.
// Large buffers go through in chunks of the staging capacity. IPC handles are exchanged once
// when the communicator is made and cached; a new world (elastic re-formation) means a new
// communicator. Host buffers, broadcast and allgather go through the world communicator (MPI
// through host memory): the fallback that always works.
//
// The grouping and the step program are pure functions, tested on the CPU by simulating the
// program over host arrays; the CUDA implementation executes the same step program.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "edp/comm/communicator.h"

namespace edp::comm {

// Where a rank runs: its host and the UUID of its GPU.
struct ColocationKey {
  std::string host;
  std::string gpu;
};

struct ColocatedGroups {
  int rank = 0, world_size = 1;
  int group = 0, num_groups = 1;  // groups ordered by their lowest world rank
  int group_rank = 0, group_size = 1;
  int leader = 0;                 // world rank of this group's leader
  int leader_index = -1;          // position among the leaders; -1 for a non-leader
  std::vector<int> members;       // world ranks of this group, ascending
  std::vector<int> leaders;       // world rank of each group's leader, by group
  bool is_leader() const { return rank == leader; }
};
// keys[r] is rank r's key. Throws if a group is larger than max_group (MPS client limit).
ColocatedGroups plan_colocated_groups(const std::vector<ColocationKey>& keys, int rank, int max_group = 48);

// One step of a rank's part in one chunk of the hierarchical allreduce.
enum class ColocatedStep : uint8_t {
  CopyToStaging,     // member: input chunk -> own staging buffer, record own event
  GroupBarrier,      // host barrier of the group (orders event records before waits)
  LeaderReduce,      // leader: wait members' events; staging = input + sum of members' staging
  LeadersAllreduce,  // leader: NCCL allreduce of staging among the leaders (several groups)
  Scale,             // leader: staging /= world size (Avg)
  CopyResultOwn,     // leader: staging -> output, record own event
  CopyResultLeader,  // member: wait leader's event; leader's staging -> output, record own event
};
const char* colocated_step_name(ColocatedStep s);
std::vector<ColocatedStep> colocated_allreduce_steps(const ColocatedGroups& g, ReduceOp op);
// [offset, count) element ranges of at most capacity_bytes each.
std::vector<std::pair<int64_t, int64_t>> colocated_chunks(int64_t count, size_t elem_size, size_t capacity_bytes);

struct ColocatedOptions {
  // Bytes of each rank's persistent staging buffer (the chunk size). EDP_COLOCATED_CHUNK_BYTES
  // overrides it (tests use it to exercise the chunked path with small buffers).
  size_t staging_bytes = 64u << 20;
};

// True in a build that has the colocated backend (CUDA); NCCL is loaded at run time when
// there is more than one GPU group (libnccl.so.2).
bool colocated_available();
// Collective over `world`: forms the groups from every rank's host and current CUDA device,
// exchanges the IPC handles, and (several groups) creates the leaders' NCCL communicator.
// Throws edp::Error with the reason where it cannot work (no CUDA build, no device, no NCCL for
// several GPUs); a caller may then keep using `world` (host-memory MPI).
std::unique_ptr<Communicator> make_colocated_communicator(const Communicator& world, ColocatedOptions options = {});

}  // namespace edp::comm
