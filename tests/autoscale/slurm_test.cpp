// The live controller on Slurm (src/autoscale/slurm.h) without a cluster: the parsers of squeue's
// and sinfo's output, and the controller with the Slurm backend against a fake Slurm — a few
// nodes and a FIFO queue that answers sbatch, salloc, squeue, sinfo, scontrol and scancel as the
// real commands do (in the formats the backend asks for). The job's files are real (a temporary
// root); the test plays the job (its status, events and exit record). The real Slurm runs in
// tests/cluster (cluster_serve_slurm).
#include "autoscale/slurm.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "edp/core/error.h"
#include "edp/core/files.h"
#include "edp/elastic/elastic.h"

using namespace edp;
using namespace edp::autoscale;
namespace fs = std::filesystem;

TEST(SlurmParse, SqueueLinesWithListsReasonsAndNames) {
  const auto js = parse_squeue(
      "12|RUNNING|3|edp|edp-h1|edp-h[1-3]|None|edp-j0001\n"
      "13|PENDING|1|edp|n/a||Resources|someone's|job\n"
      "\n");
  ASSERT_EQ(js.size(), 2u);
  EXPECT_EQ(js[0].node_list, (std::vector<std::string>{"edp-h1", "edp-h2", "edp-h3"}));
  EXPECT_EQ(js[0].batch_host, "edp-h1");
  EXPECT_EQ(js[1].state, "PENDING");
  EXPECT_TRUE(js[1].node_list.empty());
  EXPECT_EQ(js[1].reason, "Resources");
  EXPECT_EQ(js[1].name, "someone's|job") << "the name is last: it may hold the separator";
  EXPECT_THROW(parse_squeue("12|RUNNING\n"), DataError);
  EXPECT_THROW(parse_squeue("12|RUNNING|x|edp|h|h|None|n\n"), DataError);
}

TEST(SlurmParse, SinfoStatesAndConfig) {
  const auto ns = parse_sinfo("edp-h1|idle\nedp-h2|draining\nedp-h3|down*\nedp-h1|idle\n");
  ASSERT_EQ(ns.size(), 3u) << "a node listed twice counts once";
  EXPECT_TRUE(node_usable("idle"));
  EXPECT_TRUE(node_usable("mixed"));
  EXPECT_TRUE(node_usable("allocated"));
  EXPECT_FALSE(node_usable("idle*")) << "not responding";
  EXPECT_FALSE(node_usable("draining"));
  EXPECT_TRUE(node_draining("draining"));
  EXPECT_TRUE(node_draining("drained"));
  EXPECT_FALSE(node_draining("allocated"));
  EXPECT_TRUE(job_final("CANCELLED"));
  EXPECT_FALSE(job_final("COMPLETING"));
  EXPECT_EQ(scheduler_parameters("SchedulerType           = sched/backfill\nSchedulerParameters     = permit_job_expansion,bf_interval=30\n"),
            "permit_job_expansion,bf_interval=30");
  EXPECT_EQ(scheduler_parameters("SchedulerParameters     = (null)\n"), "");
}

namespace {

// A small Slurm: nodes n1..nN, FIFO scheduling when the test calls schedule().
struct FakeSlurm : SlurmClient {
  struct J {
    std::string id, name, state = "PENDING", reason = "Resources", expand;
    int nodes = 1;
    std::vector<std::string> on;
  };
  std::vector<std::string> names = {"n1", "n2", "n3"};
  std::map<std::string, bool> drain;
  std::map<std::string, J> jobs;
  int next = 100;
  std::string params = "permit_job_expansion", config;
  std::string show_node;  // what `scontrol show node -o` prints (the nodes' GRES); "" none
  std::vector<std::vector<std::string>> calls;

