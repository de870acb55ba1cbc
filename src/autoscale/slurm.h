// The cluster's own scheduler as the live controller's resources and job runner (serve --backend
// slurm, docs/autoscaler.md §8 "On a Slurm cluster"). Slurm owns the nodes; edp asks it:
//
//  - a job is a Slurm batch job (sbatch of the job's edprun, its files in ROOT/jobs/<id>/ on the
//    storage the nodes share), one rank per node, nodes exclusive; mpirun starts its daemons on the
//    other nodes through srun only (OMPI_MCA_plm=slurm), so nothing runs outside Slurm;
//  - the slots are nodes, and only those Slurm would give now count: the nodes edp's jobs hold and
//    the idle ones, less those other users' pending jobs wait for (edp's elastic jobs give way);
//  - a shrink gives back the nodes the job left (scontrol update JobId= NodeList=) once its ranks
//    there have left; a grow asks Slurm for more nodes and waits in its queue: by job expansion
//    (salloc --dependency=expand:<job>, then scontrol update NumNodes=0 merges the new allocation
//    into the job; SchedulerParameters=permit_job_expansion) or, without it, by a new allocation
//    (the job stops at a checkpoint and starts again at its new size);
//  - a preemption asks the job to checkpoint and stop, then scancel; a job cancelled in Slurm by
//    someone else ends as cancelled; a node drained under a job is left like a lost host.
//
// Slurm's commands go through SlurmClient, so that tests can give a fake Slurm.
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "autoscale/controller.h"
#include "autoscale/job_files.h"

namespace edp::autoscale {

// Slurm's client commands. The real one runs them (slurm_client()); tests give a fake.
class SlurmClient {
 public:
  virtual ~SlurmClient() = default;
  // Runs sbatch, squeue, sinfo, scontrol or scancel; returns its standard output. Throws
  // edp::Error naming the command and what it printed when it fails.
  virtual std::string run(const std::vector<std::string>& argv) = 0;
  // Starts a command that waits in Slurm's queue (salloc of a grow) in a session of its own, its
  // output to `log`; its job id is read from there.
  virtual void spawn(const std::vector<std::string>& argv, const std::string& log) = 0;
};
std::unique_ptr<SlurmClient> slurm_client();

// What squeue and sinfo say, in the formats the backend asks for (kSqueueFormat, kSinfoFormat).
struct SlurmJobInfo {
  std::string id, state, partition, batch_host, reason, name;
  int nodes = 0;                  // allocated, or asked for while pending
  std::vector<std::string> node_list;
};
struct SlurmNodeInfo {
  std::string name, state;  // sinfo's long state: idle, allocated, mixed, draining, drained, down*, ...
};
// A node's GPUs as its GRES says (Slurm's gres.conf Type): one type, and how many of it.
struct SlurmNodeGpus {
  std::string type;  // "" : no GPU, GPUs without a type, or GPUs of several types
  int count = 0;
};
// The GPUs of one GRES string (scontrol's Gres=, sinfo's %G): "gpu:a100:4(S:0-1)",
// "gpu:a100:4,shard:8", "gpu:4" (no type), "(null)" (none); several GPU types: no type.
SlurmNodeGpus gpu_gres(const std::string& gres);
// Each node's GPUs from `scontrol show node -o` (one line per node, NodeName= ... Gres= ...);
// lines without NodeName= are passed over.
std::map<std::string, SlurmNodeGpus> parse_node_gres(const std::string& show_node);
extern const char* const kSqueueFormat;
extern const char* const kSinfoFormat;
std::vector<SlurmJobInfo> parse_squeue(const std::string& text);
std::vector<SlurmNodeInfo> parse_sinfo(const std::string& text);
bool node_usable(const std::string& state);   // takes jobs: idle, allocated, mixed, completing
bool node_draining(const std::string& state);  // drained or being drained, down, failing
bool job_final(const std::string& state);      // COMPLETED, CANCELLED, FAILED, NODE_FAIL, ...
// A value of `scontrol show config`'s output ("" when unset), e.g. SchedulerParameters.
std::string config_value(const std::string& show_config, const std::string& key);
std::string scheduler_parameters(const std::string& show_config);

struct SlurmOptions {
  std::string partition;                // "" : Slurm's default partition
  std::string grow = "auto";            // expand | new-allocation | auto (expand where permitted)
  double poll_s = 2;                    // at most one look at squeue/sinfo per poll_s
  std::vector<std::string> extra_args;  // for sbatch and salloc (account, QOS, time limit)
};

class SlurmBackend final : public Resources, public JobDirRunner {
 public:
  // Asks Slurm for its configuration and the partition at once; throws edp::Error when Slurm
  // cannot be reached or the partition does not exist.
  SlurmBackend(SlurmClient& slurm, SlurmOptions o, std::filesystem::path root, std::string edprun,
               std::vector<std::string> edprun_args, Clock clock, Logger log);

