// The membership events of an elastic job, one JSON object per line in EDP_EVENTS_FILE (edprun
// sets it to <job dir>/events.jsonl). Rank 0 of the job appends them; the launcher reads them
// for the job's current size and its final summary.
//
//   {"event": "start",   "workers": 2, "global_batch": 128, "step": 0, "t": 1795460000.12}
//   {"event": "rescale", "mode": "in_place", "from_workers": 2, "workers": 4,
//    "from_global_batch": 128, "global_batch": 256, "step": 37, "requested_t": ..., "t": ...,
//    "pause_s": 0.41, "phases": {"decide_s": ..., "spawn_s": ..., "state_s": ..., ...}}
//   {"event": "rescale", "mode": "restart", ...same fields...}
//
// "t" is the wall time (seconds since the epoch) the event was written; for a rescale, it is
// written when the first step at the new size has finished, and pause_s = t - requested_t, the
// time from rank 0 reading the request to the end of that first step (the restart path carries
// requested_t through the rescale checkpoint). "start" is written each time the processes start
// (a first start, a restart after a crash or for a rescale). Unknown fields are to be ignored.
#pragma once
#include <cstdint>
#include <utility>
#include <string>
#include <vector>

namespace edp::elastic {

struct MembershipEvent {
  std::string event;  // "start" or "rescale"
  std::string mode;   // rescale: "in_place" or "restart"
  int from_workers = 0, workers = 0;
  int64_t from_global_batch = 0, global_batch = 0;
  int64_t step = 0;
  double requested_t = 0, t = 0, pause_s = 0;
  std::vector<std::pair<std::string, double>> phases;  // rescale: seconds per phase, in the order they ran
};

// Appends `e` as one line to EDP_EVENTS_FILE when it is set (one write(2) of the whole line with
// O_APPEND, so a reader never sees half a line). Never throws: a failure is logged.
void append_event(const MembershipEvent& e);

// Reads an events file. Lines that do not parse (a torn last line of a killed job) are skipped;
// a missing file gives no events.
std::vector<MembershipEvent> read_events(const std::string& path);

// Wall-clock seconds since the epoch.
double wall_time();

}  // namespace edp::elastic
