// The live controller's resource backends (controller.h): CPU slots, GPU (and MIG) slots, the
// hosts of a hostfile; Slurm's are in slurm.cpp.
#include "autoscale/controller.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cctype>
#include <cmath>
#include <map>

#include "core/json_fields.h"
#include "edp/autoscale/simulator.h"
#include "edp/core/error.h"
#include "edp/elastic/elastic.h"
#include "launch/system.h"

namespace edp::autoscale {

using json = nlohmann::json;

// ---- resources ---------------------------------------------------------------------------------

void Resources::release(ManagedJob& j) {
  j.gpus.clear();
  j.hosts.clear();
  j.next_hosts.clear();
}

namespace {

// Jobs started without hosts must not meet a backend with hosts, nor the reverse; nor jobs of a
// scheduler a backend without one.
void check_no_hosts(const std::vector<ManagedJob>& jobs) {
  for (const ManagedJob& j : jobs) {
    if (j.running() && !j.sched.id.empty())
      throw Error("running job " + j.id + " is Slurm job " + j.sched.id + " (started by serve --backend slurm); start "
                  "serve again with --backend slurm, or stop it first");
    if (j.running() && !j.hosts.empty())
      throw Error("running job " + j.id + " holds slots on " + std::to_string(j.hosts.size()) + " host(s) (" +
                  j.hosts.front().first + " first) under --hostfile, and this serve has none; start serve again with "
                  "the hostfile the jobs were started with, or stop them first");
  }
}

class CpuSlots final : public Resources {
 public:
  explicit CpuSlots(int slots) : slots_(slots) {}
  int slots() const override { return slots_; }
  std::string describe() const override { return std::to_string(slots_) + " cpu slot(s)"; }
  void assign(ManagedJob&, int, const std::vector<ManagedJob>&) override {}  // a slot is a core: any slot
  void check_adopted(const std::vector<ManagedJob>& jobs) const override { check_no_hosts(jobs); }
  // A slot is a core: one thread per rank, ranks unbound (other jobs share the host), and edprun
  // plans up to the whole cluster so that the job may be grown to any size.
  std::vector<std::string> launch_args(const ManagedJob&, int, const std::string&) const override {
    return {"--gpus", "none", "--cores-per-host", std::to_string(slots_), "--bind-to", "none", "--threads-per-rank", "1"};
  }

