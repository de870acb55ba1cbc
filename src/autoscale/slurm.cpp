// The Slurm backend of the live controller (slurm.h). Past 600 lines on purpose: each Slurm
// command (sbatch, scontrol, squeue, sinfo, scancel) sits beside the parser of its output and the
// errors it can give; split, a command and its parser would live apart.
#include "autoscale/slurm.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>

#include "core/text.h"
#include "edp/core/error.h"
#include "edp/core/files.h"
#include "edp/elastic/elastic.h"
#include "launch/launch_plan.h"
#include "launch/system.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace edp::autoscale {

// The job name comes last: other users' names may hold the separator.
const char* const kSqueueFormat = "%i|%T|%D|%P|%B|%N|%r|%j";
const char* const kSinfoFormat = "%N|%T";

namespace {

using text::join;
using text::trim;

// `line` split at `sep` into at most `n` fields (the last keeps the rest).
std::vector<std::string> fields(const std::string& line, char sep, size_t n) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (out.size() + 1 < n) {
    const size_t p = line.find(sep, pos);
    if (p == std::string::npos) break;
    out.push_back(line.substr(pos, p - pos));
    pos = p + 1;
  }
  out.push_back(line.substr(pos));
  return out;
}

std::string base_state(const std::string& state) {
  std::string s = state;
  while (!s.empty() && std::strchr("*~#!%$@^-+", s.back())) s.pop_back();
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool active(const std::string& state) { return !job_final(state); }
bool holds_nodes(const std::string& s) {
  return s == "RUNNING" || s == "COMPLETING" || s == "CONFIGURING" || s == "SUSPENDED" || s == "RESIZING" ||
         s == "STOPPED" || s == "SIGNALING" || s == "STAGE_OUT";
}

class RealClient final : public SlurmClient {
 public:
  std::string run(const std::vector<std::string>& argv) override {
    const launch::RunResult r = launch::run_capture(argv);
    if (r.status != 0)
      throw Error(launch::shell_join(argv) + " failed (exit " + std::to_string(r.status) + "): " +
                  trim(r.err.empty() ? r.out : r.err));
    return r.out;
  }
  void spawn(const std::vector<std::string>& argv, const std::string& log) override {
    launch::fork_exec(argv, "edp-autoscale", [&log] {
      setsid();  // waits in Slurm's queue on its own; a signal to the controller does not reach it
      ::unlink(log.c_str());  // a fresh log, never written through a planted link
      int fd = -1;
      try {
        fd = files::open_append(log);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "edp-autoscale: %s\n", e.what());
      }
      const int nul = ::open("/dev/null", O_RDONLY);
      if (nul >= 0) dup2(nul, 0);
      if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
      for (int f = 3; f < 1024; ++f) ::close(f);  // none of the controller's (its lock)
    });
  }
};

}  // namespace

std::unique_ptr<SlurmClient> slurm_client() { return std::make_unique<RealClient>(); }

std::vector<SlurmJobInfo> parse_squeue(const std::string& text) {
  std::vector<SlurmJobInfo> out;
  std::istringstream in(text);
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (trim(line).empty()) continue;
    const auto f = fields(line, '|', 8);
    if (f.size() != 8)
      throw DataError("squeue output, line " + std::to_string(n) + ": expected 8 '|'-separated fields (" +
                      kSqueueFormat + "), got '" + line + "'");
    SlurmJobInfo j;
    j.id = trim(f[0]);
    j.state = trim(f[1]);
    try {
      j.nodes = std::stoi(f[2]);
    } catch (const std::exception&) {
      throw DataError("squeue output, line " + std::to_string(n) + ": node count '" + f[2] + "' is not a number");
    }
    j.partition = trim(f[3]);
    j.batch_host = trim(f[4]);
    const std::string list = trim(f[5]);
    if (!list.empty() && list != "(null)") j.node_list = launch::expand_slurm_nodelist(list);
    j.reason = trim(f[6]);
    j.name = f[7];
    out.push_back(std::move(j));
  }
  return out;
}

SlurmNodeGpus gpu_gres(const std::string& gres) {
  SlurmNodeGpus g;
  bool several = false;
  for (const std::string& item : fields(trim(gres), ',', 1 << 10)) {
    const std::string one = item.substr(0, item.find('('));  // "(S:0-1)", "(IDX:...)"
    const auto f = fields(one, ':', 3);
    if (f.empty() || f[0] != "gpu") continue;
    // gpu:COUNT or gpu:TYPE:COUNT (a count may carry a unit: 4, 1K).
    const std::string type = f.size() == 3 ? f[1] : "";
    int count = 0;
    try {
      count = std::stoi(f.back());
    } catch (const std::exception&) {
      continue;
    }
    if (g.count > 0 && type != g.type) several = true;
    g.type = type;
    g.count += count;
  }
  if (several) g.type.clear();
  return g;
}

