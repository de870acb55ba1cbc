// Compute threads and cores that follow where a job's ranks are (edp/comm/layout.h).
#include "edp/comm/layout.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "edp/comm/communicator.h"
#include "edp/core/knobs.h"
#include "edp/core/log.h"
#include "edp/core/process.h"
#include "edp/core/threads.h"

namespace edp::comm {

namespace {

constexpr int kCpus = 16 * 64;

// What a rank tells the others.
struct Placement {
  uint64_t host = 0;
  uint64_t flags = 0;  // kRebind: it passed the cores of before a change; kLauncherBinds: see below
  CpuMask mask;        // its affinity now
  CpuMask pool;        // its mask, and the host's cores before the change when given
};
constexpr uint64_t kRebind = 1, kLauncherBinds = 2;

// Whether the launcher binds this job's ranks to cores of their own (edprun's plan, which a rank
// started by a grow inherits): then a rank alone on all of the host's cores is bound too, and
// after a change the ranks are placed as the launcher would place a job of the new size.
bool launcher_binds() { return knobs::get_string("EDP_LAUNCH_BIND") == "core"; }
static_assert(sizeof(Placement) == 34 * sizeof(uint64_t));

std::vector<Placement> gather(Communicator& world, const Placement& me) {
  std::vector<Placement> all(static_cast<size_t>(world.size()));
  world.allgather(&me, all.data(), sizeof(Placement) / sizeof(uint64_t), DType::I64);  // raw 64-bit words
  return all;
}

CpuMask unite(const CpuMask& a, const CpuMask& b) {
  CpuMask u;
  for (size_t i = 0; i < u.bits.size(); ++i) u.bits[i] = a.bits[i] | b.bits[i];
  return u;
}

bool overlap(const CpuMask& a, const CpuMask& b) {
  for (size_t i = 0; i < a.bits.size(); ++i)
    if (a.bits[i] & b.bits[i]) return true;
  return false;
}

// Slice `index` of `parts` of the CPUs in `pool`, in CPU order (at least one CPU).
CpuMask slice(const CpuMask& pool, int index, int parts) {
  std::vector<int> cpus;
  for (int c = 0; c < kCpus; ++c)
    if (pool.bits[static_cast<size_t>(c / 64)] >> (c % 64) & 1) cpus.push_back(c);
  const int n = static_cast<int>(cpus.size());
  const int from = index * n / parts;
  const int to = std::max(from + 1, (index + 1) * n / parts);
  CpuMask m;
  for (int i = from; i < to && i < n; ++i) {
    const int c = cpus[static_cast<size_t>(i)];
    m.bits[static_cast<size_t>(c / 64)] |= uint64_t{1} << (c % 64);
  }
  return m;
}

// Every thread of this process onto `m`.
void bind_process(const CpuMask& m) {
  std::vector<int> cpus;
  for (int c = 0; c < kCpus; ++c)
    if (m.bits[static_cast<size_t>(c / 64)] >> (c % 64) & 1) cpus.push_back(c);
  ::edp::bind_process(cpus);
}

}  // namespace

int CpuMask::count() const {
  int n = 0;
  for (uint64_t w : bits) n += __builtin_popcountll(w);
  return n;
}

CpuMask affinity() {
  CpuMask m;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) {
    m.bits[0] = 1;  // unknown: one core
    return m;
  }
  for (int c = 0; c < kCpus && c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) m.bits[static_cast<size_t>(c / 64)] |= uint64_t{1} << (c % 64);
  return m;
}

CpuMask host_cores(Communicator& world) {
  Placement me;
  me.host = host_key();
  me.mask = me.pool = affinity();
  CpuMask u;
  for (const Placement& p : gather(world, me))
    if (p.host == me.host) u = unite(u, p.mask);
  return u;
}

int user_fixed_threads() {
  // Under edprun (its rank shim sets EDP_LAUNCH_MODE) EDP_NUM_THREADS is edprun's own derived
  // count unless the user asked for one with --threads-per-rank.
  const char* var = knobs::is_set("EDP_LAUNCH_MODE") ? "EDP_LAUNCH_THREADS" : "EDP_NUM_THREADS";
  return knobs::is_set(var) ? static_cast<int>(knobs::get_int(var)) : 0;
}

int follow_layout(Communicator& world, int fixed, const CpuMask* before) {
  Placement me;
  me.host = host_key();
  me.flags = (before ? kRebind : 0) | (launcher_binds() ? kLauncherBinds : 0);
  me.mask = affinity();
  me.pool = before ? unite(me.mask, *before) : me.mask;
  std::vector<Placement> all = gather(world, me);
  // This host's ranks, in rank order, and the cores they have (had).
  std::vector<int> here;
  CpuMask pool;
  bool rebind = false, bound = false;
  for (int r = 0; r < world.size(); ++r) {
    const Placement& p = all[static_cast<size_t>(r)];
    if (p.host != me.host) continue;
    here.push_back(r);
    pool = unite(pool, p.pool);
    rebind = rebind || (p.flags & kRebind);
    bound = bound || (p.flags & kLauncherBinds);
  }
  for (int r : here) bound = bound || !(all[static_cast<size_t>(r)].mask == pool);
  if (rebind && bound) {
    // As a start at this size would place them: a share of the cores each, or, with more ranks
    // than cores, every rank on all of them (edprun's --bind-to auto binds no rank then).
    const int n = static_cast<int>(here.size());
    const bool fit = n <= pool.count();
    const int index = static_cast<int>(std::find(here.begin(), here.end(), world.rank()) - here.begin());
    const CpuMask mine = fit ? slice(pool, index, n) : pool;
    if (!(mine == me.mask)) {
      bind_process(mine);
      log::debug("bound to ", mine.count(), " of the host's ", pool.count(), " core(s) the job has after the change");
    }
    me.mask = mine;
    for (int i = 0; i < n; ++i) all[static_cast<size_t>(here[static_cast<size_t>(i)])].mask = fit ? slice(pool, i, n) : pool;
  }
  int sharing = 0;
  for (int r : here)
    if (overlap(all[static_cast<size_t>(r)].mask, me.mask)) ++sharing;
  const int derived = share_of_cores(me.mask.count(), sharing);
  if (fixed <= 0) fixed = user_fixed_threads();
  const int n = fixed > 0 ? fixed : derived;
  if (n != num_threads()) set_num_threads(n);
  return num_threads();
}

}  // namespace edp::comm
