// The MPI backend of edp::comm::Communicator (Open MPI from Debian; any MPI-3 library works).
// Compiled only when CMake finds MPI. Each collective maps to one MPI call per chunk of at most
// INT_MAX elements (MPI counts are int); Avg is MPI_SUM followed by a division in place.
#include "mpi_check.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <fstream>
#include <sstream>
#include <thread>
#include <cstdio>
#include <functional>
#include <mutex>
#include <vector>

#include "backend.h"
#include "edp/comm/membership.h"
#include "edp/core/knobs.h"
#include "stall.h"

namespace edp::comm::detail {
namespace {

// Under MPI_THREAD_SERIALIZED two threads inside MPI at once is undefined behaviour; edp makes it
// a loud error instead. Under MPI_THREAD_MULTIPLE the guard is a no-op.
bool g_serialized_check = false;
std::mutex g_mpi_entry;

class EntryGuard {
 public:
  explicit EntryGuard(const char* what) {
    if (!g_serialized_check) return;
    lock_ = std::unique_lock<std::mutex>(g_mpi_entry, std::try_to_lock);
    EDP_CHECK(lock_.owns_lock(), "comm: ", what,
              " was called while another thread of this process was inside MPI, but MPI granted "
              "only MPI_THREAD_SERIALIZED: make the main thread wait for the communication "
              "thread's handles before calling MPI, or run with an MPI that grants "
              "MPI_THREAD_MULTIPLE");
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    case DType::U8: return MPI_UINT8_T;
  }
  throw Error("comm: unsupported dtype");
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  throw Error("comm: unsupported reduce op");
}

int to_mpi(ThreadLevel t) {
  switch (t) {
    case ThreadLevel::Single: return MPI_THREAD_SINGLE;
    case ThreadLevel::Funneled: return MPI_THREAD_FUNNELED;
    case ThreadLevel::Serialized: return MPI_THREAD_SERIALIZED;
    case ThreadLevel::Multiple: return MPI_THREAD_MULTIPLE;
  }
  return MPI_THREAD_SINGLE;
}

ThreadLevel from_mpi(int t) {
  if (t >= MPI_THREAD_MULTIPLE) return ThreadLevel::Multiple;
  if (t >= MPI_THREAD_SERIALIZED) return ThreadLevel::Serialized;
  if (t >= MPI_THREAD_FUNNELED) return ThreadLevel::Funneled;
  return ThreadLevel::Single;
}

ThreadLevel g_granted = ThreadLevel::Single;

const char* at(const void* p, int64_t elems, size_t esize) {
  return static_cast<const char*>(p) + static_cast<size_t>(elems) * esize;
}
char* at(void* p, int64_t elems, size_t esize) {
  return static_cast<char*>(p) + static_cast<size_t>(elems) * esize;
}

// A non-blocking operation: its MPI requests (one per chunk) and the step to run once they are
// all complete (Avg's division).
class MpiRequest final : public RequestImpl {
 public:
  std::vector<MPI_Request> reqs;
  std::function<void()> finish;
  OpTicket ticket;  // in the stall inspector's table until complete

  bool test() override {
    EntryGuard g("Request::test");
    int flag = 0;
    MPI_CHECK(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &flag, MPI_STATUSES_IGNORE));
    if (flag) complete();
    return flag != 0;
  }
  void wait() override {
    {
      EntryGuard g("Request::wait");
      MPI_CHECK(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE));
    }
    complete();
  }

