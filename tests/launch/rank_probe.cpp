// A rank program for the edprun tests (MPI only in the mpi-sleep mode: mpirun runs any program).
// Each rank reads its placement with edp::launch::placement_from_env() and writes it, one line,
// to $PROBE_OUT/rank.<R> (with the variables edprun gives every rank, its host name and the number
// of cores it may run on); then, by mode:
//   ok                  exit 0
//   fail R CODE         rank R exits with CODE, the others 0
//   fail-once R CODE    rank R exits with CODE the first time ($PROBE_OUT/failed.<R> marks it), then 0
//   sleep               write $PROBE_OUT/ready.<R> ("pid ppid") and sleep until killed
//   mpi-sleep           the same after MPI_Init and a barrier (so Open MPI's shared memory exists);
//                       ready.<R> also names the rank's session and shared-memory directories
//   rescale W CTL HOW   a rescale to W ranks, as an elastic job does it: at another size than W,
//                       rank 0 writes $EDP_RESCALE_FILE ({workers: W, global_batch: 8*W, step: 5,
//                       checkpoint}), then does HOW to the control file CTL (a controller's mistake
//                       in the window before edprun restarts the job: delete, garble, indivisible
//                       = a size the batch does not divide, keep), and every rank exits 75; at W
//                       ranks every rank exits 0
//   exit75              every rank exits 75 without writing the rescale file (a job's bug)
//   events              an elastic job's membership events (EDP_EVENTS_FILE, written with the
//                       library's append_event): the first time ($PROBE_OUT/crashed absent) rank 0
//                       appends a start at the job's size (global batch 8 per rank) and an in-place
//                       shrink to 1 rank (global batch 8, step 7, pause 0.25 s) and exits 0, and the
//                       last rank, once those lines are there, exits 3 (a crash after the shrink);
//                       the next time rank 0 appends a start and every rank exits 0
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>

#include "edp/comm/communicator.h"
#include "edp/core/threads.h"
#include "edp/elastic/events.h"
#include "edp/launch/placement.h"

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "-";
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void write_ready(const std::string& out, int rank) {
  std::ofstream f(out + "/ready." + std::to_string(rank));
  f << getpid() << " " << getppid() << " " << env("OMPI_MCA_orte_jobfam_session_dir") << " "
    << env("OMPI_MCA_btl_vader_backing_directory") << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "ok";
  const char* out_env = std::getenv("PROBE_OUT");
  const std::string out = out_env ? out_env : "";
  edp::apply_launch_binding();  // what an edp program does when it starts (edp/core/threads.h)
  const edp::launch::Placement p = edp::launch::placement_from_env();
  if (!out.empty()) {
    std::ofstream f(out + "/rank." + std::to_string(p.rank));
    f << p.str() << " | threads=" << env("EDP_NUM_THREADS") << " cvd=" << env("CUDA_VISIBLE_DEVICES")
      << " pipe=" << env("CUDA_MPS_PIPE_DIRECTORY") << " pct=" << env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
      << " allowed=" << env("EDP_ALLOWED_WORKERS") << " rescale_file=" << env("EDP_RESCALE_FILE");
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    sched_getaffinity(0, sizeof cpus, &cpus);
    f << " host=" << host << " cpus=" << CPU_COUNT(&cpus) << "\n";
  }
  if (mode == "fail" && argc > 3 && p.rank == std::atoi(argv[2])) return std::atoi(argv[3]);
  if (mode == "fail-once" && argc > 3 && p.rank == std::atoi(argv[2])) {
    const std::string marker = out + "/failed." + std::to_string(p.rank);
    if (!std::ifstream(marker)) {
      std::ofstream(marker) << "1\n";
      return std::atoi(argv[3]);
    }
  }
  if (mode == "sleep" || mode == "mpi-sleep") {
    std::optional<edp::comm::Environment> mpi;
    if (mode == "mpi-sleep") {
      mpi.emplace(&argc, &argv);
      mpi->world().barrier();
    }
    if (!out.empty()) write_ready(out, p.rank);
    std::this_thread::sleep_for(std::chrono::minutes(5));
    return 9;
  }
  if (mode == "rescale" && argc > 4) {
    const int target = std::atoi(argv[2]);
    if (p.world_size == target) return 0;
    if (!std::getenv("EDP_RESCALE_FILE")) return 75;  // not started by an edprun that reads one
    if (p.rank == 0) {
      // The controller's mistake first: once the rescale file exists the other ranks exit, and
      // mpirun may then kill this one.
      const std::string ctl = argv[3], how = argv[4];
      if (how == "delete") std::remove(ctl.c_str());
      if (how == "garble") std::ofstream(ctl) << "{\"workers\": 1, \"glob";
      if (how == "indivisible") std::ofstream(ctl) << "{\"workers\": 3, \"global_batch\": 64}";
      const std::string file = env("EDP_RESCALE_FILE");
      {
        std::ofstream f(file + ".tmp");
        f << "{\"workers\": " << target << ", \"global_batch\": " << 8 * target
          << ", \"step\": 5, \"checkpoint\": \"ckpt/ckpt-000000000005.edp\"}\n";
      }
      std::rename((file + ".tmp").c_str(), file.c_str());
    } else {
      // mpirun kills the other ranks at the first non-zero exit: leave only after rank 0 has
      // recorded the size (an elastic job's barrier after the commit does the same).
      for (int i = 0; i < 600 && !std::ifstream(env("EDP_RESCALE_FILE")); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return 75;
  }
  if (mode == "exit75") return 75;
  if (mode == "events") {
    const std::string marker = out + "/crashed", events = env("EDP_EVENTS_FILE");
    const bool first = !std::ifstream(marker);
    using edp::elastic::MembershipEvent;
    if (p.rank == 0) {
      MembershipEvent s;
      s.event = "start";
      s.workers = p.world_size;
      s.global_batch = 8 * p.world_size;
      s.t = edp::elastic::wall_time();
      edp::elastic::append_event(s);
      if (first) {
        MembershipEvent r;
        r.event = "rescale";
        r.mode = "in_place";
        r.from_workers = p.world_size;
        r.workers = 1;
        r.from_global_batch = 8 * p.world_size;
        r.global_batch = 8;
        r.step = 7;
        r.t = edp::elastic::wall_time();
        r.requested_t = r.t - 0.25;
        r.pause_s = 0.25;
        r.phases = {{"decide_s", 0.05}, {"shrink_s", 0.2}};
        edp::elastic::append_event(r);
      }
      return 0;
    }
    if (first && p.rank == p.world_size - 1) {
      // mpirun ends the job at the first non-zero exit: crash only once rank 0 has written.
      for (int i = 0; i < 600 && read_text(events).find("in_place") == std::string::npos; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::ofstream(marker) << "1\n";
      return 3;
    }
    return 0;
  }
  return 0;
}
