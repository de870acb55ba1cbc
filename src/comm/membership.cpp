#include "edp/comm/membership.h"

#include "backend.h"

namespace edp::comm {

bool spawned() {
#if EDP_HAVE_MPI
  return detail::mpi_spawned();
#else
  return false;
#endif
}

std::unique_ptr<Communicator> spawn_ranks(Communicator& current, int count, const std::vector<std::string>& env) {
  EDP_CHECK(count >= 1, "comm::spawn_ranks: count must be >= 1, got ", count);
#if EDP_HAVE_MPI
  return detail::mpi_spawn(current, count, env);
#else
  (void)current;
  (void)env;
  throw SpawnError("cannot start new ranks: this build of edp has no MPI");
#endif
}

void watch_communicator(Communicator* c) {
#if EDP_HAVE_MPI
  detail::mpi_watch(c);
#else
  (void)c;
#endif
}

}  // namespace edp::comm
