// The live controller as a library (edp-autoscale serve is its command line): a typed job table,
// the slots its resource backend hands out, one step "observe, decide, act" per tick, and the
// state transitions of a job, all without processes of its own: what the controller does to the
// world goes through a JobRunner (serve: keepers, edprun, files; tests: a fake), the slots come
// from a Resources backend (this host's CPU cores or GPUs, the hosts of a hostfile, or the nodes a
// cluster scheduler gives: Slurm, src/autoscale/slurm.h), and time from a clock the caller gives.
//
// A job's states:   queued --start--> running --exit 0--> done
//                     ^                  |  \--exit != 0, or lost--> failed
//                     +---preempted------+   \--cancel--> cancelled (queued: at once)
// and, while running, a rescale in flight (target_workers > 0: asked, not seen in the events yet),
// a preemption in flight (asked to checkpoint and stop), a keeper lost (the per-job supervisor
// process is gone while the job's edprun still runs: the job keeps its slots until edprun ends).
// Under a scheduler backend also: a grow waiting for its resources in the scheduler's queue
// (awaiting: the job is told only once they are its own), and a rescale by a new allocation
// (moving: asked to checkpoint and stop, then started again at the new size).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "edp/autoscale/live.h"
#include "edp/elastic/events.h"

namespace edp::autoscale {

enum class JobPhase { Queued, Running, Done, Failed, Cancelled };
const char* phase_name(JobPhase s);
JobPhase parse_phase(const std::string& s);  // edp::DataError for anything else
inline bool finished(JobPhase s) { return s == JobPhase::Done || s == JobPhase::Failed || s == JobPhase::Cancelled; }

using HostShare = std::pair<std::string, int>;  // a host and the slots a job holds there

// A job of the cluster's scheduler (serve --backend slurm) as the scheduler last reported it.
struct SchedJob {
  std::string id;      // the scheduler's job id; "" none
  std::string state;   // its state there: PENDING, RUNNING, COMPLETED, CANCELLED, ...; "" not seen yet
  std::string reason;  // why it waits (PENDING), or how it ended
  int resized = 0;     // times its allocation was resized (grown or shrunk in place)
};

// What a job printed last (its final JSON line: the examples' summary), kept in the table.
struct FinalMetrics {
  bool have = false;
  double test_acc = -1, final_loss = -1, samples_per_s = -1;  // -1: not in the line
};

// A job the live controller manages (the jobs.json table's row): its spec, phase, size, slots,
// measurements and what it was told. elastic::Job is the training program's side of it.
struct ManagedJob {
  std::string id;
  JobSpec spec;
  JobPhase state = JobPhase::Queued;
  double submit_t = 0, start_t = 0, end_t = 0;
  int workers = 0, ranks_per_slot = 1;
  int64_t batch = 0;
  std::vector<int> gpus;  // GPU slots held (GPU backend)
  // Several GPU types (Resources::types): the type of the slots it runs on (the plan's choice; a
  // GPU backend that knows its types names the type of the GPUs it gave even with one type). Its
  // measurements are tagged with it. Kept after it ends: the type it last ran on.
  std::string gpu_type;
  // Hostfile backend: the slots the job runs on per host (its hostfile's order), and those of a
  // rescale asked for and not landed yet (a shrink keeps holding what it leaves until it lands, a
  // grow holds what it takes from the moment it asks).
  std::vector<HostShare> hosts, next_hosts;
  int target_workers = 0;  // a rescale asked for and not seen in the events yet
  int64_t target_batch = 0;
  double target_t = 0;
  bool awaiting = false;  // a rescale whose resources the scheduler has not granted yet (the job is not told)
  bool moving = false;    // a rescale by a new allocation: asked to stop at a checkpoint, then started again
  SchedJob sched;         // scheduler backend: the allocation the job runs in
  SchedJob sched_grow;    // scheduler backend: resources a grow asked for, not the job's yet
  long keeper_pid = 0;
  unsigned long long keeper_start = 0;
  bool keeper_lost = false;  // the keeper is gone; the job is followed through edprun's pid
  int starts = 0, rescales = 0, restarts = 0;
  size_t events_seen = 0;
  int64_t samples_done = 0, samples_total = 0;
  double samples_per_s = 0;  // measured at its current size (0: not yet)
  // The steps the job's process had counted at its current configuration when it (re)entered it:
  // a reading of that configuration counts once it has LivePolicy::measured_steps() more (the
  // process's window for a configuration it comes back to also holds the new warm-up steps).
  int64_t measure_from = 0;
  // A rescale the controller asked for is kept until it could have paid for itself and its speed
  // has settled (docs/autoscaler.md §8, "Keeping a change"): the speedup predicted when it was
  // asked for, the time before which the job stays at its new size, and the step at its size from
  // which its speed there counts (-1: the hold has not ended yet).
  double change_gain = 0;
  double hold_until = 0;  // 0: no change being judged
  int64_t judge_from = -1;
  std::vector<Measured> measured;
  std::vector<double> pauses;
  bool cancel_requested = false, preempt_requested = false;
  double preempt_t = 0;
  bool preempt_signalled = false;
  int preemptions = 0;
  int exit_code = 0;
  std::string error;
  FinalMetrics metrics;

