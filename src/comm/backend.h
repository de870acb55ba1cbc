// Internal seam between the backend-neutral parts of the communicator (Environment, world(),
// run_main, Tensor overloads) and the backends. Not installed: only src/comm/ includes it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "edp/comm/communicator.h"
#include "edp/config.h"

namespace edp::comm::detail {

// The "self" backend: a world of one rank, no MPI needed (builds without MPI, unit tests).
std::unique_ptr<Communicator> make_self_communicator();

struct BackendInit {
  std::unique_ptr<Communicator> world;
  ThreadLevel granted = ThreadLevel::Single;
  bool owns = false;  // this Environment initialised the backend and must finalise it
};

#if EDP_HAVE_MPI
BackendInit mpi_init(int* argc, char*** argv, const EnvironmentOptions& options);
// Finalises MPI. Where a grow given up earlier left its MPI_Comm_spawn stuck (EDP_SPAWN_TIMEOUT),
// mpirun cannot end while the new processes wait in their MPI initialisation: the process then
// ends here, after MPI_Finalize, with the exit code given to mpi_exit_code (run_main gives the
// program's) or, for 0, kStallExitCode, so that mpirun ends them and itself.
void mpi_finalize();
void mpi_exit_code(int code);
// MPI_Abort(MPI_COMM_WORLD, code) when MPI is up; returns if it is not (caller then exits).
void mpi_abort(int code);
// The stall inspector's watchdog thread (mpi_stall_inspector.cpp): started by mpi_init once the
// world exists (collective: it duplicates MPI_COMM_WORLD), stopped by mpi_finalize.
// `comm` is the communicator to watch (an MPI_Comm, passed as void* to keep mpi.h out of here).
void mpi_start_stall_inspector(ThreadLevel granted, void* comm);
void mpi_stop_stall_inspector();
// edp/comm/membership.h, MPI side.
bool mpi_spawned();
// A new rank before the ready handshake, and the handshake itself: ok = false when its setup
// failed, which abandons the grow; then (and when another new rank failed) this process leaves.
bool mpi_unjoined();
void mpi_ready(Communicator& world, bool ok);
void mpi_watch(Communicator* c);
// World rank/size from MPI when it is up, else (-1, -1).
void mpi_world_position(int& rank, int& size);
#endif

// buf[i] /= n in buf's type (Avg's finishing step).
void divide_inplace(void* buf, int64_t count, DType dtype, int n);

// EDP_COMM_MAX_CHUNK: the most elements one backend call moves (default: the backend's limit).
// Exists so tests can exercise the chunked path with small buffers.
int64_t max_chunk_elements(int64_t backend_limit);

ThreadLevel parse_thread_level(const std::string& s);

}  // namespace edp::comm::detail
