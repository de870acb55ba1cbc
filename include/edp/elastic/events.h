// The membership events of an elastic job, one JSON object per line in EDP_EVENTS_FILE (edprun
// sets it to <job dir>/events.jsonl). Rank 0 of the job appends them; the launcher reads them
// for the job's current size and its final summary.
//
//   {"event": "start",   "workers": 2, "global_batch": 128, "step": 0, "t": 1795460000.12}
//   {"event": "rescale", "mode": "in_place", "from_workers": 2, "workers": 4,
//    "from_global_batch": 128, "global_batch": 256, "step": 37, "requested_t": ..., "t": ...,
//    "pause_s": 0.41, "phases": {"decide_s": ..., "spawn_s": ..., "state_s": ..., ...}}
//   {"event": "rescale", "mode": "restart", ...same fields...}
//   {"event": "stop",    "workers": 2, "global_batch": 128, "step": 80, "t": ...}
//   {"event": "rate",    "workers": 2, "global_batch": 128, "step": 58, "t": ..., "steps": 20,
//    "samples_per_s": 10450.2}
//   {"event": "end",     "workers": 2, "global_batch": 128, "step": 940, "t": ...}
//
// Every event also carries "samples": the samples trained since the job began (all epochs, all
// sizes, across restarts) at "t"; the throughput over any stretch of the job, such as the rest of
// the run after a rescale, follows from two events. "end" is written when the last epoch is done.
//
// A rescale's "visible_s" is what the training lost to it: from the moment the ranks stopped
// training for the change to the end of the first step at the new size, less a typical step (the
// median of the steps before). An in-place grow starts its new ranks in the background while the
// job trains on (phase "background_s", not counted), so only the join is visible; by restart, the
// whole pause is.
// "start" and "rescale" carry "threads": the compute threads of each rank at the new size (rank
// order; edp/comm/layout.h). "rate" is the training speed settled at a size: the samples per
// second over the `steps` steps that follow the first step after a start or a rescale (that first
// step, which pays the change, is left out; a window that an epoch boundary interrupts starts
// again after it). It is written once per start or rescale, when the window is complete.
//
// "t" is the wall time (seconds since the epoch) the event was written; for a rescale, it is
// written when the first step at the new size has finished, and pause_s = t - requested_t, the
// time from rank 0 reading the request to the end of that first step (the restart path carries
// requested_t through the rescale checkpoint). "start" is written each time the processes start
// (a first start, a restart after a crash or for a rescale); "stop" when the job committed a
// checkpoint at "step" and stopped because its control file asked ({"stop": true}). Unknown
// fields are to be ignored.
#pragma once
#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <string>
#include <vector>

namespace edp::elastic {

struct MembershipEvent {
  std::string event;  // "start", "rescale", "stop", "rate" or "end"
  std::string mode;   // rescale: "in_place" or "restart"
  int from_workers = 0, workers = 0;
  int64_t from_global_batch = 0, global_batch = 0;
  int64_t step = 0;
  double requested_t = 0, t = 0, pause_s = 0;
  double visible_s = -1;  // rescale: the time the training lost to it (see the file comment); -1: not recorded
  std::vector<std::pair<std::string, double>> phases;  // rescale: seconds per phase, in the order they ran
  std::vector<int> threads;                            // start, rescale: compute threads per rank
  int64_t steps = 0;                                   // rate: steps measured
  double samples_per_s = 0;                            // rate
  int64_t samples = -1;                                // samples trained since the job began, at t (-1: unknown)
};

// Appends `e` as one line to EDP_EVENTS_FILE when it is set (one write(2) of the whole line with
// O_APPEND, so a reader never sees half a line). Never throws: a failure is logged.
void append_event(const MembershipEvent& e);

// Reads an events file. Lines that do not parse (a torn last line of a killed job) are skipped;
// a missing file gives no events.
// The file is read as a regular file of at most files::kTableLimit bytes (edp/core/files.h); one
// that cannot be read gives no events, with a warning. parse_events() reads the text itself.
std::vector<MembershipEvent> read_events(const std::string& path);
std::vector<MembershipEvent> parse_events(const std::string& text);

// Wall-clock seconds since the epoch.
double wall_time();

// ---- the job's measured progress: EDP_STATUS_FILE ------------------------------------------
// Rank 0 of an elastic job rewrites this JSON file (a temporary file renamed over it, so a reader
// sees a whole one) at most once a second and when the training ends. A controller (edp-autoscale
// serve) reads it to learn the job's throughput at each size it has run at:
//
//   {"name": "mlp", "state": "running", "t": 1795460000.1, "workers": 2, "global_batch": 128,
//    "epoch": 0, "epochs": 3, "step": 120, "samples_done": 15360, "samples_total": 180000,
//    "configs": [{"workers": 2, "global_batch": 128, "steps": 100, "step_s": 0.0123,
//                 "comm_s": 0.0011}, ...]}
//
// configs: one entry per (workers, global batch) this process has trained at; step_s is the
// median wall time of a step (from the end of one step to the end of the next, over the last 256
// steps), recent_step_s the median over the last kRecentSteps of them (what the job runs at now,
// free of steps long past, such as a slow start at the size), comm_s the mean exposed
// communication per step. Steps that span something else are
// left out: the first two after a start or a change of size, and the first of each epoch
// (evaluation runs between epochs). state: "running", "done", or "stopped" (its control file asked
// it to stop; started again, it resumes).
constexpr int64_t kRecentSteps = 32;

struct ConfigMeasure {
  int workers = 0;
  int64_t global_batch = 0;
  int64_t steps = 0;  // steps measured (not counting the ones left out)
  double step_s = 0, comm_s = 0;
  double recent_step_s = 0;  // 0: not reported (a status file of an older edp)
};

struct JobStatus {
  std::string name, state;
  double t = 0;
  int workers = 0;
  int64_t global_batch = 0, epoch = 0, epochs = 0, step = 0, samples_done = 0, samples_total = 0;
  std::vector<ConfigMeasure> configs;
};

// Reads a status file; std::nullopt when it is missing or does not parse (a reader may race a
// writer only through the rename, but a file can be garbled by hand).
std::optional<JobStatus> read_status(const std::string& path);
void write_status(const std::string& path, const JobStatus& s);  // atomic; never throws (logs)

// Rank 0's side: fed once per step, writes EDP_STATUS_FILE when set (inactive otherwise).
class StatusReporter {
 public:
  StatusReporter();
  bool active() const { return !path_.empty(); }
  // The next step's time spans something other than training (an epoch boundary, a rescale).
  void gap() { last_t_ = 0; skip_ = std::max(skip_, 1); }
  // After a step at (workers, global_batch); comm_total_s: the job's exposed communication so far.
  void step(const std::string& name, int workers, int64_t global_batch, int64_t epoch, int64_t epochs, int64_t step,
            int64_t samples_done, int64_t samples_total, double comm_total_s);
  void finish(const std::string& state = "done");  // the training ended ("done") or stopped: written now

 private:
  struct Window {
    ConfigMeasure m;
    std::vector<double> times;  // ring of the last 256 step times
    size_t next = 0;
    double comm_sum = 0;
  };
  void write(double now);
  std::string path_;
  JobStatus status_;
  std::vector<Window> windows_;
  double last_t_ = 0, last_comm_ = 0, last_write_ = 0;
  int skip_ = 2;
};

}  // namespace edp::elastic
