// Elastic jobs: changing a running job's worker count and global batch without losing work.
//
// The flow (docs/elastic.md): a controller (a person, or edp-autoscale) writes the desired size
// to the job's control file, JSON {"workers": W, "global_batch": B} ("global_batch" optional:
// absent keeps the per-worker batch), replacing it atomically (write + rename). Every
// `--control-every` steps rank 0 looks at the file (only when its modification time or size
// changed) and broadcasts what it found, so every rank takes the same decision at the same step
// boundary. A request that differs from the job's current size makes every rank commit one
// checkpoint (rank 0 writes it, the replicas being identical) and exit with kRescaleExitCode;
// `edprun --control-file` then starts the job again with W ranks, which resume from that
// checkpoint: the sampler re-shards the rest of the epoch (each sample still seen once) and the
// learning rate follows the new global batch.
#pragma once
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>

namespace edp::comm {
class Communicator;
}

namespace edp::elastic {

// The exit code of every rank of a job that stopped to be restarted at another size (EX_TEMPFAIL).
constexpr int kRescaleExitCode = 75;

struct RescaleRequest {
  int workers = 0;
  int64_t global_batch = 0;  // 0: keep the per-worker batch
  bool operator==(const RescaleRequest& o) const { return workers == o.workers && global_batch == o.global_batch; }
};

// Parses a control file. Throws edp::DataError naming the file and the field for malformed JSON,
// unknown fields, a missing or non-positive "workers", a non-positive "global_batch", or a
// global batch that the workers do not divide.
RescaleRequest read_control_file(const std::string& path);

// The control file as seen by a running job of `workers` ranks at global batch `global_batch`.
class ElasticControl {
 public:
  ElasticControl(std::string path, int workers, int64_t global_batch);
  // Collective over `world`. Rank 0 (re)reads the file if it changed since the last poll; a file
  // that does not parse is reported on stderr (once per version of the file) and ignored, so a
  // controller's mistake never stops a job. Returns the request on every rank when it asks for
  // another size than the current one, else nullopt.
  std::optional<RescaleRequest> poll(comm::Communicator& world);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  RescaleRequest current_;
  timespec seen_mtime_{0, 0};
  int64_t seen_size_ = -1;
  std::optional<RescaleRequest> last_;  // rank 0: the last valid request read
};

}  // namespace edp::elastic