 private:
  void complete() {
    ticket.done();
    if (finish) finish();
    finish = nullptr;
  }
};

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed on destruction) unless it is MPI_COMM_WORLD.
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    EntryGuard g("Communicator construction");
    MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &size_));
    MPI_Comm node = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &local_rank_));
    MPI_CHECK(MPI_Comm_size(node, &local_size_));
    MPI_CHECK(MPI_Comm_free(&node));
    max_chunk_ = max_chunk_elements(INT_MAX);
  }

  ~MpiCommunicator() override {
    if (comm_ == MPI_COMM_WORLD) return;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string backend() const override { return "mpi"; }
  ThreadLevel thread_level() const override { return g_granted; }

  void allreduce(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op) override {
    check_count(count, "allreduce");
    EntryGuard g("allreduce");
    OpTicket t("allreduce", "mpi", count, dtype);
    const size_t es = dtype_size(dtype);
    const bool in_place = send == recv;
    for (int64_t off = 0; off < count; off += max_chunk_) {
      const int n = chunk(count, off);
      MPI_CHECK(MPI_Allreduce(in_place ? MPI_IN_PLACE : at(send, off, es), at(recv, off, es), n,
                              mpi_type(dtype), mpi_op(op), comm_));
    }
    if (op == ReduceOp::Avg) divide_inplace(recv, count, dtype, size_);
  }

  void broadcast(void* buf, int64_t count, DType dtype, int root) override {
    check_count(count, "broadcast");
    check_root(root, "broadcast");
    EntryGuard g("broadcast");
    OpTicket t("broadcast", "mpi", count, dtype);
    const size_t es = dtype_size(dtype);
    for (int64_t off = 0; off < count; off += max_chunk_)
      MPI_CHECK(MPI_Bcast(at(buf, off, es), chunk(count, off), mpi_type(dtype), root, comm_));
  }

  void allgather(const void* send, void* recv, int64_t count, DType dtype) override {
    check_count(count, "allgather");
    EntryGuard g("allgather");
    OpTicket t("allgather", "mpi", count, dtype);
    const size_t es = dtype_size(dtype);
    const bool in_place = send == at(recv, count * rank_, es);
    for (int64_t off = 0; off < count; off += max_chunk_) {
      const int n = chunk(count, off);
      RecvType rt(count, n, dtype);
      MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : at(send, off, es), n, mpi_type(dtype),
                              at(recv, off, es), rt.count, rt.type, comm_));
    }
  }

  void barrier() override {
    EntryGuard g("barrier");
    OpTicket t("barrier", "mpi", 0, DType::U8);
    MPI_CHECK(MPI_Barrier(comm_));
  }

  Request iallreduce(const void* send, void* recv, int64_t count, DType dtype,
                     ReduceOp op) override {
    check_count(count, "iallreduce");
    EntryGuard g("iallreduce");
    auto r = std::make_unique<MpiRequest>();
    r->ticket = OpTicket("allreduce", "mpi", count, dtype);
    const size_t es = dtype_size(dtype);
    const bool in_place = send == recv;
    for (int64_t off = 0; off < count; off += max_chunk_) {
      r->reqs.emplace_back();
      MPI_CHECK(MPI_Iallreduce(in_place ? MPI_IN_PLACE : at(send, off, es), at(recv, off, es),
                               chunk(count, off), mpi_type(dtype), mpi_op(op), comm_,
                               &r->reqs.back()));
    }
    if (op == ReduceOp::Avg) {
      const int n = size_;
      r->finish = [recv, count, dtype, n] { divide_inplace(recv, count, dtype, n); };
    }
    return Request(std::move(r));
  }

  Request ibroadcast(void* buf, int64_t count, DType dtype, int root) override {
    check_count(count, "ibroadcast");
    check_root(root, "ibroadcast");
    EntryGuard g("ibroadcast");
    auto r = std::make_unique<MpiRequest>();
    r->ticket = OpTicket("broadcast", "mpi", count, dtype);
    const size_t es = dtype_size(dtype);
    for (int64_t off = 0; off < count; off += max_chunk_) {
      r->reqs.emplace_back();
      MPI_CHECK(MPI_Ibcast(at(buf, off, es), chunk(count, off), mpi_type(dtype), root, comm_,
                           &r->reqs.back()));
    }
    return Request(std::move(r));
  }

  Request iallgather(const void* send, void* recv, int64_t count, DType dtype) override {
    check_count(count, "iallgather");
    EntryGuard g("iallgather");
    auto r = std::make_unique<MpiRequest>();
    r->ticket = OpTicket("allgather", "mpi", count, dtype);
    const size_t es = dtype_size(dtype);
    const bool in_place = send == at(recv, count * rank_, es);
    for (int64_t off = 0; off < count; off += max_chunk_) {
      const int n = chunk(count, off);
      RecvType rt(count, n, dtype);  // freeing a type after posting is allowed (MPI-3 §4.1.9)
      r->reqs.emplace_back();
      MPI_CHECK(MPI_Iallgather(in_place ? MPI_IN_PLACE : at(send, off, es), n, mpi_type(dtype),
                               at(recv, off, es), rt.count, rt.type, comm_, &r->reqs.back()));
    }
    return Request(std::move(r));
  }

  Request ibarrier() override {
    EntryGuard g("ibarrier");
    auto r = std::make_unique<MpiRequest>();
    r->ticket = OpTicket("barrier", "mpi", 0, DType::U8);
    r->reqs.emplace_back();
    MPI_CHECK(MPI_Ibarrier(comm_, &r->reqs.back()));
    return Request(std::move(r));
  }

  std::unique_ptr<Communicator> split(int color, int key) const override {
    MPI_Comm c = MPI_COMM_NULL;
    {
      EntryGuard g("split");
      OpTicket t("communicator split", "mpi", 0, DType::U8);
      MPI_CHECK(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &c));
    }
    if (c == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(c);
  }

  std::unique_ptr<Communicator> dup() const override {
    MPI_Comm c = MPI_COMM_NULL;
    {
      EntryGuard g("dup");
      OpTicket t("communicator dup", "mpi", 0, DType::U8);
      MPI_CHECK(MPI_Comm_dup(comm_, &c));
    }
    return std::make_unique<MpiCommunicator>(c);
  }

 private:
  // Where each rank's `n` elements of a chunk land in allgather's receive buffer: one element of
  // a type spanning n elements whose extent is a whole rank block (`count` elements), so rank
  // j's chunk goes to recv + off + j*count. Unchunked, it is plainly (count, dtype).
  struct RecvType {
    MPI_Datatype type = MPI_DATATYPE_NULL;
    int count = 0;
    bool derived = false;
    RecvType(int64_t block, int n, DType dtype) {
      if (block == n) {
        type = mpi_type(dtype);
        count = n;
        return;
      }
      MPI_Datatype contig;
      MPI_CHECK(MPI_Type_contiguous(n, mpi_type(dtype), &contig));
      const MPI_Aint extent = static_cast<MPI_Aint>(block) * static_cast<MPI_Aint>(dtype_size(dtype));
      MPI_CHECK(MPI_Type_create_resized(contig, 0, extent, &type));
      MPI_Type_free(&contig);
      MPI_CHECK(MPI_Type_commit(&type));
      count = 1;
      derived = true;
    }
    ~RecvType() {
      if (derived) MPI_Type_free(&type);
    }
  };

  int chunk(int64_t count, int64_t off) const {
    return static_cast<int>(std::min<int64_t>(max_chunk_, count - off));
  }
  static void check_count(int64_t count, const char* op) {
    EDP_CHECK(count >= 0, "comm::", op, ": negative element count ", count);
  }
  void check_root(int root, const char* op) const {
    EDP_CHECK(root >= 0 && root < size_, "comm::", op, ": root ", root,
              " is not a rank of this communicator (size ", size_, ")");
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  int64_t max_chunk_ = INT_MAX;

 public:
  MPI_Comm handle() const { return comm_; }
};