  // Resources
  int slots() const override { return capacity_; }
  int limit() const override { return static_cast<int>(nodes_.size()); }
  std::string describe() const override;
  // The partition's nodes by GPU type (their GRES), when every node has GPUs of one type and
  // there are two types or more: each type's count is its share of slots(). Else none.
  std::vector<SlotType> types() const override;
  // The GPU types of the partition's nodes, read at the start (none when the partition is untyped);
  // types() holds those with nodes to be had now.
  std::vector<std::string> gpu_types() const;
  void assign(ManagedJob& j, int workers, const std::vector<ManagedJob>& all) override;
  void landed(ManagedJob& j) override;
  void release(ManagedJob& j) override;
  void give_up_rescale(ManagedJob& j) override;
  void check_adopted(const std::vector<ManagedJob>& jobs) const override;
  std::vector<std::string> launch_args(const ManagedJob& j, int ranks_per_slot, const std::string& job_dir) const override;
  std::vector<HostShare> hostfile_of(const ManagedJob& j) const override { return j.next_hosts; }
  nlohmann::json usage(const std::vector<ManagedJob>& jobs) const override;
  bool refresh(std::vector<ManagedJob>& jobs) override;
  bool queues() const override { return true; }
  Grant grant(const ManagedJob& j, std::string* why) const override;
  int leaving(const ManagedJob& j) const override;
  bool moves(const ManagedJob& j, int workers) const override;

  // JobRunner (the job's files: JobDirRunner)
  void start(ManagedJob& j, const std::vector<std::string>& launch) override;
  void signal(const ManagedJob& j, int sig) override;
  std::optional<ExitRecord> exit_record(const ManagedJob& j) override;
  bool keeper_alive(const ManagedJob& j) override;
  bool edprun_alive(const ManagedJob& j) override { return keeper_alive(j); }

  const std::string& partition() const { return o_.partition; }
  bool expands() const { return expand_; }

 private:
  bool poll();
  void follow(ManagedJob& j);
  void follow_grow(ManagedJob& j);
  void merge_grow(ManagedJob& j, const SlurmJobInfo& helper);
  void compute_capacity(const std::vector<ManagedJob>& jobs);
  std::string batch_script(const ManagedJob& j, const std::vector<std::string>& launch) const;
  const SlurmJobInfo* find(const std::string& id) const;
  static std::string grow_id(const std::string& log);  // the job id salloc printed, "" not yet
  void withdraw_grow(const ManagedJob& j);
  // The job's Slurm job name: edp-<tag of the root>-<id> (its grow requests: ...-grow).
  std::string name(const ManagedJob& j) const { return "edp-" + tag_ + "-" + j.id; }
  void say(const std::string& s) const { if (log_) log_(s); }

  SlurmClient& slurm_;
  SlurmOptions o_;
  std::string tag_;
  Clock now_;
  Logger log_;
  bool expand_ = false, shrink_ = true, resize_once_ = false;
  std::vector<SlurmNodeInfo> nodes_;  // the partition's nodes, as sinfo last said
  std::map<std::string, SlurmJobInfo> jobs_;  // every job squeue listed, by id
  std::set<std::string> ours_;  // Slurm job ids of edp jobs (allocations and grows), of the table
  bool seen_ = false, stale_ = false;
  double last_poll_ = -1e300;
  bool force_ = true;  // look at once (a job was just submitted)
  int capacity_ = 0, foreign_wait_ = 0;
  std::map<std::string, SlurmNodeGpus> gpus_;  // each node's GPUs (scontrol show node), typed partitions only
  std::map<std::string, int> type_capacity_;    // slots() by GPU type, typed partitions only
  std::string gres_for(const ManagedJob& j) const;  // "--gres=gpu:TYPE:N" for a job of a type, else ""
  std::string type_of_node(const std::string& node) const;
};

}  // namespace edp::autoscale