 private:
  int slots_;
};

// The GPUs of this host by index; with their types (one token per GPU, gpu_type_token), a job is
// given GPUs of one type only: the one its plan chose (ManagedJob::gpu_type).
class GpuSlots final : public Resources {
 public:
  GpuSlots(int gpus, bool mig, std::vector<std::string> types = {}) : gpus_(gpus), mig_(mig), type_of_(std::move(types)) {
    EDP_CHECK(type_of_.empty() || static_cast<int>(type_of_.size()) == gpus_, "gpu_slots: one type per GPU");
  }
  int slots() const override { return gpus_; }
  bool gpu() const override { return true; }
  std::vector<SlotType> types() const override {
    std::vector<SlotType> out;  // in the order of their first GPU
    for (const std::string& t : type_of_) {
      auto it = std::find_if(out.begin(), out.end(), [&](const SlotType& s) { return s.name == t; });
      if (it == out.end()) out.push_back({t, 1, 1.0});
      else ++it->slots;
    }
    return out;
  }
  std::string describe() const override {
    std::string s = std::to_string(gpus_) + (mig_ ? " MIG instance slot(s)" : " gpu slot(s)");
    if (type_of_.empty()) return s;
    std::string by;
    for (const SlotType& t : types()) {
      by += (by.empty() ? "" : "; ") + std::to_string(t.slots) + " " + t.name + ":";
      for (int g = 0; g < gpus_; ++g)
        if (type_of_[static_cast<size_t>(g)] == t.name) by += " " + std::to_string(g);
    }
    return s + " (" + by + ")";
  }
  void assign(ManagedJob& j, int workers, const std::vector<ManagedJob>& all) override {
    if (j.running()) throw Error("job " + j.id + ": GPU jobs keep their GPUs while they run (no rescale across GPUs yet)");
    const int per = mig_ ? 1 : std::max(1, j.ranks_per_slot);  // a MIG instance takes one rank
    const int want = (workers + per - 1) / per;
    if (!j.gpu_type.empty() && !type_of_.empty() &&
        std::find(type_of_.begin(), type_of_.end(), j.gpu_type) == type_of_.end())
      throw Error("job " + j.id + ": GPU type '" + j.gpu_type + "' is not one of this host's (" + type_names() + ")");
    std::vector<bool> used(static_cast<size_t>(gpus_), false);
    for (const ManagedJob& o : all)
      if (&o != &j)
        for (int g : o.gpus)
          if (g >= 0 && g < gpus_) used[static_cast<size_t>(g)] = true;
    // Without a type asked for (one type, or none known), the first free GPUs: then all of the type of the first.
    std::string type = j.gpu_type;
    std::vector<int> mine;
    for (int g = 0; g < gpus_ && static_cast<int>(mine.size()) < want; ++g) {
      if (used[static_cast<size_t>(g)]) continue;
      if (!type_of_.empty()) {
        if (type.empty()) type = type_of_[static_cast<size_t>(g)];
        if (type_of_[static_cast<size_t>(g)] != type) continue;
      }
      mine.push_back(g);
    }
    if (static_cast<int>(mine.size()) < want)
      throw Error("job " + j.id + ": " + std::to_string(want) + " GPU(s)" + (type.empty() ? "" : " of type " + type) +
                  " are not free");
    j.gpus = mine;
    j.gpu_type = type_of_.empty() ? "" : type;
  }
  void check_adopted(const std::vector<ManagedJob>& jobs) const override {
    check_no_hosts(jobs);
    if (type_of_.empty()) return;
    // A job re-adopted runs where it ran: its GPUs must be this host's, of the type it was given.
    for (const ManagedJob& j : jobs) {
      if (!j.running()) continue;
      for (int g : j.gpus) {
        if (g < 0 || g >= gpus_)
          throw Error("running job " + j.id + " holds GPU " + std::to_string(g) + ", and this serve has " +
                      std::to_string(gpus_) + "; start serve again with the GPUs the job was started with, or stop it first");
        if (!j.gpu_type.empty() && type_of_[static_cast<size_t>(g)] != j.gpu_type)
          throw Error("running job " + j.id + " was started on GPU type " + j.gpu_type + ", and GPU " + std::to_string(g) +
                      " it holds is of type " + type_of_[static_cast<size_t>(g)] +
                      " here; start serve again with the GPUs the job was started with, or stop it first");
      }
    }
  }
  std::vector<std::string> launch_args(const ManagedJob& j, int k, const std::string&) const override {
    std::string list;
    for (int g : j.gpus) {
      if (!list.empty()) list += ',';
      list += std::to_string(g);
    }
    // A MIG instance takes one rank (edprun --mig refuses MPS inside instances).
    if (mig_) return {"--mig", "--gpus", list, "--ranks-per-gpu", "1"};
    return {"--gpus", list, "--ranks-per-gpu", std::to_string(k)};
  }