  static std::string opt(const std::vector<std::string>& a, const std::string& k) {
    for (const auto& x : a)
      if (x.rfind(k + "=", 0) == 0) return x.substr(k.size() + 1);
    return "";
  }
  std::string holder(const std::string& n) const {
    for (const auto& [id, j] : jobs)
      if (std::find(j.on.begin(), j.on.end(), n) != j.on.end() && j.state == "RUNNING") return id;
    return "";
  }
  std::string add(const std::vector<std::string>& a) {
    J j;
    j.id = std::to_string(next++);
    j.name = opt(a, "--job-name");
    j.nodes = std::stoi(opt(a, "--nodes"));
    const std::string dep = opt(a, "--dependency");
    if (!dep.empty()) j.expand = dep.substr(dep.find(':') + 1);
    jobs[j.id] = j;
    return j.id;
  }
  std::string run(const std::vector<std::string>& a) override {
    calls.push_back(a);
    const std::string& c = a[0];
    if (c == "scontrol" && a[1] == "show" && a.size() > 2 && a[2] == "node") return show_node;
    if (c == "scontrol" && a[1] == "show") return config + "SchedulerParameters     = " + params + "\n";
    if (c == "sinfo" && opt(a, "--format") == "%P") return "edp*\n";
    if (c == "sinfo") {
      std::string out;
      for (const auto& n : names) {
        const bool busy = !holder(n).empty();
        out += n + "|" + (drain[n] ? (busy ? "draining" : "drained") : busy ? "allocated" : "idle") + "\n";
      }
      return out;
    }
    if (c == "squeue") {
      std::string out, only = opt(a, "--jobs");
      for (const auto& [id, j] : jobs) {
        if (!only.empty() && id != only) continue;
        std::string list;
        for (const auto& n : j.on) list += (list.empty() ? "" : ",") + n;
        out += id + "|" + j.state + "|" + std::to_string(j.state == "PENDING" ? j.nodes : static_cast<int>(j.on.size())) +
               "|edp|" + (j.on.empty() ? "n/a" : j.on[0]) + "|" + list + "|" + (j.state == "PENDING" ? j.reason : "None") +
               "|" + j.name + "\n";
      }
      return out;
    }
    if (c == "sbatch") return add(a) + "\n";
    if (c == "scancel") {
      J& j = jobs.at(a.back());
      j.state = "CANCELLED";
      j.on.clear();
      return "";
    }
    if (c == "scontrol" && a[1] == "update") {
      J& j = jobs.at(opt(a, "JobId"));
      if (opt(a, "NumNodes") == "0") {  // merged into the job it expands
        J& into = jobs.at(j.expand);
        into.on.insert(into.on.end(), j.on.begin(), j.on.end());
        j.on.clear();
        j.state = "COMPLETED";
      } else {
        std::vector<std::string> keep;
        std::stringstream ss(opt(a, "NodeList"));
        for (std::string n; std::getline(ss, n, ',');) keep.push_back(n);
        j.on = keep;
      }
      return "";
    }
    throw Error("fake slurm: no such command " + c);
  }
  void spawn(const std::vector<std::string>& a, const std::string& log) override {
    calls.push_back(a);
    files::write_atomic(log, "salloc: Pending job allocation " + add(a) + "\n");
  }
  // FIFO: each pending job in submission order starts when enough nodes are free and not drained.
  void schedule() {
    for (auto& [id, j] : jobs) {
      if (j.state != "PENDING") continue;
      std::vector<std::string> idle;
      for (const auto& n : names)
        if (holder(n).empty() && !drain[n]) idle.push_back(n);
      if (static_cast<int>(idle.size()) < j.nodes) return;
      j.on.assign(idle.begin(), idle.begin() + j.nodes);
      j.state = "RUNNING";
    }
  }
  const std::vector<std::string>* last(const std::string& cmd) const {
    for (auto it = calls.rbegin(); it != calls.rend(); ++it)
      if ((*it)[0] == cmd) return &*it;
    return nullptr;
  }
};

JobSpec spec(std::string extra = "") {
  if (extra.find("max_workers") == std::string::npos) extra += R"(, "max_workers": 3)";
  return parse_job_spec(R"({"name": "t", "command": ["p"], "min_batch": 64, "max_batch": 256)" + extra + "}", "spec");
}

struct Cluster {
  explicit Cluster(const std::string& grow = "auto", const std::string& config = "", const std::string& show_node = "") {
    static int n = 0;
    root = fs::temp_directory_path() / ("edp-slurm-test-" + std::to_string(getpid()) + "-" + std::to_string(n++));
    fs::remove_all(root);
    fs::create_directories(root);
    slurm.config = config;
    slurm.show_node = show_node;
    SlurmOptions o;
    o.grow = grow;
    o.poll_s = 0;
    backend = std::make_unique<SlurmBackend>(slurm, o, root, "edprun", std::vector<std::string>{}, [this] { return t; },
                                             [this](const std::string& s) { log.push_back(s); });
    ControllerConfig cfg;
    cfg.policy = "dp";
    cfg.pause_s = 0.1;
    ctl = std::make_unique<Controller>(cfg, *backend, *backend, [this] { return t; },
                                       [this](const std::string& s) { log.push_back(s); }, [](const nlohmann::json&) {});
  }
  ~Cluster() { fs::remove_all(root); }
  const ManagedJob& job(const std::string& id) const {
    for (const ManagedJob& j : ctl->jobs())
      if (j.id == id) return j;
    throw Error("no job " + id);
  }
  std::string file(const std::string& id, const std::string& name) const {
    return files::read_file_if_exists((root / "jobs" / id / name).string()).value_or("");
  }
  // The job reports `steps` steps at its size (past the warm-up) with lots of work left.
  void report(const std::string& id, int workers, int64_t batch, int64_t steps = 50) {
    elastic::JobStatus st;
    st.state = "running";
    st.workers = workers;
    st.global_batch = batch;
    st.samples_total = 10'000'000;
    st.configs.push_back({workers, batch, steps, 0.064 / workers, 0.0});
    elastic::write_status((root / "jobs" / id / "status.json").string(), st);
  }
  void event(const std::string& id, const std::string& what, int from, int to, int64_t batch) {
    std::ofstream(root / "jobs" / id / "events.jsonl", std::ios::app)
        << nlohmann::json{{"event", what}, {"mode", "restart"}, {"from_workers", from}, {"workers", to},
                          {"global_batch", batch}, {"pause_s", 0.5}}.dump() << "\n";
  }
  void tick(int n = 1) {
    for (int i = 0; i < n; ++i) {
      t += 1;
      ctl->tick();
    }
  }
  bool logged(const std::string& s) const {
    return std::any_of(log.begin(), log.end(), [&](const std::string& l) { return l.find(s) != std::string::npos; });
  }
  double t = 1000;
  fs::path root;
  FakeSlurm slurm;
  std::unique_ptr<SlurmBackend> backend;
  std::unique_ptr<Controller> ctl;
  std::vector<std::string> log;
};

// A job started at `workers` nodes (64 samples each) and reporting there; its Slurm job id.
std::string running_job(Cluster& c, const std::string& id, const std::string& extra = "", int workers = 1) {
  c.ctl->submit(id, spec(extra + (workers > 1 ? R"(, "workers": )" + std::to_string(workers) + R"(, "batch": )" +
                                                    std::to_string(64 * workers)
                                              : "")));
  c.tick();
  c.slurm.schedule();
  c.tick();
  c.report(id, workers, 64 * workers);
  return c.job(id).sched.id;
}

}  // namespace

