// Growing an MPI job in place (edp/comm/membership.h, comm::Grow): MPI_Comm_spawn of the new ranks
// on a thread of their own, the ready handshake, the merge; what a new rank does to join.
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

bool mpi_spawned() { return g_spawned; }

bool g_unjoined = false;  // a new rank that has not passed the ready handshake yet

// Why this job grows in place no more: a grow whose MPI_Comm_spawn never returned was given up
// (Grow::poll, EDP_SPAWN_TIMEOUT), and its threads may still be inside MPI (empty: none was).
std::string g_spawn_stuck;
int g_exit_code = 0;  // mpi_exit_code

bool mpi_unjoined() { return g_unjoined; }

void mpi_ready(Communicator& world, bool ok) {
  // The running ranks' Grow waits for every new rank's part. Waited for without spinning, which
  // on shared cores would take the CPU the running ranks train with.
  int v = ok ? 1 : 0;
  Request r = world.iallreduce(&v, &v, 1, DType::I32, ReduceOp::Min);
  while (!r.test()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  g_unjoined = false;
  if (v == 1) return;
  // The grow is abandoned (this rank or another new one failed during its setup, or the running
  // ranks gave it up): this process ends its program and waits in the exit lobby, idle, until the
  // running job ends (mpi_finalize) — an exit code other than 0 would make mpirun end the
  // running job too.
  if (ok)
    std::fprintf(stderr, "edp: a rank started by a grow leaves: the grow was abandoned (another new rank failed "
                         "before joining, or the running ranks stopped waiting for the new ones)\n");
  std::fflush(stderr);
  mpi_finalize();
  std::_Exit(0);
}

namespace {

// What a grow starts and how: the command, its environment, and where (host by host).
struct SpawnPlan {
  std::vector<std::string> cmd;                     // [wrapper words...] executable args...
  std::string env;                                  // "KEY=VALUE\n..."
  std::vector<std::pair<std::string, int>> per_host;  // empty: wherever Open MPI maps them
  int count = 0;
};

SpawnPlan plan_spawn(const Communicator& current, int count, const std::vector<std::string>& env) {
  SpawnPlan p;
  p.count = count;
  // What to start: [EDP_SPAWN_WRAPPER words...] <this executable> <this program's arguments>.
  {
    std::istringstream w(knobs::get_string("EDP_SPAWN_WRAPPER"));
    for (std::string word; w >> word;) p.cmd.push_back(word);
  }
  const std::vector<std::string> line = own_command_line();
  p.cmd.push_back(self_executable());
  for (size_t i = 1; i < line.size(); ++i) p.cmd.push_back(line[i]);
  p.env = "EDP_SPAWN_RANK_BASE=" + std::to_string(current.size()) + "\n";
  p.env += "EDP_SPAWN_JOB_PROCESSES=" + std::to_string(g_job_processes + count) + "\n";
  // The new processes use the PMIx store this one does (see pmix_store in mpi_init).
  if (const char* gds = std::getenv("PMIX_MCA_gds"); gds && *gds) p.env += std::string("PMIX_MCA_gds=") + gds + "\n";
  for (const auto& e : env) p.env += e + "\n";
  // Several hosts (edprun's EDP_LAUNCH_HOSTS): the new ranks go where a start at the grown size
  // would put them, host by host in rank order (one command per host, each naming its host), not
  // wherever Open MPI finds a free slot first; the shim places them by the same rule.
  const auto hosts = knobs::launch_hosts();
  const int from = current.size(), to = current.size() + count;
  for (int r = from; r < to && !hosts.empty(); ++r) {
    const knobs::HostSlot s = knobs::fill_slot(hosts, to, r);
    if (s.host < 0) {  // more ranks than the hosts take: let Open MPI map them
      p.per_host.clear();
      break;
    }
    const std::string& h = hosts[static_cast<size_t>(s.host)].name;
    if (p.per_host.empty() || p.per_host.back().first != h) p.per_host.emplace_back(h, 0);
    ++p.per_host.back().second;
  }
  return p;
}

// Every running rank (`comm`, root 0) starts the processes together: "" when they started (`inter`
// connects the running ranks with them), else why not (on rank 0; Open MPI 4.1 returns the error
// to the root only, see Grow::Impl::connect).
std::string spawn_over(SpawnPlan& p, MPI_Comm comm, MPI_Comm& inter) {
  std::vector<char*> args;
  for (size_t i = 1; i < p.cmd.size(); ++i) args.push_back(p.cmd[i].data());
  args.push_back(nullptr);
  char cwd[4096];
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "env", p.env.c_str());
  if (getcwd(cwd, sizeof cwd)) MPI_Info_set(info, "wdir", cwd);
  // The job's own mapping (edprun: --map-by slot:PE=n --bind-to core) planned the cores for the
  // ranks it started; new ranks are mapped one slot each and left unbound (Open MPI 4.1 would
  // otherwise refuse: "no available cpus").
  MPI_Info_set(info, "map_by", "slot");
  MPI_Info_set(info, "bind_to", "none");
  std::vector<int> errcodes(static_cast<size_t>(p.count), MPI_SUCCESS);
  int rc = MPI_SUCCESS;
  if (p.per_host.empty()) {
    rc = MPI_Comm_spawn(p.cmd[0].c_str(), args.data(), p.count, info, 0, comm, &inter, errcodes.data());
  } else {
    const int n = static_cast<int>(p.per_host.size());
    std::vector<char*> commands(static_cast<size_t>(n), p.cmd[0].data());
    std::vector<char**> argvs(static_cast<size_t>(n), args.data());
    std::vector<int> maxprocs;
    std::vector<MPI_Info> infos;
    for (const auto& [h, k] : p.per_host) {
      MPI_Info hi;
      MPI_Info_dup(info, &hi);
      MPI_Info_set(hi, "host", h.c_str());
      infos.push_back(hi);
      maxprocs.push_back(k);
    }
    rc = MPI_Comm_spawn_multiple(n, commands.data(), argvs.data(), maxprocs.data(), infos.data(), 0, comm, &inter,
                                 errcodes.data());
    for (auto& hi : infos) MPI_Info_free(&hi);
  }
  MPI_Info_free(&info);
  bool ok = rc == MPI_SUCCESS && inter != MPI_COMM_NULL;
  for (int e : errcodes) ok = ok && e == MPI_SUCCESS;
  if (ok) return "";
  if (inter != MPI_COMM_NULL) MPI_Comm_free(&inter);
  char msg[MPI_MAX_ERROR_STRING + 1] = {0};
  int len = 0;
  if (rc != MPI_SUCCESS) MPI_Error_string(rc, msg, &len);
  return ::edp::detail::concat("MPI_Comm_spawn could not start ", p.count, " rank(s) of ", p.cmd[0],
                               rc != MPI_SUCCESS ? ": " : "", msg,
                               " (under plain mpirun: no free slot — give mpirun more slots, e.g. --oversubscribe, "
                               "or use edprun)");
}

}  // namespace

}  // namespace edp::comm::detail

