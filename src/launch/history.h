// What edprun knows about a job's life: its current size, the rescales it went through (in place,
// read from the job's membership events, or by restart), and the restarts edprun made after a
// crash or a stall; and the summary edprun prints when the job ends.
//
// The size comes from the events file (EDP_EVENTS_FILE = <job dir>/events.jsonl, written by the
// job's rank 0, edp/elastic/events.h): after an in-place rescale the job runs at another size than
// edprun started it with, and a restart after a crash must start it at that size. edprun polls the
// file while mpirun runs (poll(): a stat, and a read only when the file grew).
//
// A rescale by restart is seen twice: edprun restarts the job at the size of the rescale file
// (restart_rescale()), and the restarted job's rank 0 later writes the "rescale" event with
// mode "restart" and its pause; the event completes edprun's entry rather than adding one.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "edp/elastic/events.h"

namespace edp::launch {

struct HistoryEntry {
  enum Kind { Rescale, Restart } kind = Rescale;
  // Rescale: "in_place" or "restart". Restart: "crash" or "stall".
  std::string mode;
  int from_workers = 0, workers = 0;
  int64_t from_global_batch = 0, global_batch = 0;  // 0: unknown
  int64_t step = -1;                                // -1: unknown
  int exit_code = 0;                                // Restart: mpirun's exit code
  double t = 0;                                     // wall time: the event's, or edprun's at the failure
  bool has_pause = false;
  // Rescale: the event's pause_s (request read .. first step at the new size finished). Restart:
  // from the failure to the restarted processes' "start" event (the time until they run again;
  // loading the checkpoint and the steps lost since it come on top).
  double pause_s = 0;
};

class JobHistory {
 public:
  // start_workers: the size edprun starts the job at (the size until an event says otherwise).
  explicit JobHistory(int start_workers, std::string events_path = "");

  // Ignores the events already in the file (an earlier run's): only later ones count.
  void skip_existing();
  // Reads the events file if it grew since the last call; returns whether there were new events.
  bool poll();
  // The new events, in the file's order (poll() reads the file and calls this; tests call it).
  void observe(const std::vector<elastic::MembershipEvent>& events);

  // edprun restarts the job for a rescale (exit 75) at `workers`, from the rescale file.
  void restart_rescale(int from_workers, int workers, int64_t global_batch, int64_t step, double t);
  // edprun restarts the job after a failure (mpirun's exit code; 76 = a stall) at `workers`.
  void restart_failure(int exit_code, bool stall, int workers, double t);

  int workers() const { return workers_; }
  int64_t global_batch() const { return global_batch_; }  // 0 until an event names it
  const std::vector<HistoryEntry>& entries() const { return entries_; }
  int rescales() const;
  int restarts() const;

  // The lines edprun prints when the job ends (each "edprun: ...\n"): one per entry, then the
  // totals. Empty when the job was neither rescaled nor restarted.
  std::string summary(int exit_code) const;

 private:
  std::string path_;
  long long size_seen_ = -1;  // bytes of the events file already read
  size_t events_seen_ = 0;    // events already observed (the file is only appended to)
  int workers_;
  int64_t global_batch_ = 0;
  std::vector<HistoryEntry> entries_;
};

}  // namespace edp::launch
