// An MPI program for the edprun tests: what an in-place grow asks of the launcher. The ranks of
// the job (parent == MPI_COMM_NULL) spawn SPAWN more ranks of this same program through
// $EDP_SPAWN_WRAPPER (edprun's rank shim), telling them EDP_SPAWN_RANK_BASE = the job's size
// through the MPI_Info key "env", as the library does; both sides merge the intercommunicator
// (the job's ranks low) and check that every rank of the merged world agrees with what the shim
// told it. Each rank writes one line to $PROBE_OUT/spawn.<merged rank>:
//   "merged R/N edp R'/N' local L/S threads T bind B spawned 0|1 placement <placement or error>"
// and exits 0 only if the merge and an allreduce over the merged world worked.
//   spawn_probe [SPAWN]   (default 2)
// Raw MPI on purpose: this checks the launcher, not the library's rescale code.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "edp/launch/placement.h"

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "-";
}

std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream is(s);
  for (std::string w; is >> w;) out.push_back(w);
  return out;
}

int fail(const char* what, int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  std::fprintf(stderr, "spawn_probe: %s failed: %s\n", what, msg);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  const int spawn = argc > 1 ? std::atoi(argv[1]) : 2;
  int wrank = 0, wsize = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
  MPI_Comm_size(MPI_COMM_WORLD, &wsize);
  MPI_Comm parent = MPI_COMM_NULL, inter = MPI_COMM_NULL, merged = MPI_COMM_NULL;
  MPI_Comm_get_parent(&parent);
  const bool spawned = parent != MPI_COMM_NULL;
  if (!spawned) {
    // EDP_SPAWN_WRAPPER words + this program + its arguments, as the library builds the command.
    std::vector<std::string> cmd = words(std::getenv("EDP_SPAWN_WRAPPER") ? std::getenv("EDP_SPAWN_WRAPPER") : "");
    cmd.push_back(argv[0]);
    cmd.push_back(std::to_string(spawn));
    std::vector<char*> args;
    for (size_t i = 1; i < cmd.size(); ++i) args.push_back(cmd[i].data());
    args.push_back(nullptr);
    MPI_Info info;
    MPI_Info_create(&info);
    const std::string base = "EDP_SPAWN_RANK_BASE=" + std::to_string(wsize);
    MPI_Info_set(info, "env", base.c_str());
    std::vector<int> errs(static_cast<size_t>(spawn), MPI_SUCCESS);
    const int rc = MPI_Comm_spawn(cmd[0].c_str(), args.data(), spawn, info, 0, MPI_COMM_WORLD, &inter, errs.data());
    MPI_Info_free(&info);
    if (rc != MPI_SUCCESS) return fail("MPI_Comm_spawn", rc);
  } else {
    inter = parent;
  }
  int rc = MPI_Intercomm_merge(inter, spawned ? 1 : 0, &merged);
  if (rc != MPI_SUCCESS) return fail("MPI_Intercomm_merge", rc);
  MPI_Comm_set_errhandler(merged, MPI_ERRORS_RETURN);
  int mrank = 0, msize = 0, sum = 0;
  MPI_Comm_rank(merged, &mrank);
  MPI_Comm_size(merged, &msize);
  int one = 1;
  rc = MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, merged);
  if (rc != MPI_SUCCESS) return fail("MPI_Allreduce", rc);
  std::string placement;
  try {
    placement = edp::launch::placement_from_env().str();
  } catch (const std::exception& e) {
    placement = std::string("error: ") + e.what();
  }
  if (const char* out = std::getenv("PROBE_OUT")) {
    std::ofstream f(std::string(out) + "/spawn." + std::to_string(mrank));
    f << "merged " << mrank << "/" << msize << " edp " << env("EDP_RANK") << "/" << env("EDP_WORLD_SIZE") << " local "
      << env("EDP_LOCAL_RANK") << "/" << env("EDP_LOCAL_SIZE") << " threads " << env("EDP_NUM_THREADS") << " bind "
      << env("EDP_LAUNCH_BIND") << " spawned " << spawned << " sum " << sum << " placement " << placement << "\n";
  }
  MPI_Comm_free(&merged);
  if (spawned || inter != MPI_COMM_NULL) MPI_Comm_disconnect(&inter);
  MPI_Finalize();
  return sum == msize ? 0 : 1;
}
