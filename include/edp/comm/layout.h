// Compute threads (and cores) that follow where a job's ranks are.
//
// A rank's CPU ops run on a pool of compute threads (edp/core/threads.h). When ranks share a
// host, the pools must share its cores: a rank that keeps every core after a second rank joined
// its host runs three spinning threads on two cores, many times slower than either alone; a rank
// that keeps one core after the rank beside it left leaves the other idle. So whenever the ranks
// change (elastic::Job does it at the start and after every rescale):
//   - cores: ranks that a launcher bound to cores of their own (edprun --bind-to core, mpirun's
//     default) are bound again after a change, the cores that the job's ranks on the host had
//     before it divided among the ranks on it now, in rank order (a shrink hands the cores of the
//     ranks that left to those that stay; a grow gives its new ranks a share). A job whose
//     launcher binds its ranks (edprun's EDP_LAUNCH_BIND=core) counts as bound even while one rank
//     has every core, and the ranks a grow started are bound with the others. With more ranks than
//     cores on the host after a change, every rank gets all of them (what edprun does for a job
//     started at that size). Unbound ranks stay unbound; at the start the launcher's binding is
//     kept as it is.
//   - threads: the cores this process may run on (its affinity mask), divided by the ranks of
//     the job on this host whose masks overlap it, at least 1;
// unless the user fixed the thread count: EDP_NUM_THREADS given by the user, or edprun's
// --threads-per-rank (EDP_LAUNCH_THREADS). The count edprun derives for its ranks at launch
// (EDP_NUM_THREADS under edprun without --threads-per-rank) follows the layout like no count.
#pragma once
#include <array>
#include <cstdint>

namespace edp::comm {

class Communicator;

// A set of CPUs (1024 at most, as a cpu_set_t).
struct CpuMask {
  std::array<uint64_t, 16> bits{};
  int count() const;
  bool operator==(const CpuMask& o) const { return bits == o.bits; }
};

// This process's affinity mask.
CpuMask affinity();

// Collective over `world`: the cores of this host that the ranks of `world` on it run on (the
// union of their masks). Taken before a change of membership and given to follow_layout after it.
CpuMask host_cores(Communicator& world);

// The threads a user fixed through the environment (see above), or 0 when the count should
// follow the layout.
int user_fixed_threads();

// Collective (on every rank, whatever its rule): binds this rank again when `before` is given and
// ranks of its host were bound (see above), then sets its compute threads to `fixed` (> 0), else
// user_fixed_threads(), else its share of its cores. Returns the count now in use.
int follow_layout(Communicator& world, int fixed = 0, const CpuMask* before = nullptr);

}  // namespace edp::comm