// The processes mpirun (or one MPI_Comm_spawn) started together; every one of them takes part in
// the exit lobby (see mpi_finalize).
MPI_Comm g_exit_comm = MPI_COMM_NULL;
bool g_spawned = false;

// This program's command line, from /proc/self/cmdline (what the rank shim exec'd).
std::vector<std::string> own_command_line() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> out;
  std::string arg;
  while (std::getline(f, arg, '\0')) out.push_back(arg);
  return out;
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

}  // namespace

bool mpi_spawned() { return g_spawned; }

std::unique_ptr<Communicator> mpi_spawn(Communicator& current, int count, const std::vector<std::string>& env) {
  auto* cur = dynamic_cast<MpiCommunicator*>(&current);
  if (!cur) throw SpawnError("cannot start new ranks on a '" + current.backend() + "' communicator: only MPI spawns");
  // What to start: [EDP_SPAWN_WRAPPER words...] <this executable> <this program's arguments>.
  std::vector<std::string> cmd;
  {
    std::istringstream w(knobs::get_string("EDP_SPAWN_WRAPPER"));
    for (std::string word; w >> word;) cmd.push_back(word);
  }
  const std::vector<std::string> line = own_command_line();
  cmd.push_back(self_exe());
  for (size_t i = 1; i < line.size(); ++i) cmd.push_back(line[i]);
  std::vector<char*> args;
  for (size_t i = 1; i < cmd.size(); ++i) args.push_back(cmd[i].data());
  args.push_back(nullptr);
  std::string envs = "EDP_SPAWN_RANK_BASE=" + std::to_string(current.size()) + "\n";
  for (const auto& e : env) envs += e + "\n";
  char cwd[4096];
  MPI_Info info;
  MPI_Info_create(&info);
  MPI_Info_set(info, "env", envs.c_str());
  if (getcwd(cwd, sizeof cwd)) MPI_Info_set(info, "wdir", cwd);
  // The job's own mapping (edprun: --map-by slot:PE=n --bind-to core) planned the cores for the
  // ranks it started; new ranks are mapped one slot each and left unbound (Open MPI 4.1 would
  // otherwise refuse: "no available cpus").
  MPI_Info_set(info, "map_by", "slot");
  MPI_Info_set(info, "bind_to", "none");
  // Several hosts (edprun's EDP_LAUNCH_HOSTS): the new ranks go where a start at the grown size
  // would put them, host by host in rank order (one command per host, each naming its host), not
  // wherever Open MPI finds a free slot first; the shim places them by the same rule.
  std::vector<std::pair<std::string, int>> per_host;
  {
    const auto hosts = knobs::launch_hosts();
    const int from = current.size(), to = current.size() + count;
    for (int r = from; r < to && !hosts.empty(); ++r) {
      const knobs::HostSlot s = knobs::fill_slot(hosts, to, r);
      if (s.host < 0) {  // more ranks than the hosts take: let Open MPI map them
        per_host.clear();
        break;
      }
      const std::string& h = hosts[static_cast<size_t>(s.host)].name;
      if (per_host.empty() || per_host.back().first != h) per_host.emplace_back(h, 0);
      ++per_host.back().second;
    }
  }
  MPI_Comm inter = MPI_COMM_NULL;
  std::vector<int> errcodes(static_cast<size_t>(count), MPI_SUCCESS);
  int rc = MPI_SUCCESS;
  if (per_host.empty()) {
    EntryGuard g("spawn");
    OpTicket t("spawning new ranks", "mpi", 0, DType::U8);
    rc = MPI_Comm_spawn(cmd[0].c_str(), args.data(), count, info, 0, cur->handle(), &inter, errcodes.data());
  } else {
    const int n = static_cast<int>(per_host.size());
    std::vector<char*> commands(static_cast<size_t>(n), cmd[0].data());
    std::vector<char**> argvs(static_cast<size_t>(n), args.data());
    std::vector<int> maxprocs;
    std::vector<MPI_Info> infos;
    for (const auto& [h, k] : per_host) {
      MPI_Info hi;
      MPI_Info_dup(info, &hi);
      MPI_Info_set(hi, "host", h.c_str());
      infos.push_back(hi);
      maxprocs.push_back(k);
    }
    {
      EntryGuard g("spawn");
      OpTicket t("spawning new ranks", "mpi", 0, DType::U8);
      rc = MPI_Comm_spawn_multiple(n, commands.data(), argvs.data(), maxprocs.data(), infos.data(), 0, cur->handle(),
                                   &inter, errcodes.data());
    }
    for (auto& hi : infos) MPI_Info_free(&hi);
  }
  MPI_Info_free(&info);
  // Every rank of `current` decides alike, whatever each one's MPI said.
  int ok = (rc == MPI_SUCCESS && inter != MPI_COMM_NULL) ? 1 : 0;
  for (int e : errcodes) ok = ok && e == MPI_SUCCESS;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, cur->handle()));
  if (!ok) {
    if (inter != MPI_COMM_NULL) MPI_Comm_free(&inter);
    char msg[MPI_MAX_ERROR_STRING + 1] = {0};
    int len = 0;
    if (rc != MPI_SUCCESS) MPI_Error_string(rc, msg, &len);
    throw SpawnError(::edp::detail::concat(
        "MPI_Comm_spawn could not start ", count, " rank(s) of ", cmd[0], rc != MPI_SUCCESS ? ": " : "",
        msg, " (under plain mpirun: no free slot — give mpirun more slots, e.g. --oversubscribe, or use edprun)"));
  }
  MPI_CHECK(MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN));
  MPI_Comm merged = MPI_COMM_NULL;
  {
    EntryGuard g("merge");
    OpTicket t("merging the new ranks", "mpi", 0, DType::U8);
    MPI_CHECK(MPI_Intercomm_merge(inter, 0, &merged));  // 0: the existing ranks come first
  }
  MPI_Comm_free(&inter);
  auto grown = std::make_unique<MpiCommunicator>(merged);
  // Watch the grown job now: the new ranks start their inspector on it in mpi_init, in the
  // same order of collectives (merge, the communicator's construction, the inspector's dup).
  mpi_start_stall_inspector(g_granted, &merged);
  return grown;
}

