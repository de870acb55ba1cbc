// Elastic jobs: changing a running job's worker count and global batch without losing work.
// This header is the control file and the restart path's records; the job itself — in place
// first, restart as the fallback — is elastic::Job (edp/elastic/job.h).
//
// The flow (docs/elastic.md): a controller (a person, or edp-autoscale) writes the desired size
// to the job's control file, JSON {"workers": W, "global_batch": B} ("global_batch" optional:
// absent keeps the per-worker batch), or {"stop": true} to have the job commit a checkpoint and
// stop (a preemption that loses no step), replacing it atomically (write + rename). Every
// `--control-every` steps rank 0 looks at the file (only when its modification time or size
// changed) and broadcasts what it found, so every rank takes the same decision at the same step
// boundary. By restart, a request that differs from the job's current size makes every rank commit one
// checkpoint (rank 0 writes it, the replicas being identical) and exit with kRescaleExitCode;
// `edprun --control-file` then starts the job again with W ranks, which resume from that
// checkpoint: the sampler re-shards the rest of the epoch (each sample still seen once) and the
// learning rate follows the new global batch.
#pragma once
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

namespace edp::comm {
class Communicator;
}

namespace edp::elastic {

// The exit code of every rank of a job that stopped to be restarted at another size (EX_TEMPFAIL).
constexpr int kRescaleExitCode = 75;
// The exit code of every rank of a job that stopped because its control file asked it to
// ({"stop": true}: a preemption), after committing a checkpoint at that step: started again, it
// resumes there. edprun does not restart it. (77 is left alone: CTest's "skipped".)
constexpr int kStopExitCode = 78;

struct RescaleRequest {
  int workers = 0;
  int64_t global_batch = 0;  // 0: keep the per-worker batch
  bool stop = false;         // checkpoint and stop (workers and global_batch are then ignored)
  bool operator==(const RescaleRequest& o) const {
    return stop == o.stop && (stop || (workers == o.workers && global_batch == o.global_batch));
  }
};

// Parses a control file. Throws edp::DataError naming the file and the field for malformed JSON,
// unknown fields, a missing or non-positive "workers", a non-positive "global_batch", or a
// global batch that the workers do not divide. {"stop": true} (a boolean; "workers" may then be
// left out) asks the job to commit a checkpoint and stop with kStopExitCode.
// The file is read as edp reads every outside file (edp/core/files.h): a regular file only, at
// most files::kRecordLimit bytes. parse_control() checks text already read (`path` names it).
RescaleRequest read_control_file(const std::string& path);
RescaleRequest parse_control(const std::string& text, const std::string& path);

// What a request must satisfy before any rank acts on it.
struct ControlLimits {
  // Worker counts the launcher can run the job at (edprun passes them as EDP_ALLOWED_WORKERS);
  // empty: any count.
  std::vector<int> allowed_workers;
  // The global batches the job accepts (e.g. up to the training set's size); 0: no limit.
  int64_t min_global_batch = 0, max_global_batch = 0;
  // Where the global batch's bounds come from, for the refusal messages.
  std::string min_global_batch_rule, max_global_batch_rule;
  // The largest per-worker batch (memory); 0: no limit.
  int64_t max_worker_batch = 0;
  // allowed_workers from EDP_ALLOWED_WORKERS (elastic/allowed.h: "1-4,6,8"); the rest unset.
  static ControlLimits from_env();
};

// Why `want` cannot run under `limits` (empty when it can). `want.global_batch` must be set.
std::string refusal_reason(const RescaleRequest& want, const ControlLimits& limits);

// The control file as seen by a running job of `workers` ranks at global batch `global_batch`.
class ElasticControl {
 public:
  ElasticControl(std::string path, int workers, int64_t global_batch, ControlLimits limits = {});
  // Collective over `world`. Rank 0 (re)reads the file if it changed since the last poll; a file
  // that does not parse, or asks for a size the limits refuse (more workers than the launcher
  // can run, a global batch the workers do not divide or the job cannot take), is reported on
  // stderr once per version of the file and ignored: a controller's mistake never stops or
  // poisons a job. Returns the request on every rank when it asks for another size than the
  // current one or to stop, else nullopt.
  std::optional<RescaleRequest> poll(comm::Communicator& world);
  const std::string& path() const { return path_; }
  const ControlLimits& limits() const { return limits_; }
  // The job could not carry out the request poll() returned (e.g. a grow could not start its
  // ranks and there is no checkpoint to restart from). Call on every rank. The same request is
  // tried again after 2, then 4 more looks at the file; after kMaxAttempts failures it is dropped,
  // with a message, until the file changes.
  static constexpr int kMaxAttempts = 3;
  void failed(const std::string& why);

 private:
  std::string path_;
  RescaleRequest current_;
  ControlLimits limits_;
  void take(const std::string& text, const std::string& error);  // rank 0: a new version of the file
  timespec seen_mtime_{0, 0};
  int64_t seen_size_ = -1;
  uint64_t seen_ino_ = 0;
  std::string seen_text_, seen_error_;
  std::optional<RescaleRequest> last_;  // rank 0: the last valid, accepted request read
  int failures_ = 0;                    // of last_, in a row
  int64_t wait_ = 0;                    // looks at the file to skip before trying last_ again
};

// After the rescale checkpoint is committed, rank 0 records the size the job is to continue at
// in EDP_RESCALE_FILE (when set, i.e. under edprun) as JSON {"workers", "global_batch", "step",
// "checkpoint"}, written to a temporary file and renamed: edprun restarts the job at exactly
// that size and never re-reads the control file, which may have changed since. Returns the
// path written ("" when EDP_RESCALE_FILE is unset).
std::string record_rescale(const RescaleRequest& next, int64_t step, const std::string& checkpoint_path);

}  // namespace edp::elastic
