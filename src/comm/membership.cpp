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

#if !EDP_HAVE_MPI
// A build without MPI cannot start ranks (the MPI build's Grow is in mpi_grow.cpp).
struct Grow::Impl {};
Grow::Grow(Communicator&, int, const std::vector<std::string>&) {
  throw SpawnError("cannot start new ranks: this build of edp has no MPI");
}
Grow::~Grow() = default;
Grow::State Grow::poll(Communicator&) { return State::kFailed; }
std::unique_ptr<Communicator> Grow::take() { return nullptr; }
const std::string& Grow::error() const {
  static const std::string none = "this build of edp has no MPI";
  return none;
}
void ready_barrier(Communicator& world) { world.barrier(); }
#endif

void watch_communicator(Communicator* c) {
#if EDP_HAVE_MPI
  detail::mpi_watch(c);
#else
  (void)c;
#endif
}

}  // namespace edp::comm