  bool running() const { return state == JobPhase::Running; }
  int slots() const { return (workers + ranks_per_slot - 1) / ranks_per_slot; }
  // A grow in flight holds its new slots from the moment it is asked for.
  int slots_held() const { return (std::max(workers, target_workers) + ranks_per_slot - 1) / ranks_per_slot; }
};

// The table, as ROOT/jobs.json holds it ({"version": 1, "jobs": [...]}).
nlohmann::json job_json(const ManagedJob& j);
ManagedJob job_from_json(const nlohmann::json& x);  // DataError naming the job and field
std::string table_json(const std::vector<ManagedJob>& jobs);
std::vector<ManagedJob> parse_table(const std::string& text, const std::string& where);

// ---- what the controller needs from the world ---------------------------------------------------

// The slots. assign() gives a job `workers` workers (a start, or a rescale of a running job):
// it records what the job holds (gpus, next_hosts) and throws edp::Error when they do not fit;
// landed() moves a rescaled job onto what it asked for; release() frees what it holds.
//
// A scheduler backend (Slurm) learns the cluster from the scheduler and acts through it: refresh()
// looks (the slots it would give now, each job's allocation and state) and returns whether a job's
// record changed; assign() of a grow asks the scheduler for the slots, which may wait in its queue
// (grant(): the controller tells the job only once they are its own); landed() of a shrink gives
// back what the job left; leaving() counts slots a job holds that the cluster is taking away (a
// drained node): the controller moves the job off them like off a lost host; moves() says that a
// rescale needs a new allocation (the job stops at a checkpoint and starts again there).
enum class Grant { Ready, Waiting, Refused };
class Resources {
 public:
  virtual ~Resources() = default;
  virtual int slots() const = 0;
  // The most slots a job could ever get here (submit's check); slots() may be less at a time.
  virtual int limit() const { return slots(); }
  virtual bool gpu() const { return false; }
  // The slots' GPU types with their counts (LivePolicy::types), when the backend knows them; a
  // start's assign() then gives the job slots of the type in j.gpu_type (the plan's choice).
  virtual std::vector<SlotType> types() const { return {}; }
  virtual std::string describe() const = 0;
  virtual void assign(ManagedJob& j, int workers, const std::vector<ManagedJob>& all) = 0;
  virtual void landed(ManagedJob& j) { j.hosts = j.next_hosts; }
  virtual void release(ManagedJob& j);
  // Where a rescale that did not land leaves the job: where it ran.
  virtual void give_up_rescale(ManagedJob& j) { j.next_hosts = j.hosts; }
  // Re-adopted running jobs must fit: throws naming the job and what does not fit.
  virtual void check_adopted(const std::vector<ManagedJob>& jobs) const = 0;
  // edprun's arguments that place the job (GPUs, hostfile, cores).
  virtual std::vector<std::string> launch_args(const ManagedJob& j, int ranks_per_slot, const std::string& job_dir) const = 0;
  // The hostfile the job runs with now, when the backend writes one (else empty).
  virtual std::vector<HostShare> hostfile_of(const ManagedJob& j) const { return {}; }
  // Each host's use and slots for the decision log (empty: no hosts).
  virtual nlohmann::json usage(const std::vector<ManagedJob>& jobs) const { return nlohmann::json::object(); }
  // Scheduler backends (above); the others have nothing to look at and grant at once.
  virtual bool refresh(std::vector<ManagedJob>& jobs) { return false; }
  virtual bool queues() const { return false; }  // starts and grows wait in the scheduler's queue, not here
  virtual Grant grant(const ManagedJob& j, std::string* why) const { return Grant::Ready; }
  virtual int leaving(const ManagedJob& j) const { return 0; }
  virtual bool moves(const ManagedJob& j, int workers) const { return false; }
};

std::unique_ptr<Resources> cpu_slots(int slots);  // a slot is a core of this host
std::unique_ptr<Resources> gpu_slots(int gpus);   // a slot is a GPU of this host (by index)
// The same with each GPU's type (types[i]: GPU i's; gpu_type_token), one entry per GPU.
std::unique_ptr<Resources> gpu_slots(std::vector<std::string> types);
// A GPU's type as a token: its product name (nvidia-smi's `name`) in lower case, a leading
// "nvidia " dropped, every run of characters other than a-z and 0-9 made one '-', none at either
// end: "NVIDIA H100 80GB HBM3" -> "h100-80gb-hbm3", "Tesla V100-SXM2-16GB" -> "tesla-v100-sxm2-16gb".
std::string gpu_type_token(const std::string& product);
// Each GPU's type token by index from `nvidia-smi --query-gpu=index,name --format=csv,noheader`
// ("0, NVIDIA H100 80GB HBM3" per line). Throws edp::DataError naming the line it cannot read.
std::vector<std::string> gpu_types_from_nvidia_smi(const std::string& csv);
// The types of this host's GPUs 0..gpus-1 from nvidia-smi (found on PATH); empty, with the reason
// in *why, when nvidia-smi cannot tell them (not there, failing, listing fewer GPUs).
std::vector<std::string> this_host_gpu_types(int gpus, std::string* why);
// A slot is a MIG instance of this host (edprun --mig: by its index in nvidia-smi -L's list), one
// rank each; the instances should be of one profile (a job's measured speed is taken for any).
std::unique_ptr<Resources> mig_slots(int instances);
struct HostfileSlot {
  std::string host;
  int slots = 0;
};
std::unique_ptr<Resources> hostfile_slots(std::vector<HostfileSlot> hosts, std::string hostfile);

// How a job ended, as its keeper (or what is left of it) tells.
struct ExitRecord {
  int code = 0;
  bool recovered = false;  // no exit record: judged from the job's status file after edprun ended
  std::string note;        // why, for the table's error
  bool cancelled = false;  // cancelled outside edp (the scheduler's own cancel): ends as cancelled
};

// The processes and files of the jobs. serve: FileRunner (keepers, edprun, the job directory);
// tests: a fake that records what was asked and returns what the test says happened.
class JobRunner {
 public:
  virtual ~JobRunner() = default;
  virtual std::string dir(const ManagedJob& j) const = 0;  // the job's directory (its files, its hostfile)
  // Starts the job at j.workers (edprun with `launch` placing it, then the job's command). Sets
  // keeper_pid/keeper_start; throws when it cannot be started.
  virtual void start(ManagedJob& j, const std::vector<std::string>& launch) = 0;
  virtual void signal(const ManagedJob& j, int sig) = 0;
  virtual void write_control(const ManagedJob& j, int workers, int64_t batch, bool stop) = 0;
  virtual void write_hostfile(const ManagedJob& j, const std::vector<HostShare>& hosts) = 0;
  // Observations. status(): the job's status file when it changed since the last call, else nullopt.
  virtual std::optional<elastic::JobStatus> status(const ManagedJob& j, bool even_unchanged = false) = 0;
  virtual const std::vector<elastic::MembershipEvent>& events(const ManagedJob& j) = 0;
  virtual std::optional<ExitRecord> exit_record(const ManagedJob& j) = 0;
  virtual bool keeper_alive(const ManagedJob& j) = 0;
  virtual bool edprun_alive(const ManagedJob& j) = 0;  // false also when it never recorded its pid
  virtual std::string last_error(const ManagedJob& j) = 0;
  virtual FinalMetrics final_metrics(const ManagedJob& j) = 0;
};

struct ControllerConfig {
  std::string policy = "goodput";  // goodput | dp | static
  double replan_s = 30, hysteresis = 0.15, pause_s = -1, start_s = 3, rescale_timeout_s = 120, preempt_grace_s = 60;
  // The least time a job stays at the size a rescale gave it before its speed there is judged
  // (docs/autoscaler.md §8, "Keeping a change").
  double settle_s = 30;
  int max_ranks_per_gpu = 1;
  int warmup_steps = 3;
  int64_t slot_memory_bytes = 0;  // each slot's memory, for the jobs' memory needs (0: not limited)
  // GPUs of several types: each named type's speed relative to the others (SlotType::speed; a type
  // not named: 1). Checked against the slots' types when the controller starts.
  std::map<std::string, double> gpu_speeds;
};

// One line of the decision log (ROOT/decisions.jsonl) per planning round.
using DecisionLog = std::function<void(const nlohmann::json& line)>;
using Clock = std::function<double()>;
using Logger = std::function<void(const std::string&)>;

class Controller {
 public:
  Controller(ControllerConfig cfg, Resources& res, JobRunner& runner, Clock clock, Logger log, DecisionLog decisions);