namespace edp::comm {


struct Grow::Impl {
  int rank = 0, count = 0;
  MPI_Comm dup = MPI_COMM_NULL;  // the running ranks' traffic of this grow, apart from the job's
  detail::SpawnPlan plan;
  std::thread thread;
  // This rank's thread: 0 connecting, 4 connected and posting the ready barrier, 1 posted,
  // 2 failed; 3 (rank 0 only): given up by poll() while the thread was still connecting.
  std::atomic<int> stage{0};
  std::atomic<bool> done{false};  // the thread has left connect()
  Stopwatch since;                // since the grow began: rank 0 bounds the spawn with it
  double timeout = 0;             // EDP_SPAWN_TIMEOUT (0: no bound)
  bool abandoned = false;         // every rank: poll() gave the grow up, its thread perhaps still in MPI
  std::unique_ptr<Communicator> grown;
  Request ready;     // the ready handshake: MIN over every rank of the grown job of "set up, 1"
  int ready_ok = 1;  // the running ranks' part, then the result
  std::string failure;  // the thread's: why the spawn failed (read after join)
  std::string error;
  bool joined = false;

  // The thread's stage, unless rank 0 has given the grow up meanwhile (3 stays).
  void set_stage(int to) {
    int cur = stage.load();
    while (cur != 3 && !stage.compare_exchange_weak(cur, to)) {
    }
  }