std::map<std::string, SlurmNodeGpus> parse_node_gres(const std::string& text) {
  std::map<std::string, SlurmNodeGpus> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::string node, gres;
    std::istringstream words(line);
    for (std::string w; words >> w;) {
      if (w.rfind("NodeName=", 0) == 0) node = w.substr(9);
      else if (w.rfind("Gres=", 0) == 0) gres = w.substr(5);
    }
    if (!node.empty()) out[node] = gpu_gres(gres);
  }
  return out;
}

std::vector<SlurmNodeInfo> parse_sinfo(const std::string& text) {
  std::vector<SlurmNodeInfo> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (trim(line).empty()) continue;
    const auto f = fields(line, '|', 2);
    if (f.size() != 2) throw DataError("sinfo output: expected 'node|state', got '" + line + "'");
    const std::string name = trim(f[0]);
    // A node in two partitions is listed twice with -N unless -p narrows it: keep it once.
    if (std::none_of(out.begin(), out.end(), [&](const SlurmNodeInfo& x) { return x.name == name; }))
      out.push_back({name, trim(f[1])});
  }
  return out;
}

bool node_usable(const std::string& state) {
  if (!state.empty() && state.back() == '*') return false;  // not responding
  const std::string s = base_state(state);
  return s == "idle" || s == "allocated" || s == "mixed" || s == "completing";
}

bool node_draining(const std::string& state) {
  const std::string s = base_state(state);
  return s == "draining" || s == "drained" || s == "drain" || s == "down" || s == "fail" || s == "failing" ||
         (!state.empty() && state.back() == '*');
}

bool job_final(const std::string& s) {
  for (const char* f : {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                        "DEADLINE", "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT"})
    if (s == f) return true;
  return false;
}

std::string config_value(const std::string& show_config, const std::string& key) {
  std::istringstream in(show_config);
  for (std::string l; std::getline(in, l);) {
    const size_t eq = l.find('=');
    if (l.rfind(key, 0) != 0 || eq == std::string::npos || trim(l.substr(0, eq)) != key) continue;
    const std::string v = trim(l.substr(eq + 1));
    return v == "(null)" ? "" : v;
  }
  return "";
}

std::string scheduler_parameters(const std::string& show_config) { return config_value(show_config, "SchedulerParameters"); }

// ---- the backend --------------------------------------------------------------------------------

SlurmBackend::SlurmBackend(SlurmClient& slurm, SlurmOptions o, fs::path root, std::string edprun,
                           std::vector<std::string> edprun_args, Clock clock, Logger log)
    : JobDirRunner(std::move(root), std::move(edprun), std::move(edprun_args)), slurm_(slurm), o_(std::move(o)),
      now_(std::move(clock)), log_(std::move(log)) {
  // The jobs' names carry a tag of the root, so that two controllers' jobs never share a name.
  uint32_t h = 2166136261u;  // FNV-1a
  for (const unsigned char c : fs::absolute(JobDirRunner::root()).string()) h = (h ^ c) * 16777619u;
  char tag[16];
  std::snprintf(tag, sizeof tag, "%04x", static_cast<unsigned>((h ^ (h >> 16)) & 0xffffu));
  tag_ = tag;
  std::string config;
  try {
    config = slurm_.run({"scontrol", "show", "config"});
  } catch (const std::exception& e) {
    throw Error(std::string("--backend slurm: cannot ask Slurm for its configuration; run serve where Slurm's commands "
                            "reach slurmctld (a login node; SLURM_CONF): ") + e.what());
  }
  const std::string params = scheduler_parameters(config);
  // Slurm before 24.11 gives a resized job a new accounting record whose index only slurmdbd sets;
  // without slurmdbd the job refuses every later update ("Job update not available right now, the
  // DB index is being set"): a job may be resized in place once.
  const std::string version = config_value(config, "SLURM_VERSION");
  int major = 0, minor = 0;
  std::sscanf(version.c_str(), "%d.%d", &major, &minor);
  resize_once_ = config_value(config, "AccountingStorageType") == "accounting_storage/none" &&
                 (major < 24 || (major == 24 && minor < 11));
  const bool permitted = params.find("permit_job_expansion") != std::string::npos;
  shrink_ = params.find("disable_job_shrink") == std::string::npos;
  if (o_.grow == "expand" && !permitted)
    throw Error("--slurm-grow expand: this Slurm does not permit job expansion (SchedulerParameters is '" + params +
                "'; an administrator adds permit_job_expansion), use --slurm-grow new-allocation or auto");
  expand_ = o_.grow == "expand" || (o_.grow == "auto" && permitted);
  if (o_.partition.empty()) {
    for (const std::string& p : fields(slurm_.run({"sinfo", "--noheader", "--format=%P"}), '\n', 1 << 20))
      if (!trim(p).empty() && trim(p).back() == '*') o_.partition = trim(p).substr(0, trim(p).size() - 1);
    if (o_.partition.empty()) throw Error("Slurm has no default partition: name one with --partition");
  }
  nodes_ = parse_sinfo(slurm_.run({"sinfo", "--noheader", "--Node", "--partition=" + o_.partition, "--format=" + std::string(kSinfoFormat)}));
  if (nodes_.empty()) throw Error("Slurm partition '" + o_.partition + "' has no nodes (sinfo lists none)");
  // The nodes' GPU types (their GRES): a job then runs on nodes of one type, asked for by --gres.
  std::map<std::string, SlurmNodeGpus> gpus;
  try {
    gpus = parse_node_gres(slurm_.run({"scontrol", "show", "node", "-o"}));
  } catch (const std::exception& e) {
    say(std::string("the nodes' GPU types are not known (") + e.what() + "): every node is taken as alike");
  }
  std::set<std::string> types;
  std::string untyped;
  for (const SlurmNodeInfo& n : nodes_) {
    const auto it = gpus.find(n.name);
    if (it == gpus.end() || it->second.type.empty()) untyped += (untyped.empty() ? "" : ",") + n.name;
    else types.insert(it->second.type);
  }
  if (!types.empty() && !untyped.empty())
    say("node(s) " + untyped + " have no GPUs of one type in their GRES: every node of partition " + o_.partition +
        " is taken as alike");
  if (untyped.empty() && types.size() > 1)
    for (const SlurmNodeInfo& n : nodes_) gpus_[n.name] = gpus[n.name];
}