TEST(SlurmBackend, StartsEachJobAsABatchJobAndLearnsItsNodes) {
  Cluster c;
  EXPECT_EQ(c.backend->partition(), "edp");
  EXPECT_EQ(c.backend->limit(), 3);
  c.ctl->submit("a", spec());
  c.tick();
  const auto* sb = c.slurm.last("sbatch");
  ASSERT_NE(sb, nullptr);
  for (const char* a : {"--nodes=1", "--exclusive", "--ntasks-per-node=1", "--partition=edp"})
    EXPECT_NE(std::find(sb->begin(), sb->end(), a), sb->end()) << a;
  EXPECT_TRUE(std::any_of(sb->begin(), sb->end(), [](const std::string& x) {
    return x.rfind("--job-name=edp-", 0) == 0 && x.size() == 21 && x.substr(19) == "-a";
  })) << "named edp-<tag of the root>-<id>";
  EXPECT_EQ(c.job("a").state, JobPhase::Running);
  EXPECT_EQ(c.job("a").sched.state, "PENDING");
  const std::string script = c.file("a", "job.sbatch");
  EXPECT_NE(script.find("export OMPI_MCA_plm=slurm"), std::string::npos) << "daemons through srun only";
  EXPECT_NE(script.find("--reread-hostfile"), std::string::npos);
  EXPECT_NE(script.find("exit.json"), std::string::npos);
  EXPECT_NE(c.file("a", "control.json").find("\"workers\":1"), std::string::npos);
  c.slurm.schedule();
  c.tick();
  EXPECT_EQ(c.job("a").sched.state, "RUNNING");
  EXPECT_EQ(c.job("a").hosts, (std::vector<HostShare>{{"n1", 1}}));
  EXPECT_EQ(c.backend->slots(), 3);
  // Ends by the exit record its batch script writes.
  files::write_atomic((c.root / "jobs/a/exit.json").string(), "{\"code\": 0}\n");
  c.tick();
  EXPECT_EQ(c.job("a").state, JobPhase::Done);
}