  // Every running rank, on its own thread (or inline without MPI_THREAD_MULTIPLE): the spawn over
  // all running ranks, the merge that puts them first, in their order, and the ready barrier.
  // (A spawn over MPI_COMM_SELF on rank 0 followed by MPI_Intercomm_create would keep a failed
  // spawn on rank 0 alone, but Open MPI 4.1 then mismatched the grown communicator's first
  // collectives when two or more ranks were started. Spawns beyond mpirun's slots, the failure
  // that Open MPI reports on the root only, are refused before this; see Grow::Grow.)
  void connect() {
    try {
      MPI_Comm inter = MPI_COMM_NULL, merged = MPI_COMM_NULL;
      std::string why = detail::spawn_over(plan, dup, inter);
      // Every rank decides alike, whatever each one's MPI said; rank 0's message goes to all.
      int ok = why.empty() ? 1 : 0;
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, dup));
      int64_t n = static_cast<int64_t>(why.size());
      MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT64_T, 0, dup));
      why.resize(static_cast<size_t>(n));
      MPI_CHECK(MPI_Bcast(why.data(), static_cast<int>(n), MPI_CHAR, 0, dup));
      if (!ok) {
        if (inter != MPI_COMM_NULL) MPI_Comm_free(&inter);
        failure = why.empty() ? "MPI_Comm_spawn failed on another rank" : why;
        set_stage(2);
        done = true;
        return;
      }
      MPI_CHECK(MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN));
      MPI_CHECK(MPI_Intercomm_merge(inter, 0, &merged));  // 0: the running ranks come first
      MPI_Comm_free(&inter);
      detail::add_grow_lobby(merged);  // with the new ranks' in mpi_init
      grown = detail::make_mpi_communicator(merged);
      // Rank 0 gave the grow up while this spawn was under way (poll, EDP_SPAWN_TIMEOUT): the new
      // ranks, connected after all, learn it from the handshake (its MIN is 0) and leave.
      int expected = 0;
      if (!stage.compare_exchange_strong(expected, 4)) ready_ok = 0;
      ready = grown->iallreduce(&ready_ok, &ready_ok, 1, DType::I32, ReduceOp::Min);  // the new ranks' ready_barrier()
      set_stage(1);
    } catch (const std::exception& e) {
      failure = e.what();
      set_stage(2);
    }
    done = true;
  }

  void join() {
    if (thread.joinable()) thread.join();
    joined = true;
  }
};

namespace {

// Grows given up while their threads were still inside MPI_Comm_spawn (EDP_SPAWN_TIMEOUT), with
// the state their (detached) threads use: never freed, since a thread may never return.
std::mutex g_abandoned_mu;
std::vector<Grow::Impl*> g_abandoned;

}  // namespace

Grow::Grow(Communicator& current, int count, const std::vector<std::string>& env) : impl_(std::make_unique<Impl>()) {
  EDP_CHECK(count >= 1, "comm::Grow: count must be >= 1, got ", count);
  const MPI_Comm cur = detail::mpi_handle(current);
  if (cur == MPI_COMM_NULL) throw SpawnError("cannot start new ranks on a '" + current.backend() + "' communicator: only MPI spawns");
  // A spawn given up earlier may still hold its threads inside MPI; another one beside it is not
  // risked (set alike on every rank, by poll's broadcast).
  if (!detail::g_spawn_stuck.empty()) throw SpawnError(detail::g_spawn_stuck);
  // Under plain mpirun without --oversubscribe, a spawn beyond mpirun's slots fails — and Open
  // MPI 4.1 then leaves mpirun running after the job ends. So such a spawn is refused here, alike
  // on every rank, before MPI is asked. Open MPI's own variables: the slots of the allocation,
  // and whether mpirun may oversubscribe.
  const char* uni = std::getenv("OMPI_UNIVERSE_SIZE");
  const char* over = std::getenv("OMPI_MCA_rmaps_base_oversubscribe");
  const int64_t universe = uni ? std::strtoll(uni, nullptr, 10) : 0;
  const bool oversubscribe = over && std::string(over) == "1";
  if (universe > 0 && !oversubscribe && detail::g_job_processes + count > universe)
    throw SpawnError(::edp::detail::concat(
        "mpirun has ", universe, " slot(s) and this job's processes hold ", detail::g_job_processes,
        " of them (ranks that left a shrink keep theirs until the job ends): ", count,
        " more do not fit; give mpirun more slots (--oversubscribe, a hostfile) or use edprun"));
  Impl& m = *impl_;
  m.rank = current.rank();
  m.count = count;
  m.timeout = knobs::get_double("EDP_SPAWN_TIMEOUT");
  m.plan = detail::plan_spawn(current, count, env);
  MPI_CHECK(MPI_Comm_dup(cur, &m.dup));
  MPI_CHECK(MPI_Comm_set_errhandler(m.dup, MPI_ERRORS_RETURN));
  if (detail::g_granted >= ThreadLevel::Multiple)
    m.thread = std::thread([&m] { m.connect(); });
  else
    m.connect();  // without MPI_THREAD_MULTIPLE: here, blocking (and unbounded)
}

Grow::~Grow() {
  if (impl_->abandoned) {  // its thread may still be inside MPI: kept for the end
    if (impl_->thread.joinable()) impl_->thread.detach();
    std::lock_guard<std::mutex> lock(g_abandoned_mu);
    g_abandoned.push_back(impl_.release());
    return;
  }
  impl_->join();
  if (impl_->dup != MPI_COMM_NULL) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Comm_free(&impl_->dup);
  }
}