std::string SlurmBackend::type_of_node(const std::string& node) const {
  const auto it = gpus_.find(node);
  return it == gpus_.end() ? "" : it->second.type;
}

std::vector<std::string> SlurmBackend::gpu_types() const {
  std::set<std::string> out;
  for (const auto& [node, g] : gpus_) out.insert(g.type);
  return {out.begin(), out.end()};
}

std::vector<SlotType> SlurmBackend::types() const {
  std::vector<SlotType> out;
  for (const auto& [t, n] : type_capacity_) out.push_back({t, n, 1.0});
  return out;
}

// What sbatch and salloc ask for a job of a GPU type: the type's GPUs of a node (the fewest any
// node of the type has), so that Slurm gives nodes of that type only.
std::string SlurmBackend::gres_for(const ManagedJob& j) const {
  if (gpus_.empty() || j.gpu_type.empty()) return "";
  int count = 0;
  std::set<std::string> names;
  for (const auto& [node, g] : gpus_) {
    names.insert(g.type);
    if (g.type == j.gpu_type) count = count == 0 ? g.count : std::min(count, g.count);
  }
  if (count == 0) {
    std::string known;
    for (const std::string& t : names) known += (known.empty() ? "" : ", ") + t;
    throw Error("job " + j.id + ": GPU type '" + j.gpu_type + "' is not one of partition " + o_.partition + "'s (" + known + ")");
  }
  return "--gres=gpu:" + j.gpu_type + ":" + std::to_string(count);
}

std::string SlurmBackend::describe() const {
  std::string by;  // typed partitions: the nodes of each GPU type
  std::map<std::string, std::vector<std::string>> of;
  for (const auto& [node, g] : gpus_) of[g.type].push_back(node);
  for (const auto& [t, ns] : of) by += (by.empty() ? " (" : "; ") + std::to_string(ns.size()) + " with GPUs " + t + ": " + join(ns);
  if (!by.empty()) by += ")";
  return "Slurm partition " + o_.partition + ": " + std::to_string(nodes_.size()) + " node(s)" + by + ", a slot is a node (one rank each)" +
         ", " + std::to_string(capacity_) + " to be had now; grows " +
         (expand_ ? "by job expansion (permit_job_expansion)" : "by a new allocation (restart at a checkpoint)") +
         (shrink_ ? ", shrinks by scontrol update" : ", shrinks by a new allocation (disable_job_shrink)") +
         (resize_once_ ? "; a job resized once moves to a new allocation for its next rescale (no slurmdbd, Slurm < 24.11)" : "");
}