 private:
  std::string type_names() const {
    std::string s;
    for (const SlotType& t : types()) s += (s.empty() ? "" : ", ") + t.name;
    return s;
  }
  int gpus_;
  bool mig_;
  std::vector<std::string> type_of_;  // each GPU's type by index (empty: not known)
};

class HostfileSlots final : public Resources {
 public:
  HostfileSlots(std::vector<HostfileSlot> hosts, std::string file) : hosts_(std::move(hosts)), file_(std::move(file)) {
    for (const auto& h : hosts_) total_ += h.slots;
  }
  int slots() const override { return total_; }
  std::string describe() const override {
    return std::to_string(total_) + " cpu slot(s) on " + std::to_string(hosts_.size()) + " host(s) of " + file_;
  }
  // `workers` slots for j, keeping the hosts it has (rank 0's first), then taking the hosts with
  // the most free slots (fewer hosts per job), the hostfile's order on ties.
  void assign(ManagedJob& j, int workers, const std::vector<ManagedJob>& all) override {
    const std::map<std::string, int> use = host_use(all, &j);
    auto free_on = [&](const std::string& h) {
      int cap = 0;
      for (const auto& x : hosts_)
        if (x.host == h) cap = x.slots;
      return cap - (use.count(h) ? use.at(h) : 0);
    };
    std::vector<std::string> order;
    if (j.running())
      for (const auto& held : j.hosts) order.push_back(held.first);
    std::vector<std::string> others;
    for (const auto& h : hosts_)
      if (std::find(order.begin(), order.end(), h.host) == order.end()) others.push_back(h.host);
    std::stable_sort(others.begin(), others.end(), [&](const std::string& x, const std::string& y) { return free_on(x) > free_on(y); });
    order.insert(order.end(), others.begin(), others.end());
    std::vector<HostShare> out;
    int left = workers;
    for (const std::string& h : order) {
      const int take = std::min(left, free_on(h));
      if (take > 0) {
        out.emplace_back(h, take);
        left -= take;
      }
    }
    if (left > 0) throw Error("job " + j.id + ": " + std::to_string(workers) + " worker(s) do not fit the hosts' free slots");
    j.next_hosts = out;
    if (!j.running()) j.hosts = out;
  }
  std::vector<HostShare> hostfile_of(const ManagedJob& j) const override { return j.next_hosts; }
  void check_adopted(const std::vector<ManagedJob>& jobs) const override;
  std::vector<std::string> launch_args(const ManagedJob&, int, const std::string& dir) const override {
    // The job's own hostfile, which the controller rewrites before each rescale and edprun reads
    // again at each restart; sizes up to the whole cluster may be asked for.
    return {"--gpus", "none", "--hostfile", dir + "/hostfile", "--reread-hostfile", "--max-np", std::to_string(total_),
            "--bind-to", "none", "--threads-per-rank", "1"};
  }
  json usage(const std::vector<ManagedJob>& jobs) const override {
    json out = json::object();
    const std::map<std::string, int> use = host_use(jobs, nullptr);
    for (const auto& h : hosts_) out[h.host] = {{"used", use.count(h.host) ? use.at(h.host) : 0}, {"slots", h.slots}};
    return out;
  }