Grow::State Grow::poll(Communicator& current) {
  Impl& m = *impl_;
  // 0: starting; 1: ready; 2: the spawn failed; 3: a new rank failed before it was ready;
  // 4: the spawn has not returned within EDP_SPAWN_TIMEOUT and is given up.
  int v = 0;
  if (current.rank() == 0) {
    const int st = m.stage;
    if (st == 2) {
      v = 2;
    } else if (st == 1 && m.ready.test()) {
      v = m.ready_ok ? 1 : 3;
    } else if (st == 0 && m.timeout > 0 && m.since.seconds() > m.timeout) {
      int expected = 0;
      if (m.stage.compare_exchange_strong(expected, 3)) v = 4;
    }
  } else if (m.stage == 1) {
    // The handshake progresses only inside MPI calls on every rank in it, and the job's own
    // collectives may not enter MPI at all (ranks of one host share memory).
    (void)m.ready.test();
  }
  current.broadcast(&v, 1, DType::I32, 0);
  if (v == 0) return State::kStarting;
  if (v == 4) {
    // Nothing interrupts a thread inside MPI_Comm_spawn: it is left there, and the job goes on at
    // its size. Should the spawn return after all, the thread tells the new ranks that the grow
    // is abandoned (the handshake), and they end.
    m.abandoned = true;
    m.error = ::edp::detail::concat(
        "the new ranks did not start within ", m.timeout, " s (EDP_SPAWN_TIMEOUT): MPI_Comm_spawn has not returned, "
        "the new processes are stuck in their MPI initialisation (docs/elastic.md, 'A spawn that does not return')");
    detail::g_spawn_stuck = ::edp::detail::concat(
        "an earlier grow of this job was given up because its MPI_Comm_spawn did not return within ", m.timeout,
        " s (EDP_SPAWN_TIMEOUT); this job does not start new ranks in place again");
    return State::kFailed;
  }
  m.join();  // every rank's thread has entered the handshake (1, 3), or has left after the spawn (2)
  if (v == 2) {
    // Rank 0's message on every rank.
    m.error = m.failure;
    int64_t n = static_cast<int64_t>(m.error.size());
    current.broadcast(&n, 1, DType::I64, 0);
    m.error.resize(static_cast<size_t>(n));
    current.broadcast(m.error.data(), n, DType::U8, 0);
    return State::kFailed;
  }
  m.ready.wait();
  if (v == 3) {
    // The grown communicator is dropped unused (MPI_Comm_disconnect hung here with Open MPI 4.1).
    // The new ranks have ended their programs and wait, idle, in the exit lobby until this job
    // ends (the grow's lobby, mpi_finalize), like ranks that left in a shrink.
    detail::mpi_release(*m.grown);
    detail::g_job_processes += m.count;  // they hold their slots until the end
    m.error = "a new rank failed during its setup, before it joined (its own message is above); the new ranks "
              "wait idle for the job's end";
    return State::kFailed;
  }
  return State::kReady;
}

std::unique_ptr<Communicator> Grow::take() {
  Impl& m = *impl_;
  EDP_CHECK(m.joined && m.grown, "comm::Grow::take() before poll() returned kReady");
  detail::g_job_processes += m.count;
  return std::move(m.grown);
}

const std::string& Grow::error() const { return impl_->error; }

namespace detail {

// At the end of the process: the grows given up (EDP_SPAWN_TIMEOUT) whose spawn returned after all
// finish their handshake (the new ranks learn that the grow is abandoned and end). True when a
// thread is still inside MPI_Comm_spawn: its new processes are stuck.
bool finish_abandoned_grows() {
  std::lock_guard<std::mutex> lock(g_abandoned_mu);
  bool stuck = false;
  for (Grow::Impl* m : g_abandoned) {
    if (!m->done) {
      if (m->rank == 0 && !stuck)
        std::fprintf(stderr,
                     "edp: the new processes of a grow given up earlier are still stuck in their MPI initialisation "
                     "(EDP_SPAWN_TIMEOUT; docs/elastic.md); mpirun cannot end while they run, so this job's processes "
                     "end with a non-zero exit code after finalising MPI, and mpirun stops them\n");
      stuck = true;
      continue;
    }
    if (m->grown) {
      while (!m->ready.test()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      detail::mpi_release(*m->grown);
    }
    if (m->dup != MPI_COMM_NULL) MPI_Comm_free(&m->dup);
  }
  return stuck;
}

}  // namespace detail

void ready_barrier(Communicator& world) { detail::mpi_ready(world, true); }

}  // namespace edp::comm