// Other users' pending jobs take the nodes they wait for off what edp plans with: a job of edp
// shrinks, gives its node back once its ranks left it, and the other job gets it.
TEST(SlurmBackend, GivesWayToOtherUsersAndGivesNodesBack) {
  Cluster c;
  running_job(c, "a", "", 3);
  c.tick();
  ASSERT_EQ(c.job("a").hosts.size(), 3u);
  FakeSlurm::J other;
  other.id = "999";
  other.name = "someone";
  c.slurm.jobs[other.id] = other;  // pending, Resources, 1 node
  c.tick();
  EXPECT_EQ(c.backend->slots(), 2);
  EXPECT_EQ(c.job("a").target_workers, 2);
  EXPECT_NE(c.file("a", "control.json").find("\"workers\":2"), std::string::npos);
  EXPECT_EQ(c.file("a", "hostfile").find("n3"), std::string::npos) << c.file("a", "hostfile");
  EXPECT_EQ(c.slurm.last("scontrol")->at(1), "show") << "nothing given back before the ranks left";
  c.event("a", "rescale", 3, 2, c.job("a").target_batch);
  c.tick();
  const auto* up = c.slurm.last("scontrol");
  ASSERT_EQ(up->at(1), "update");
  EXPECT_EQ(up->back(), "NodeList=n1,n2");
  c.slurm.schedule();
  EXPECT_EQ(c.slurm.jobs["999"].state, "RUNNING");
  EXPECT_EQ(c.slurm.jobs["999"].on, (std::vector<std::string>{"n3"}));
}

// A grow asks Slurm for a node (job expansion) and waits in its queue; the job is told only once
// Slurm has granted the node and it has been merged into the job's allocation.
TEST(SlurmBackend, AGrowWaitsInTheQueueThenMerges) {
  Cluster c;
  c.slurm.names = {"n1", "n2"};
  const std::string b = running_job(c, "b", R"(, "max_workers": 1)");  // holds n1
  const std::string a = running_job(c, "a");                             // n2
  c.slurm.jobs[b].on = {"n1"};
  c.tick();
  ASSERT_EQ(c.job("a").hosts, (std::vector<HostShare>{{"n2", 1}}));
  // b ends: a grows into n1, which Slurm still has to free (the fake schedules when told).
  files::write_atomic((c.root / "jobs/b/exit.json").string(), "{\"code\": 0}\n");
  c.tick();
  ASSERT_TRUE(c.job("a").awaiting) << "the grow waits for Slurm";
  const auto* sa = c.slurm.last("salloc");
  ASSERT_NE(sa, nullptr);
  EXPECT_NE(std::find(sa->begin(), sa->end(), "--dependency=expand:" + a), sa->end());
  EXPECT_NE(c.file("a", "control.json").find("\"workers\":1"), std::string::npos) << "not told yet";
  c.tick();
  EXPECT_TRUE(c.logged("its grow waits in Slurm's queue")) << "seen pending";
  c.slurm.jobs[b].state = "COMPLETED";
  c.slurm.jobs[b].on.clear();
  c.slurm.schedule();
  c.tick();
  EXPECT_FALSE(c.job("a").awaiting);
  EXPECT_NE(c.file("a", "control.json").find("\"workers\":2"), std::string::npos);
  EXPECT_NE(c.file("a", "hostfile").find("n2 slots=1\nn1 slots=1"), std::string::npos) << c.file("a", "hostfile");
  EXPECT_EQ(c.slurm.jobs[a].on.size(), 2u) << "merged (scontrol update NumNodes=0)";
}

TEST(SlurmBackend, ACancelInSlurmIsSeenAsCancelled) {
  Cluster c;
  const std::string id = running_job(c, "a", R"(, "max_workers": 1)");
  c.slurm.jobs[id].state = "CANCELLED";
  c.slurm.jobs[id].on.clear();
  c.tick();
  EXPECT_EQ(c.job("a").state, JobPhase::Cancelled);
  EXPECT_NE(c.job("a").error.find("cancelled in Slurm"), std::string::npos) << c.job("a").error;
  // edp's own cancel is a scancel.
  c.ctl->submit("b", spec(R"(, "max_workers": 1)"));
  c.tick();
  c.ctl->cancel("b");
  EXPECT_EQ(c.slurm.last("scancel")->back(), c.job("b").sched.id);
}