const SlurmJobInfo* SlurmBackend::find(const std::string& id) const {
  const auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

// One look at squeue and sinfo; false (the last view kept) when Slurm does not answer.
bool SlurmBackend::poll() {
  try {
    const auto js = parse_squeue(slurm_.run({"squeue", "--noheader", "--states=all", "--format=" + std::string(kSqueueFormat)}));
    const auto ns = parse_sinfo(
        slurm_.run({"sinfo", "--noheader", "--Node", "--partition=" + o_.partition, "--format=" + std::string(kSinfoFormat)}));
    jobs_.clear();
    for (const auto& j : js) jobs_[j.id] = j;
    nodes_ = ns;
    if (stale_) say("Slurm answers again");
    seen_ = true;
    stale_ = false;
    return true;
  } catch (const std::exception& e) {
    if (!stale_) say(std::string("cannot read Slurm's queue (") + e.what() + "); keeping the last view until it answers");
    stale_ = true;
    return false;
  }
}

bool SlurmBackend::refresh(std::vector<ManagedJob>& jobs) {
  if (!force_ && now_() - last_poll_ < o_.poll_s) return false;
  last_poll_ = now_();
  force_ = false;
  if (!poll()) return false;
  ours_.clear();
  for (const ManagedJob& j : jobs)
    for (const SchedJob* s : {&j.sched, &j.sched_grow})
      if (!s->id.empty()) ours_.insert(s->id);
  bool changed = false;
  for (ManagedJob& j : jobs) {
    const std::string before = j.sched.state + j.sched.reason + j.sched_grow.id + j.sched_grow.state + j.sched_grow.reason;
    const size_t hosts_before = j.next_hosts.size();
    if (!j.sched.id.empty() && (j.running() || active(j.sched.state))) follow(j);
    if (j.running()) follow_grow(j);
    changed |= before != j.sched.state + j.sched.reason + j.sched_grow.id + j.sched_grow.state + j.sched_grow.reason ||
               hosts_before != j.next_hosts.size();
  }
  compute_capacity(jobs);
  return changed;
}

// The job's allocation as Slurm says; its nodes once it runs (this one, the batch host, first).
void SlurmBackend::follow(ManagedJob& j) {
  const SlurmJobInfo* s = find(j.sched.id);
  if (!s) {  // Slurm no longer knows it (it ended longer ago than MinJobAge, or Slurm lost it)
    if (active(j.sched.state)) j.sched.reason = "gone from Slurm";
    return;
  }
  if (j.sched.state != s->state && j.running() && !(j.moving && job_final(s->state)))  // a move's stop is no news
    say("job " + j.id + ": Slurm job " + j.sched.id + " " + s->state + (s->state == "PENDING" ? " (" + s->reason + ")" : ""));
  j.sched.state = s->state;
  j.sched.reason = s->reason == "None" ? "" : s->reason;
  if (j.running() && s->state == "RUNNING" && j.hosts.empty() && !s->node_list.empty()) {
    std::vector<std::string> order = {s->batch_host};
    for (const auto& n : s->node_list)
      if (n != s->batch_host) order.push_back(n);
    for (const auto& n : order) j.hosts.emplace_back(n, 1);
    j.next_hosts = j.hosts;
  }
  // A typed partition: a job without a type (started before the nodes had one) runs on its nodes'.
  if (j.running() && j.gpu_type.empty() && !gpus_.empty() && !j.hosts.empty()) {
    std::set<std::string> ts;
    for (const auto& h : j.hosts) ts.insert(type_of_node(h.first));
    if (ts.size() == 1) j.gpu_type = *ts.begin();
  }
}

// A grow's resources: found in the queue (by the id salloc printed), waiting, then merged into the
// job's allocation once Slurm grants them (or refused when they will not come).
void SlurmBackend::follow_grow(ManagedJob& j) {
  SchedJob& g = j.sched_grow;
  if (g.state.empty() || g.state == "REFUSED") return;
  if (g.id.empty()) {
    std::string log;
    try {
      log = files::read_file_if_exists(dir(j) + "/grow.log", files::kRecordLimit).value_or("");
    } catch (const DataError& e) {
      log = std::string("error: ") + e.what();
    }
    if (const std::string id = grow_id(dir(j) + "/grow.log"); !id.empty()) {
      g.id = id;
      ours_.insert(g.id);
    } else if (const size_t e = std::min(log.find("error"), log.find("cannot")); e != std::string::npos) {
      g.state = "REFUSED";  // salloc refused the request (or could not run)
      g.reason = trim(log.substr(e));
      return;
    } else {
      return;  // salloc has not said yet
    }
  }
  const SlurmJobInfo* h = find(g.id);
  if (!h) return;  // submitted a moment ago
  if (h->state == "RUNNING") return merge_grow(j, *h);
  if (job_final(h->state)) {
    g.state = "REFUSED";
    g.reason = "Slurm job " + g.id + " ended " + h->state + (h->reason == "None" ? "" : " (" + h->reason + ")");
    return;
  }
  if (g.state != h->state || g.reason != h->reason)
    say("job " + j.id + ": its grow waits in Slurm's queue: job " + g.id + " " + h->state + " (" + h->reason + ")");
  g.state = h->state;
  g.reason = h->reason;
}

// scontrol update NumNodes=0 on the granted allocation moves its nodes into the job's; the job
// then holds them (next_hosts) and is told to grow onto them.
void SlurmBackend::merge_grow(ManagedJob& j, const SlurmJobInfo& helper) {
  try {
    slurm_.run({"scontrol", "update", "JobId=" + helper.id, "NumNodes=0"});
    const auto now = parse_squeue(slurm_.run({"squeue", "--noheader", "--states=all", "--jobs=" + j.sched.id,
                                              "--format=" + std::string(kSqueueFormat)}));
    if (now.empty()) throw Error("Slurm job " + j.sched.id + " is gone");
    std::vector<HostShare> next = j.hosts;
    for (const auto& n : now.front().node_list)
      if (std::none_of(next.begin(), next.end(), [&](const HostShare& h) { return h.first == n; })) next.emplace_back(n, 1);
    say("job " + j.id + ": Slurm granted its grow (job " + helper.id + " on " + join(helper.node_list) + ", merged into job " +
        j.sched.id + ": " + std::to_string(next.size()) + " node(s))");
    j.next_hosts = next;
    ++j.sched.resized;
    j.sched_grow = SchedJob{};
  } catch (const std::exception& e) {
    j.sched_grow.state = "REFUSED";
    j.sched_grow.reason = std::string("merging the granted allocation failed: ") + e.what();
    try {
      slurm_.run({"scancel", helper.id});
    } catch (const std::exception&) {
    }
  }
}

// The slots Slurm would give edp now: the usable nodes its jobs hold and the idle ones, less the
// nodes other users' jobs wait for (edp's elastic jobs give way to them).
void SlurmBackend::compute_capacity(const std::vector<ManagedJob>& jobs) {
  std::map<std::string, std::string> holder;  // node -> Slurm job holding it
  for (const auto& [id, s] : jobs_)
    if (holds_nodes(s.state))
      for (const auto& n : s.node_list) holder[n] = id;
  int held = 0, idle = 0;
  std::map<std::string, int> held_of, idle_of;  // by GPU type (typed partitions)
  for (const auto& n : nodes_) {
    if (!node_usable(n.state)) continue;
    const auto h = holder.find(n.name);
    if (h == holder.end()) ++idle, ++idle_of[type_of_node(n.name)];
    else if (ours_.count(h->second)) ++held, ++held_of[type_of_node(n.name)];
  }
  std::set<std::string> grows;  // our grows salloc has not named yet
  for (const ManagedJob& j : jobs)
    if (j.running() && !j.sched_grow.state.empty() && j.sched_grow.id.empty()) grows.insert(name(j) + "-grow");
  int wait = 0;
  std::string who;
  for (const auto& [id, s] : jobs_)
    if (s.state == "PENDING" && s.partition == o_.partition && !ours_.count(id) && !grows.count(s.name) &&
        (s.reason == "Resources" || s.reason == "Priority") && s.nodes <= static_cast<int>(nodes_.size())) {
      wait += s.nodes;
      who += (who.empty() ? "" : ",") + id;
    }
  const int cap = std::max(0, held + idle - wait);
  if (wait != foreign_wait_ && wait > 0)
    say("other users' job(s) " + who + " wait for " + std::to_string(wait) + " node(s): edp plans with " +
        std::to_string(cap) + " of the " + std::to_string(held + idle) + " it could have");
  foreign_wait_ = wait;
  capacity_ = cap;
  // By type: which type other users' jobs wait for is not known; they are taken to get idle nodes
  // first, of the type with the most idle, then held ones, so that the types sum to the slots.
  type_capacity_.clear();
  if (gpus_.empty()) return;
  for (const auto& [node, g] : gpus_) type_capacity_[g.type] = 0;
  auto take_one = [](std::map<std::string, int>& m) {
    auto most = m.end();
    for (auto it = m.begin(); it != m.end(); ++it)
      if (it->second > 0 && (most == m.end() || it->second > most->second)) most = it;
    if (most == m.end()) return false;
    --most->second;
    return true;
  };
  for (int left = wait; left > 0; --left)
    if (!take_one(idle_of) && !take_one(held_of)) break;
  for (const auto& [t, n] : idle_of) type_capacity_[t] += n;
  for (const auto& [t, n] : held_of) type_capacity_[t] += n;
}

// ---- the slots --------------------------------------------------------------------------------

void SlurmBackend::assign(ManagedJob& j, int workers, const std::vector<ManagedJob>&) {
  const int have = static_cast<int>(j.hosts.size());
  if (!j.running() || have == 0) {  // a start: Slurm chooses the nodes (the job's script names them)
    if (j.running()) throw Error("job " + j.id + " has no nodes from Slurm yet (Slurm job " + j.sched.id + " " + j.sched.state + ")");
    j.hosts.clear();
    j.next_hosts.clear();
    return;
  }
  if (workers < have) {
    // Keep the batch host (Slurm never takes it from a job; edprun runs there), then the nodes that
    // are not being drained, in the job's order.
    std::vector<HostShare> keep = {j.hosts.front()}, rest;
    for (size_t i = 1; i < j.hosts.size(); ++i) {
      const auto n = std::find_if(nodes_.begin(), nodes_.end(), [&](const SlurmNodeInfo& x) { return x.name == j.hosts[i].first; });
      (n != nodes_.end() && node_draining(n->state) ? rest : keep).push_back(j.hosts[i]);
    }
    keep.insert(keep.end(), rest.begin(), rest.end());
    keep.resize(static_cast<size_t>(workers));
    j.next_hosts = keep;
    return;
  }
  if (workers == have) return;
  if (!j.sched_grow.state.empty()) throw Error("job " + j.id + ": a grow already waits in Slurm's queue");
  // A grow: ask Slurm for the nodes; they are merged into the job's allocation once granted.
  std::vector<std::string> argv = {"salloc", "--no-shell", "--dependency=expand:" + j.sched.id, "--job-name=" + name(j) + "-grow",
                                   "--nodes=" + std::to_string(workers - have), "--ntasks-per-node=1", "--exclusive",
                                   "--partition=" + o_.partition};
  if (const std::string g = gres_for(j); !g.empty()) argv.push_back(g);  // nodes of the job's GPU type
  argv.insert(argv.end(), o_.extra_args.begin(), o_.extra_args.end());
  const std::string log = dir(j) + "/grow.log";
  fs::remove(log);  // an earlier request's job id must not be read for this one's
  slurm_.spawn(argv, log);
  j.sched_grow = SchedJob{"", "SUBMITTED", ""};
  j.next_hosts = j.hosts;
  force_ = true;
  say("job " + j.id + ": asked Slurm for " + std::to_string(workers - have) + " more node(s): " + launch::shell_join(argv));
  // salloc names the request's job id as soon as Slurm queued it: wait for that (at most a few
  // seconds), so that the next look at the queue finds the request there.
  for (int i = 0; i < 250 && grow_id(log).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

std::string SlurmBackend::grow_id(const std::string& log) {
  std::string text;
  try {
    text = files::read_file_if_exists(log, files::kRecordLimit).value_or("");
  } catch (const DataError&) {
  }
  const std::string key = "job allocation ";  // salloc: "Pending job allocation 17", "Granted job allocation 17"
  const size_t at = text.find(key);
  if (at == std::string::npos) return "";
  const size_t from = at + key.size(), to = text.find_first_not_of("0123456789", from);
  return text.substr(from, (to == std::string::npos ? text.size() : to) - from);
}

Grant SlurmBackend::grant(const ManagedJob& j, std::string* why) const {
  if (j.sched_grow.state.empty()) return Grant::Ready;
  if (j.sched_grow.state != "REFUSED") return Grant::Waiting;
  if (why) *why = j.sched_grow.reason;
  return Grant::Refused;
}

// Gives back the nodes a job no longer runs on (its ranks there have left: the rescale landed).
void SlurmBackend::landed(ManagedJob& j) {
  const std::vector<HostShare> before = j.hosts;
  j.hosts = j.next_hosts;
  if (j.hosts.size() >= before.size() || j.hosts.empty()) return;
  std::vector<std::string> keep, gone;
  for (const auto& h : j.hosts) keep.push_back(h.first);
  for (const auto& h : before)
    if (std::find(keep.begin(), keep.end(), h.first) == keep.end()) gone.push_back(h.first);
  try {
    slurm_.run({"scontrol", "update", "JobId=" + j.sched.id, "NodeList=" + join(keep)});
    ++j.sched.resized;
    say("job " + j.id + ": gave node(s) " + join(gone) + " back to Slurm (scontrol update JobId=" + j.sched.id + " NodeList=" +
        join(keep) + ")");
  } catch (const std::exception& e) {
    say("job " + j.id + ": could not give node(s) " + join(gone) + " back to Slurm (" + e.what() + "); they stay its own until it ends");
  }
  force_ = true;
}

// A grow request withdrawn: by its job id, or by its name while salloc has not named the id.
void SlurmBackend::withdraw_grow(const ManagedJob& j) {
  if (j.sched_grow.state.empty() || !active(j.sched_grow.state)) return;
  const std::string what = j.sched_grow.id.empty() ? "--name=" + name(j) + "-grow" : j.sched_grow.id;
  try {
    slurm_.run({"scancel", what});
  } catch (const std::exception& e) {
    say("job " + j.id + ": cannot cancel its grow request (scancel " + what + "): " + e.what());
  }
}

void SlurmBackend::give_up_rescale(ManagedJob& j) {
  withdraw_grow(j);
  // Nodes merged for a grow that did not land go back.
  if (j.next_hosts.size() > j.hosts.size() && !j.hosts.empty()) {
    j.next_hosts.swap(j.hosts);
    landed(j);
  }
  j.sched_grow = SchedJob{};
  j.next_hosts = j.hosts;
  force_ = true;
}

void SlurmBackend::release(ManagedJob& j) {
  withdraw_grow(j);
  j.sched_grow = SchedJob{};
  Resources::release(j);
  force_ = true;
}

void SlurmBackend::check_adopted(const std::vector<ManagedJob>& jobs) const {
  for (const ManagedJob& j : jobs)
    if (j.running() && j.sched.id.empty())
      throw Error("running job " + j.id + " was started by serve without --backend slurm (it is no Slurm job); start serve "
                  "again the way it was started, or stop it first");
}

int SlurmBackend::leaving(const ManagedJob& j) const {
  int n = 0;
  for (size_t i = 1; i < j.hosts.size(); ++i) {  // the batch host stays the job's (Slurm keeps it)
    const auto it = std::find_if(nodes_.begin(), nodes_.end(), [&](const SlurmNodeInfo& x) { return x.name == j.hosts[i].first; });
    n += it != nodes_.end() && node_draining(it->state);
  }
  return n;
}

bool SlurmBackend::moves(const ManagedJob& j, int workers) const {
  const bool again = resize_once_ && j.sched.resized > 0;  // see the constructor
  if (workers > j.workers) return !expand_ || again;
  return workers < j.workers && (!shrink_ || again);
}

std::vector<std::string> SlurmBackend::launch_args(const ManagedJob&, int, const std::string& dir) const {
  // The job's hostfile: its nodes, which the batch script writes at start and the controller
  // before each rescale; edprun reads it again at every restart and follows it inside the
  // allocation. Sizes up to the partition may be asked for.
  return {"--gpus", "none", "--hostfile", dir + "/hostfile", "--reread-hostfile", "--max-np", std::to_string(limit())};
}

json SlurmBackend::usage(const std::vector<ManagedJob>& jobs) const {
  std::map<std::string, std::string> who;
  for (const ManagedJob& j : jobs)
    if (j.running())
      for (const auto& hs : {j.hosts, j.next_hosts})
        for (const auto& h : hs) who[h.first] = j.id;
  std::map<std::string, std::string> held;
  for (const auto& [id, s] : jobs_)
    if (holds_nodes(s.state))
      for (const auto& n : s.node_list) held[n] = id;
  json out = json::object();
  for (const auto& n : nodes_) {
    json x = {{"state", n.state}, {"slots", 1}, {"used", who.count(n.name) ? 1 : 0}};
    if (who.count(n.name)) x["job"] = who.at(n.name);
    else if (held.count(n.name)) x["slurm_job"] = held.at(n.name);
    out[n.name] = x;
  }
  return out;
}

// ---- the jobs ---------------------------------------------------------------------------------

std::string SlurmBackend::batch_script(const ManagedJob& j, const std::vector<std::string>& launch) const {
  const std::string d = dir(j);
  const auto q = [](const std::string& s) { return launch::shell_quote(s); };
  std::string s = "#!/bin/bash\n# edp-autoscale serve: job " + j.id + " (" + j.spec.name +
                  ") as a Slurm batch job; written at each of its starts.\n";
  s += "# mpirun reaches the other nodes through srun alone (Open MPI's Slurm launcher): nothing of the\n"
       "# job runs on a node outside Slurm.\nexport OMPI_MCA_plm=slurm\n";
  for (const auto& [k, v] : j.spec.env) s += "export " + k + "=" + q(v) + "\n";
  s += "# The job's nodes, this one (the batch host: edprun and rank 0) first; the controller rewrites\n"
       "# the file before each rescale.\n";
  s += "{ echo \"$SLURMD_NODENAME slots=1\"; scontrol show hostnames \"$SLURM_JOB_NODELIST\" | grep -vx \"$SLURMD_NODENAME\" "
       "| sed 's/$/ slots=1/'; } > " + q(d + "/hostfile.tmp") + " && mv " + q(d + "/hostfile.tmp") + " " + q(d + "/hostfile") + "\n";
  // edprun in the background, waited for: a stop signal (scancel, a time limit) is passed on and the
  // script ends after edprun, so the job's end is edprun's. (Where Slurm tracks processes by their
  // parents, proctrack/linuxproc, a process whose parent has exited is no longer the job's: edprun
  // would outlive the job it stops.)
  s += launch::shell_join(edprun_command(j, launch)) + " &\nedprun_pid=$!\n";
  s += "trap 'kill -TERM \"$edprun_pid\" 2>/dev/null' TERM INT HUP\n"
       "rc=0; wait \"$edprun_pid\" || rc=$?\n"
       "while kill -0 \"$edprun_pid\" 2>/dev/null; do rc=0; wait \"$edprun_pid\" || rc=$?; done\n";
  s += "printf '{\"code\": %d, \"slurm_job\": \"%s\"}\\n' \"$rc\" \"$SLURM_JOB_ID\" > " + q(d + "/exit.json.tmp") + " && mv " +
       q(d + "/exit.json.tmp") + " " + q(d + "/exit.json") + "\nexit $rc\n";
  return s;
}

void SlurmBackend::start(ManagedJob& j, const std::vector<std::string>& launch) {
  const fs::path d = dir(j);
  files::make_dir(d.string(), "job directory");
  fs::remove(d / "exit.json");
  files::write_atomic((d / "job.sbatch").string(), batch_script(j, launch));
  fs::permissions(d / "job.sbatch", fs::perms::owner_exec, fs::perm_options::add);
  std::vector<std::string> argv = {"sbatch", "--parsable", "--job-name=" + name(j), "--partition=" + o_.partition,
                                   "--nodes=" + std::to_string(j.workers), "--ntasks-per-node=1", "--exclusive",
                                   "--output=" + (d / "log").string(), "--open-mode=append",
                                   "--chdir=" + (j.spec.cwd.empty() ? root().string() : j.spec.cwd)};
  if (const std::string g = gres_for(j); !g.empty()) argv.push_back(g);  // nodes of the job's GPU type
  argv.insert(argv.end(), o_.extra_args.begin(), o_.extra_args.end());
  argv.push_back((d / "job.sbatch").string());
  const std::string out = trim(slurm_.run(argv));
  const std::string id = out.substr(0, out.find(';'));  // "id" or "id;cluster"
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
    throw Error("sbatch did not print a job id (--parsable), it printed '" + out + "'");
  j.sched = SchedJob{id, "PENDING", ""};
  j.sched_grow = SchedJob{};
  j.keeper_pid = 0;
  j.keeper_start = 0;
  ours_.insert(id);
  force_ = true;
  say("job " + j.id + " is Slurm job " + id + " (" + std::to_string(j.workers) + " node(s)): " + launch::shell_join(argv));
}

void SlurmBackend::signal(const ManagedJob& j, int sig) {
  for (const std::string& id : {j.sched.id, j.sched_grow.id})
    if (!id.empty()) try {
        if (sig == SIGTERM) slurm_.run({"scancel", id});  // the whole job, Slurm's way: SIGTERM, then SIGKILL
        else slurm_.run({"scancel", "--signal=" + std::to_string(sig), "--full", id});
      } catch (const std::exception& e) {
        say("job " + j.id + ": scancel of Slurm job " + id + " failed: " + e.what());
      }
  force_ = true;
}

// How the job ended: cancelled in Slurm (by its owner or an administrator), else the exit status
// its batch script recorded, else Slurm's end state; nothing while Slurm runs it. A status of a
// signal (edprun got SIGTERM) waits for Slurm to tell whether the job was cancelled.
std::optional<ExitRecord> SlurmBackend::exit_record(const ManagedJob& j) {
  const std::string& st = j.sched.state;
  if (st == "CANCELLED") {
    ExitRecord r;
    r.code = 128 + SIGTERM;
    r.cancelled = true;
    r.note = "cancelled in Slurm (Slurm job " + j.sched.id + ", scancel outside edp-autoscale)";
    return r;
  }
  const auto rec = exit_file(j);
  if (rec && (rec->code < 128 || job_final(st))) return rec;
  if (!job_final(st) || st == "COMPLETED") return std::nullopt;  // COMPLETED without a record: its status file tells
  ExitRecord r;
  r.code = -1;
  r.recovered = true;
  r.note = "Slurm job " + j.sched.id + " ended " + st + (j.sched.reason.empty() ? "" : " (" + j.sched.reason + ")") +
           " before edprun recorded an exit status";
  return r;
}

bool SlurmBackend::keeper_alive(const ManagedJob& j) {
  if (j.sched.id.empty()) return false;
  if (stale_ || !seen_) return true;  // Slurm did not answer: nothing is concluded
  return !job_final(j.sched.state) && j.sched.reason != "gone from Slurm";
}

}  // namespace edp::autoscale