 private:
  // The slots of each host held by running jobs other than `except` (the larger of what a job
  // holds and what its rescale asked for).
  static std::map<std::string, int> host_use(const std::vector<ManagedJob>& jobs, const ManagedJob* except) {
    std::map<std::string, int> use;
    for (const ManagedJob& j : jobs) {
      if (&j == except || !j.running()) continue;
      std::map<std::string, int> mine;
      for (const auto& [h, n] : j.hosts) mine[h] = std::max(mine[h], n);
      for (const auto& [h, n] : j.next_hosts) mine[h] = std::max(mine[h], n);
      for (const auto& [h, n] : mine) use[h] += n;
    }
    return use;
  }
  std::vector<HostfileSlot> hosts_;
  std::string file_;
  int total_ = 0;
};

void HostfileSlots::check_adopted(const std::vector<ManagedJob>& jobs) const {
  const std::string again = "; start serve again with the hostfile the jobs were started with, or stop them first";
  for (const ManagedJob& j : jobs)
    if (j.running() && !j.sched.id.empty())
      throw Error("running job " + j.id + " is Slurm job " + j.sched.id + " (started by serve --backend slurm); start "
                  "serve again with --backend slurm, or stop it first");
  for (const ManagedJob& j : jobs)
    if (j.running() && j.hosts.empty())
      throw Error("running job " + j.id + " was started without --hostfile and holds no hosts of " + file_ + again);
  for (const auto& entry : host_use(jobs, nullptr)) {
    const std::string& host = entry.first;  // not a structured binding: lambdas capture it (clang 14)
    const auto used = entry.second;
    const auto h = std::find_if(hosts_.begin(), hosts_.end(), [&](const auto& x) { return x.host == host; });
    const auto lists = [&](const auto& hs) {
      return std::any_of(hs.begin(), hs.end(), [&](const auto& x) { return x.first == host; });
    };
    std::string who;
    for (const ManagedJob& j : jobs)
      if (j.running() && (lists(j.hosts) || lists(j.next_hosts))) who += (who.empty() ? "" : ", ") + j.id;
    if (h == hosts_.end())
      throw Error("running job(s) " + who + " hold " + std::to_string(used) + " slot(s) on host " + host + ", which " +
                  file_ + " does not list" + again);
    if (used > h->slots)
      throw Error("running job(s) " + who + " hold " + std::to_string(used) + " slot(s) on host " + host + ", and " +
                  file_ + " gives it " + std::to_string(h->slots) + again);
  }
}

}  // namespace

std::unique_ptr<Resources> cpu_slots(int slots) { return std::make_unique<CpuSlots>(slots); }
std::unique_ptr<Resources> gpu_slots(int gpus) { return std::make_unique<GpuSlots>(gpus, false); }
std::unique_ptr<Resources> gpu_slots(std::vector<std::string> types) {
  const int n = static_cast<int>(types.size());
  return std::make_unique<GpuSlots>(n, false, std::move(types));
}

std::string gpu_type_token(const std::string& product) {
  std::string s;
  for (char c : product) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  s.erase(0, std::min(s.size(), s.find_first_not_of(" \t")));
  if (s.rfind("nvidia ", 0) == 0) s.erase(0, 7);
  std::string out;
  for (char c : s) {
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) out += c;
    else if (!out.empty() && out.back() != '-') out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

std::vector<std::string> gpu_types_from_nvidia_smi(const std::string& csv) {
  std::map<int, std::string> by_index;
  size_t line_no = 0;
  for (size_t at = 0; at < csv.size();) {
    const size_t end = std::min(csv.find('\n', at), csv.size());
    std::string line = csv.substr(at, end - at);
    at = end + 1;
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (line.empty()) continue;
    const std::string where = "nvidia-smi --query-gpu=index,name line " + std::to_string(line_no) + " '" + line.substr(0, 80) + "'";
    const size_t comma = line.find(',');
    if (comma == std::string::npos) throw DataError(where + ": expected 'INDEX, NAME'");
    int index = -1;
    try {
      size_t used = 0;
      index = std::stoi(line.substr(0, comma), &used);
      if (used != comma || index < 0 || index > 4096) index = -1;
    } catch (const std::exception&) {
    }
    if (index < 0) throw DataError(where + ": the index is not a GPU index");
    const std::string token = gpu_type_token(line.substr(comma + 1));
    if (token.empty()) throw DataError(where + ": no product name");
    if (!by_index.emplace(index, token).second) throw DataError(where + ": GPU " + std::to_string(index) + " listed twice");
  }
  std::vector<std::string> out;
  for (const auto& [index, token] : by_index) {
    if (index != static_cast<int>(out.size()))
      throw DataError("nvidia-smi --query-gpu=index,name: GPU " + std::to_string(out.size()) + " is not listed");
    out.push_back(token);
  }
  return out;
}
std::unique_ptr<Resources> mig_slots(int instances) { return std::make_unique<GpuSlots>(instances, true); }
std::unique_ptr<Resources> hostfile_slots(std::vector<HostfileSlot> hosts, std::string hostfile) {
  return std::make_unique<HostfileSlots>(std::move(hosts), std::move(hostfile));
}

std::vector<std::string> this_host_gpu_types(int gpus, std::string* why) {
  const std::vector<std::string> argv = {"nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"};
  const launch::RunResult r = launch::run_capture(argv);
  if (r.status != 0) {
    std::string err = r.err.empty() ? r.out : r.err;
    while (!err.empty() && std::isspace(static_cast<unsigned char>(err.back()))) err.pop_back();
    if (why) *why = launch::shell_join(argv) + " failed (exit " + std::to_string(r.status) + ")" + (err.empty() ? "" : ": " + err.substr(0, 200));
    return {};
  }
  std::vector<std::string> types;
  try {
    types = gpu_types_from_nvidia_smi(r.out);
  } catch (const DataError& e) {
    if (why) *why = e.what();
    return {};
  }
  if (static_cast<int>(types.size()) < gpus) {
    if (why) *why = "nvidia-smi lists " + std::to_string(types.size()) + " GPU(s), fewer than the " + std::to_string(gpus) + " slots";
    return {};
  }
  types.resize(static_cast<size_t>(gpus));
  return types;
}

}  // namespace edp::autoscale