TEST(SlurmBackend, ADrainedNodeIsLeftLikeALostHost) {
  Cluster c;
  running_job(c, "a", "", 3);
  c.tick();
  c.slurm.drain["n2"] = true;
  c.tick();
  EXPECT_TRUE(c.logged("being taken away (drained)"));
  EXPECT_EQ(c.job("a").target_workers, 2);
  EXPECT_EQ(c.file("a", "hostfile").find("n2"), std::string::npos) << c.file("a", "hostfile");
  c.event("a", "rescale", 3, 2, c.job("a").target_batch);
  c.tick();
  EXPECT_EQ(c.slurm.last("scontrol")->back(), "NodeList=n1,n3");
}

// Without job expansion a grow is a stop at a checkpoint and a start in a new allocation.
TEST(SlurmBackend, WithoutExpansionAGrowStartsANewAllocation) {
  Cluster c("new-allocation");
  const std::string old = running_job(c, "a");
  c.tick();
  ASSERT_TRUE(c.job("a").moving);
  EXPECT_NE(c.file("a", "control.json").find("\"stop\":true"), std::string::npos);
  EXPECT_EQ(c.slurm.last("salloc"), nullptr);
  files::write_atomic((c.root / "jobs/a/exit.json").string(), "{\"code\": 78}\n");
  c.slurm.jobs[old].state = "FAILED";
  c.tick();
  EXPECT_EQ(c.job("a").state, JobPhase::Running);
  EXPECT_NE(c.job("a").sched.id, old);
  const auto* sb = c.slurm.last("sbatch");
  EXPECT_NE(std::find(sb->begin(), sb->end(), "--nodes=" + std::to_string(c.job("a").workers)), sb->end());
  EXPECT_GT(c.job("a").workers, 1);
  EXPECT_EQ(c.file("a", "control.json").find("stop"), std::string::npos);
  EXPECT_EQ(c.job("a").rescales, 1);
  // Refused where Slurm does not permit it.
  FakeSlurm plain;
  plain.params = "";
  SlurmOptions o;
  o.grow = "expand";
  EXPECT_THROW(SlurmBackend(plain, o, c.root, "edprun", {}, [] { return 0.0; }, {}), Error);
}

// A controller started again finds its jobs in Slurm's queue by their Slurm job ids; a serve
// without --backend slurm refuses them, and this one refuses jobs that are no Slurm jobs.
TEST(SlurmBackend, AControllerStartedAgainFollowsItsSlurmJobs) {
  Cluster c;
  const std::string id = running_job(c, "a", R"(, "max_workers": 1)");
  c.tick();
  std::vector<ManagedJob> table = c.ctl->jobs();
  Cluster again;
  again.slurm = c.slurm;
  again.slurm.calls.clear();
  EXPECT_EQ(again.ctl->adopt(table), 1);
  EXPECT_EQ(again.job("a").state, JobPhase::Running);
  EXPECT_EQ(again.job("a").sched.id, id);
  EXPECT_THROW(cpu_slots(2)->check_adopted(table), Error);
  EXPECT_THROW(hostfile_slots({{"n1", 1}}, "hosts")->check_adopted(table), Error);
  table[0].sched = SchedJob{};
  EXPECT_THROW(again.backend->check_adopted(table), Error);
}

// A preemption asks the job to checkpoint and stop; one that has not stopped after the grace
// period is cancelled in Slurm (scancel), and queued again.
TEST(SlurmBackend, PreemptsByTheControlFileThenScancel) {
  Cluster c;
  c.slurm.names = {"n1"};
  const std::string id = running_job(c, "low", R"(, "max_workers": 1, "preemptible": true)");
  c.tick();
  c.ctl->submit("high", spec(R"(, "max_workers": 1, "weight": 100, "samples": 1000000)"));
  c.tick();
  ASSERT_TRUE(c.job("low").preempt_requested);
  EXPECT_NE(c.file("low", "control.json").find("\"stop\":true"), std::string::npos);
  EXPECT_EQ(c.job("high").sched.state, "PENDING") << "asked for at once: it waits in Slurm's queue for low's node";
  c.t += 61;  // the default grace is 60 s
  c.tick();
  EXPECT_EQ(c.slurm.last("scancel")->back(), id);
  c.tick();  // Slurm says CANCELLED: the preemption we asked for, not a cancel
  EXPECT_EQ(c.job("low").state, JobPhase::Queued);
  EXPECT_EQ(c.job("low").preemptions, 1);
}

