// Starting and ending MPI for edp (backend.h): MPI_Init_thread and the world, the stall inspector's
// communicator, the exit lobby at the end, the abort.
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

void mpi_watch(Communicator* c) {
  if (!c) {
    mpi_stop_stall_inspector();
    return;
  }
  MPI_Comm h = mpi_handle(*c);
  EDP_CHECK(h != MPI_COMM_NULL, "comm::watch_communicator: the stall inspector watches MPI communicators, not '", c->backend(), "'");
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
    out.world = make_mpi_communicator(merged);
    return out;
  }
  out.world = make_mpi_communicator(MPI_COMM_WORLD);
  {
    MPI_Comm watched = mpi_handle(*out.world);
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
