// Changing a running job's membership in place (elastic jobs, edp/elastic/job.h): ranks leave on
// a split communicator; new ranks are started with MPI_Comm_spawn and merged
// (MPI_Intercomm_merge). Only the MPI backend can do this; elsewhere the functions say why not.
//
// A spawned process runs the same program with the same arguments. Its Environment merges it
// into the job during initialisation, so that comm::world() — what run_main hands to the
// program — is already the grown job: ranks 0..W-1 are the ranks that spawned it, in their
// order, then the new ones. The program runs its usual setup and meets the others in the first
// collective of that setup (elastic::Job's state broadcast).
//
// Leaving: a rank that is no longer part of the job stops using every communicator of the job
// and returns from the program. Open MPI 4.1's MPI_Finalize waits for every process that mpirun
// (or one spawn) started with it, so the process then waits in an "exit lobby" (a non-blocking
// barrier polled every 50 ms: no CPU, measured) until those have finished too; it holds no slot
// of the job's work and no GPU memory after its program returned.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "edp/comm/communicator.h"

namespace edp::comm {

// Thrown by spawn_ranks when MPI cannot start the new ranks (no free slots, no program, a build
// without MPI). No rank was started and the communicator passed in is intact.
class SpawnError : public Error {
 public:
  using Error::Error;
};

// True when this process was started by spawn_ranks of a running job.
bool spawned();

// Collective over `current`: starts `count` new processes of this program (the same executable,
// arguments and working directory; through EDP_SPAWN_WRAPPER when it is set), each given the
// extra environment `env` ("KEY=VALUE") and EDP_SPAWN_RANK_BASE = current.size(). Returns the
// grown communicator: current's ranks first, in their order, then the new ones. Throws
// SpawnError on every rank of `current` when MPI could not start them. The stall inspector then
// watches the grown communicator.
std::unique_ptr<Communicator> spawn_ranks(Communicator& current, int count, const std::vector<std::string>& env = {});

// Makes `c` the communicator the stall inspector watches (elastic jobs call it with the job's
// communicator after each membership change; collective over `c`). nullptr: stop watching (a
// rank that left the job).
void watch_communicator(Communicator* c);

}  // namespace edp::comm