// Slurm before 24.11 without slurmdbd refuses every update of a job once it was resized ("the DB
// index is being set"): a job resized once rescales next by a new allocation.
TEST(SlurmBackend, AJobResizedOnceMovesToANewAllocationForItsNextRescale) {
  Cluster c("auto", "AccountingStorageType   = accounting_storage/none\nSLURM_VERSION           = 22.05.8\n");
  EXPECT_EQ(config_value(c.slurm.config, "SLURM_VERSION"), "22.05.8");
  running_job(c, "a", "", 3);
  c.tick();
  c.slurm.drain["n3"] = true;  // the first shrink: in place
  c.tick();
  c.event("a", "rescale", 3, 2, c.job("a").target_batch);
  c.tick();
  ASSERT_EQ(c.slurm.last("scontrol")->back(), "NodeList=n1,n2");
  EXPECT_EQ(c.job("a").sched.resized, 1);
  c.slurm.drain["n2"] = true;  // the second: a new allocation
  c.tick();
  EXPECT_TRUE(c.job("a").moving);
  EXPECT_NE(c.file("a", "control.json").find("\"stop\":true"), std::string::npos);
}

// ---- GPU types from the nodes' GRES ---------------------------------------------------------------

// `scontrol show node -o` as Slurm 22.05 prints it (one line per node; shortened to the fields
// around Gres), and the GRES forms of gres.conf.
TEST(SlurmParse, NodeGresWithTypes) {
  const auto g = parse_node_gres(
      "NodeName=gpu-a1 Arch=x86_64 CoresPerSocket=32 CPUAlloc=0 CPUTot=64 CPULoad=0.01 AvailableFeatures=(null) "
      "ActiveFeatures=(null) Gres=gpu:a100:4(S:0-1) NodeAddr=gpu-a1 NodeHostName=gpu-a1 Version=22.05.8 "
      "OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01) RealMemory=515000 State=IDLE "
      "Partitions=gpu CfgTRES=cpu=64,mem=515000M,billing=64,gres/gpu=4 AllocTRES= Reason=(null)\n"
      "NodeName=gpu-v1 Arch=x86_64 Gres=gpu:v100:2,shard:8 State=MIXED Partitions=gpu\n"
      "NodeName=cpu1 Arch=x86_64 Gres=(null) State=IDLE Partitions=cpu\n"
      "NodeName=mixed1 Gres=gpu:a100:2(S:0),gpu:v100:2(S:1) State=IDLE\n"
      "SchedulerParameters = permit_job_expansion\n");
  ASSERT_EQ(g.size(), 4u) << "a line without NodeName= is passed over";
  EXPECT_EQ(g.at("gpu-a1").type, "a100");
  EXPECT_EQ(g.at("gpu-a1").count, 4);
  EXPECT_EQ(g.at("gpu-v1").type, "v100");
  EXPECT_EQ(g.at("gpu-v1").count, 2) << "shard:8 is no GPU";
  EXPECT_EQ(g.at("cpu1").count, 0);
  EXPECT_EQ(g.at("mixed1").type, "") << "GPUs of two types: no one type";
  EXPECT_EQ(g.at("mixed1").count, 4);
  EXPECT_EQ(gpu_gres("gpu:8").type, "");
  EXPECT_EQ(gpu_gres("gpu:8").count, 8);
  EXPECT_EQ(gpu_gres("gpu:nvidia_h100_80gb_hbm3:8(S:0-1)").type, "nvidia_h100_80gb_hbm3");
}

namespace {
const char* kTypedNodes =
    "NodeName=n1 Arch=x86_64 Gres=gpu:a100:4(S:0-1) State=IDLE Partitions=edp\n"
    "NodeName=n2 Arch=x86_64 Gres=gpu:a100:4(S:0-1) State=IDLE Partitions=edp\n"
    "NodeName=n3 Arch=x86_64 Gres=gpu:v100:2(S:0) State=IDLE Partitions=edp\n";
}  // namespace

