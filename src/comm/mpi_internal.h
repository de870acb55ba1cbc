// What the MPI backend's files share (mpi_communicator.cpp: the communicator; mpi_grow.cpp: growing
// a job in place; mpi_init.cpp: starting and ending MPI). Internal to the comm layer.
#pragma once
#include <mpi.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "edp/comm/communicator.h"

namespace edp::comm::detail {

// MPI's thread level, as granted; under Serialized, two threads inside MPI at once is an error.
extern ThreadLevel g_granted;
extern bool g_serialized_check;
int to_mpi(ThreadLevel t);
ThreadLevel from_mpi(int t);

// The MPI communicator over `comm` (owned; collective over it), its handle (MPI_COMM_NULL for a
// communicator of another backend), and forgetting the handle (someone else frees it).
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm);
MPI_Comm mpi_handle(const Communicator& c);
void mpi_release(Communicator& c);

// The processes mpirun (or one MPI_Comm_spawn) started together, and one communicator per grow
// this process took part in: the exit lobby (mpi_finalize) waits on all of them.
extern MPI_Comm g_exit_comm;
extern std::mutex g_lobby_mu;
extern std::vector<MPI_Comm> g_grow_lobbies;
void add_grow_lobby(MPI_Comm merged);  // collective over `merged`

extern bool g_spawned;         // started by a grow (MPI_Comm_spawn)
extern int g_job_processes;    // processes of this mpirun job so far (started and spawned)
extern std::string g_spawn_stuck;  // why this job grows in place no more ("" : it may)
extern int g_exit_code;            // mpi_exit_code
extern bool g_unjoined;            // a new rank that has not passed the ready handshake yet
// At the end of the process: the grows given up whose spawn returned after all finish their
// handshake; true when a thread is still inside MPI_Comm_spawn (mpi_grow.cpp).
bool finish_abandoned_grows();

// This program's command line, from /proc/self/cmdline.
std::vector<std::string> own_command_line();

}  // namespace edp::comm::detail
