// Changing a running job's membership in place (elastic jobs, edp/elastic/job.h): ranks leave on
// a split communicator; new ranks are started with MPI_Comm_spawn and joined in the background,
// while the running ranks go on with their work. Only the MPI backend can do this; elsewhere the
// functions say why not.
//
// A grow (comm::Grow), seen from the running ranks:
//   1. every rank constructs a Grow at the same point (collective, cheap): a thread of its own
//      starts the new processes (MPI_Comm_spawn over a copy of the running ranks' communicator),
//      merges them in (the running ranks first, in their order, then the new ones) and posts
//      the "ready" barrier of the grown communicator;
//   2. the running ranks keep training on their communicator and call poll() at step
//      boundaries (one broadcast of an integer from rank 0): kStarting, then kReady once every
//      new rank has reached the ready barrier (its data loaded and its model built), or kFailed
//      (the spawn failed, a new rank failed in its setup, or MPI_Comm_spawn and the merge did
//      not finish within EDP_SPAWN_TIMEOUT: the grow is given up, its threads left inside MPI,
//      and no later Grow of the process is attempted: docs/elastic.md, "A spawn that does not
//      return");
//   3. at kReady every rank takes() the grown communicator and the job moves to it.
// A spawned process runs the same program with the same arguments. Its Environment connects it
// during initialisation, so that comm::world() — what run_main hands to the program — is already
// the grown communicator. The program runs its setup (data, model) on its own, then enters the
// ready barrier: its first collective on world() must be ready_barrier() (elastic::Job does it),
// then watch_communicator(world) on every rank of the grown job.
//
// Leaving: a rank that is no longer part of the job stops using every communicator of the job
// and returns from the program. Open MPI 4.1's MPI_Finalize waits for every process that mpirun
// (or one spawn) started with it, so the process then waits in an "exit lobby" (a non-blocking
// barrier polled every 50 ms: no CPU, measured) until those have finished too; it holds no slot
// of the job's work and no GPU memory after its program returned. The lobby also spans every
// grow the process took part in (the running ranks and the new ones), so that the processes a
// grow started — joined, failed in their setup, or all gone in a shrink — wait for the job's end
// too: a group of spawned processes that ended while the job ran made a later spawn hang now and
// then (Open MPI 4.1, PMIx 4).
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

// True when this process was started by a Grow of a running job.
bool spawned();

// A grow in the background (see the file comment).
class Grow {
 public:
  enum class State { kStarting, kReady, kFailed };
  // Collective over `current`: starts `count` new processes of this program (the same
  // executable, arguments and working directory; through EDP_SPAWN_WRAPPER when it is set),
  // each given the extra environment `env` ("KEY=VALUE") and EDP_SPAWN_RANK_BASE =
  // current.size(). Throws SpawnError on every rank, before anything started, when it is known
  // that they cannot start (a build without MPI, too few slots under plain mpirun, an earlier
  // grow given up at EDP_SPAWN_TIMEOUT). Without MPI_THREAD_MULTIPLE the processes are started
  // and connected here, blocking (and without the timeout).
  Grow(Communicator& current, int count, const std::vector<std::string>& env = {});
  ~Grow();  // waits for the thread; a grow not taken is abandoned (see take())
  Grow(const Grow&) = delete;
  Grow& operator=(const Grow&) = delete;
  // Collective over `current`: where the grow stands, as rank 0 sees it, on every rank (rank 0
  // also bounds the spawn by EDP_SPAWN_TIMEOUT here).
  State poll(Communicator& current);
  // After kReady: the grown communicator (every rank of it has passed the ready barrier).
  std::unique_ptr<Communicator> take();
  // After kFailed: why (rank 0's message, on every rank).
  const std::string& error() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The new ranks' side of the ready barrier: their first collective on world() (collective
// over the grown communicator, with the running ranks' Grow).
void ready_barrier(Communicator& world);

// Makes `c` the communicator the stall inspector watches (elastic jobs call it with the job's
// communicator after each membership change; collective over `c`). nullptr: stop watching (a
// rank that left the job).
void watch_communicator(Communicator* c);

}  // namespace edp::comm