// A partition of two A100 nodes and one V100 node: the slots are typed by the nodes' GRES; a job
// of 2 nodes fits the A100s only and is asked of Slurm with --gres=gpu:a100:4 (all of a node's
// A100s), one of 1 node then takes the V100 node (--gres=gpu:v100:2); a grow asks for the job's type.
TEST(SlurmBackend, AsksForNodesOfTheGpuTypeItsPlanChose) {
  Cluster c("auto", "", kTypedNodes);
  EXPECT_NE(c.backend->describe().find("3 node(s) (2 with GPUs a100: n1,n2; 1 with GPUs v100: n3)"), std::string::npos)
      << c.backend->describe();
  c.ctl->submit("big", spec(R"(, "min_workers": 2, "max_workers": 2, "workers": 2, "batch": 128)"));
  c.ctl->submit("small", spec(R"(, "max_workers": 1)"));
  c.tick();
  const auto types = c.backend->types();
  ASSERT_EQ(types.size(), 2u);
  EXPECT_EQ(types[0].name, "a100");
  EXPECT_EQ(types[0].slots, 2);
  EXPECT_EQ(types[1].slots, 1);
  std::map<std::string, std::string> gres;  // job name -> its sbatch's --gres
  for (const auto& call : c.slurm.calls)
    if (call[0] == "sbatch") gres[FakeSlurm::opt(call, "--job-name")] = FakeSlurm::opt(call, "--gres");
  ASSERT_EQ(gres.size(), 2u);
  for (const auto& [name, g] : gres)
    EXPECT_EQ(g, name.size() > 4 && name.substr(name.size() - 4) == "-big" ? "gpu:a100:4" : "gpu:v100:2") << name;
  EXPECT_EQ(c.job("big").gpu_type, "a100");
  EXPECT_EQ(c.job("small").gpu_type, "v100");
  c.slurm.schedule();
  c.tick();
  ASSERT_EQ(c.job("big").hosts.size(), 2u);
  ASSERT_EQ(c.backend->types().size(), 2u);
  EXPECT_EQ(c.backend->types()[0].slots, 2) << "the nodes edp's jobs hold count";
  EXPECT_EQ(c.backend->types()[1].slots, 1);
  // Another user's job waits for a node: it is taken off the type with the most nodes (a100), below
  // what big must keep there (2, its min_workers); the plan keeps big there, and does not fail.
  FakeSlurm::J other;
  other.id = "999";
  other.name = "someone";
  c.slurm.jobs[other.id] = other;
  c.tick();
  EXPECT_EQ(c.backend->slots(), 2);
  EXPECT_EQ(c.backend->types()[0].slots, 1);
  EXPECT_FALSE(c.logged("planning failed")) << c.log.back();
  EXPECT_EQ(c.job("big").workers, 2);
  // A grow of a job on the A100s asks for A100 nodes.
  ManagedJob g;
  g.id = "g";
  g.spec = spec();
  g.state = JobPhase::Running;
  g.workers = 1;
  g.sched = SchedJob{"7", "RUNNING", ""};
  g.hosts = g.next_hosts = {{"n1", 1}};
  g.gpu_type = "a100";
  fs::create_directories(c.root / "jobs" / "g");
  c.backend->assign(g, 2, {});
  ASSERT_NE(c.slurm.last("salloc"), nullptr);
  EXPECT_EQ(FakeSlurm::opt(*c.slurm.last("salloc"), "--gres"), "gpu:a100:4");
  g.gpu_type = "h100";
  g.sched_grow = SchedJob{};
  try {
    c.backend->assign(g, 2, {});
    FAIL() << "a grow of a type the partition does not have was asked for";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GPU type 'h100' is not one of partition edp's (a100, v100)"), std::string::npos)
        << e.what();
  }
}

// A node without one GPU type in its GRES: the partition's nodes are taken as alike, as before.
TEST(SlurmBackend, NodesWithoutOneGpuTypeAreAlike) {
  Cluster u("auto", "", "NodeName=n1 Gres=gpu:a100:4\nNodeName=n2 Gres=gpu:v100:4\nNodeName=n3 Gres=(null)\n");
  EXPECT_TRUE(u.logged("node(s) n3 have no GPUs of one type in their GRES")) << (u.log.empty() ? "" : u.log.back());
  u.ctl->submit("a", spec());
  u.tick();
  EXPECT_TRUE(u.backend->types().empty());
  EXPECT_EQ(FakeSlurm::opt(*u.slurm.last("sbatch"), "--gres"), "");
  EXPECT_EQ(u.job("a").gpu_type, "");
}