  // The table of a controller started again: running jobs are looked at once (one may have ended
  // while none ran) and must fit the resources (Resources::check_adopted). Returns how many run.
  int adopt(std::vector<ManagedJob> jobs);
  // A job that was submitted (validated spec); refused (failed) when it can never run here.
  ManagedJob& submit(const std::string& id, const JobSpec& spec);
  bool has(const std::string& id) const;
  void cancel(const std::string& id);

  // One tick: look at every running job, then plan when something happened or the periodic
  // interval has passed. Returns whether the table changed (it should be saved).
  bool tick();
  void note(const std::string& why) { dirty_ = true, trigger_ += why + "; "; }

  const std::vector<ManagedJob>& jobs() const { return jobs_; }
  int slots_held() const;
  int slots_committed() const;  // the slots the running jobs hold once their rescales in flight land
  bool idle() const;  // every job has ended
  bool changed() const { return changed_; }

 private:
  void observe(ManagedJob& j);
  void take_status(ManagedJob& j, const elastic::JobStatus& st);
  void take_events(ManagedJob& j);
  void follow_grant(ManagedJob& j);
  void move_off_leaving(ManagedJob& j);
  void check_timeouts(ManagedJob& j);
  void hold(ManagedJob& j, double cost);
  void give_up_rescale(ManagedJob& j, const std::string& why);
  void check_end(ManagedJob& j);
  void finish(ManagedJob& j, const ExitRecord& ex);
  void replan(const std::string& trigger);
  nlohmann::json act(ManagedJob& j, const LiveChoice& c);
  void start(ManagedJob& j, const LiveChoice& c);
  void start_moved(ManagedJob& j);
  void request(ManagedJob& j, int workers, int64_t batch);
  void tell(ManagedJob& j, int workers, int64_t batch);  // the job's hostfile (if any) and control file
  int must_hold() const;
  void preempt(ManagedJob& j, const std::string& reason);
  std::vector<LiveJob> live_jobs(std::vector<ManagedJob*>& refs);
  LivePolicy live_policy() const;
  void log(const std::string& s) { if (log_) log_(s); }

  ControllerConfig cfg_;
  Resources& res_;
  JobRunner& runner_;
  Clock now_;
  Logger log_;
  DecisionLog decisions_;
  std::vector<ManagedJob> jobs_;
  double last_plan_ = -1e300;
  bool dirty_ = true;
  bool changed_ = false;
  std::string trigger_;
  std::map<std::string, bool> kept_leaving_;  // jobs told once that they keep slots being taken away
};

}  // namespace edp::autoscale