void mpi_watch(Communicator* c) {
  if (!c) {
    mpi_stop_stall_inspector();
    return;
  }
  auto* m = dynamic_cast<MpiCommunicator*>(c);
  EDP_CHECK(m, "comm::watch_communicator: the stall inspector watches MPI communicators, not '", c->backend(), "'");
  MPI_Comm h = m->handle();
  mpi_start_stall_inspector(g_granted, &h);
}

BackendInit mpi_init(int* argc, char*** argv, const EnvironmentOptions& options) {
  int inited = 0, fin = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&fin);
  EDP_CHECK(!fin, "edp::comm::Environment: MPI was already finalised in this process and cannot "
                  "be initialised again");
  BackendInit out;
  int provided = MPI_THREAD_SINGLE;
  if (!inited) {
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
  // A process started by spawn_ranks joins the running job now (the others wait in
  // MPI_Intercomm_merge): its world is the grown job, not the group spawned with it.
  MPI_Comm parent = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_get_parent(&parent));
  g_spawned = parent != MPI_COMM_NULL;
  if (g_spawned) {
    MPI_CHECK(MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN));
    MPI_Comm merged = MPI_COMM_NULL;
    MPI_CHECK(MPI_Intercomm_merge(parent, 1, &merged));  // 1: after the ranks that spawned it
    MPI_Comm_free(&parent);
    out.world = std::make_unique<MpiCommunicator>(merged);
  } else {
    out.world = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD);
  }
  {
    MPI_Comm watched = static_cast<MpiCommunicator*>(out.world.get())->handle();
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

void mpi_finalize() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin) return;
  mpi_stop_stall_inspector();
  // The exit lobby: Open MPI 4.1's MPI_Finalize waits (spinning) for every process started
  // together with this one. A rank that left an elastic job early waits here instead, in a
  // non-blocking barrier polled every 50 ms, which costs no CPU; the others pass it at once.
  if (g_exit_comm != MPI_COMM_NULL) {
    MPI_Request r = MPI_REQUEST_NULL;
    if (MPI_Ibarrier(g_exit_comm, &r) == MPI_SUCCESS) {
      for (int done = 0; MPI_Test(&r, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done;)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    MPI_Comm_free(&g_exit_comm);
  }
  MPI_Finalize();
}

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
