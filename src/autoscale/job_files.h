// A job's directory as the live controller reads and writes it (docs/autoscaler.md §8):
// ROOT/jobs/<id>/{control.json, hostfile, status.json, events.jsonl, exit.json, log}. The part of a
// JobRunner that is the same whoever starts the job's processes (serve's keepers, or Slurm):
// subclasses add how a job is started, signalled and known to be alive.
#pragma once
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "autoscale/controller.h"

namespace edp::autoscale {

class JobDirRunner : public JobRunner {
 public:
  // edprun: the program that runs each job; edprun_args: extra arguments for every job.
  JobDirRunner(std::filesystem::path root, std::string edprun, std::vector<std::string> edprun_args)
      : root_(std::move(root)), edprun_(std::move(edprun)), edprun_args_(std::move(edprun_args)) {}

  std::string dir(const ManagedJob& j) const override { return (root_ / "jobs" / j.id).string(); }
  void write_control(const ManagedJob& j, int workers, int64_t batch, bool stop) override;
  void write_hostfile(const ManagedJob& j, const std::vector<HostShare>& hosts) override;
  std::optional<elastic::JobStatus> status(const ManagedJob& j, bool even_unchanged) override;
  const std::vector<elastic::MembershipEvent>& events(const ManagedJob& j) override;
  std::string last_error(const ManagedJob& j) override;
  FinalMetrics final_metrics(const ManagedJob& j) override;

 protected:
  // exit.json, as the job's supervisor (keeper, or the Slurm batch script) wrote it.
  std::optional<ExitRecord> exit_file(const ManagedJob& j) const;
  const std::filesystem::path& root() const { return root_; }
  // The job's command line: edprun at j.workers with the job's control, status and events files,
  // `launch` (what places it), the extra arguments, then the spec's command ({job_dir} replaced).
  std::vector<std::string> edprun_command(const ManagedJob& j, const std::vector<std::string>& launch) const;

 private:
  // A file's modification time and size as last seen: the controller polls every tick and reads a
  // job's status and events only when they changed (they are rewritten atomically or appended).
  struct FileStamp {
    bool seen = false;
    std::filesystem::file_time_type mtime{};
    uintmax_t size = 0;
  };
  static bool changed(const std::filesystem::path& p, FileStamp& s);
  struct Cache {
    FileStamp status, events_stamp;
    std::vector<elastic::MembershipEvent> events;
  };
  std::filesystem::path root_;
  std::string edprun_;
  std::vector<std::string> edprun_args_;
  std::map<std::string, Cache> cache_;
};

// The job's own last complaint in its log: the last line outside Open MPI's banners (between
// dashed lines) that reads like an error, else edprun's, else the last line.
std::string last_error_in(const std::filesystem::path& log);
// The last JSON object line of the log with a training's summary (the examples print one).
FinalMetrics metrics_in(const std::filesystem::path& log);

}  // namespace edp::autoscale
