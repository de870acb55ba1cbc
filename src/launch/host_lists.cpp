// The inputs of the launch planner (launch_plan.h) read from text: hostfiles, Slurm's node and
// task lists, the --mps/--bind mode names. Pure parsers; each error names its origin.
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <regex>

#include "core/text.h"
#include "edp/core/error.h"
#include "edp/core/files.h"
#include "edp/launch/placement.h"
#include "launch/launch_plan.h"

namespace edp::launch {

using ::edp::detail::concat;

namespace {

int parse_int(const std::string& s, const std::string& what) {
  int v = 0;
  if (!text::parse_digits(s, v)) throw Error(concat(what, ": '", s, "' is not a non-negative integer"));
  return v;
}

using text::trim;

}  // namespace

std::vector<std::string> split_list(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream is(s);
  while (std::getline(is, cur, sep)) {
    cur = trim(cur);
    if (!cur.empty()) out.push_back(cur);
  }
  return out;
}

MpsMode parse_mps_mode(const std::string& s) {
  if (s == "auto") return MpsMode::Auto;
  if (s == "on") return MpsMode::On;
  if (s == "off") return MpsMode::Off;
  throw Error("--mps '" + s + "': expected auto, on or off");
}

BindMode parse_bind_mode(const std::string& s) {
  if (s == "auto") return BindMode::Auto;
  if (s == "core") return BindMode::Core;
  if (s == "none") return BindMode::None;
  throw Error("--bind-to '" + s + "': expected auto, core or none");
}

const char* mps_mode_name(MpsMode m) {
  switch (m) {
    case MpsMode::Auto: return "auto";
    case MpsMode::On: return "on";
    case MpsMode::Off: return "off";
  }
  return "?";
}

const char* bind_mode_name(BindMode m) {
  switch (m) {
    case BindMode::Auto: return "auto";
    case BindMode::Core: return "core";
    case BindMode::None: return "none";
  }
  return "?";
}

std::string check_mps_size(const std::string& s) {
  static const std::regex re("^[0-9]+([KMGT]B?)?$", std::regex::icase);
  if (!std::regex_match(s, re) || s[0] == '0')
    throw Error("--mps-mem-limit '" + s + "': expected a size such as 4096M or 8G (the syntax of "
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT)");
  return s;
}

std::vector<HostSpec> parse_hostfile_text(const std::string& text, const std::string& origin) {
  std::vector<HostSpec> hosts;
  std::istringstream is(text);
  std::string line;
  int lineno = 0;
  while (std::getline(is, line)) {
    ++lineno;
    if (auto h = line.find('#'); h != std::string::npos) line.resize(h);
    std::istringstream ls(line);
    std::string name, tok;
    if (!(ls >> name)) continue;
    HostSpec spec{name, 0, 0};
    while (ls >> tok) {
      const auto eq = tok.find('=');
      const std::string key = tok.substr(0, eq), value = eq == std::string::npos ? "" : tok.substr(eq + 1);
      const std::string where = concat(origin, ":", lineno);
      if (key == "slots" || key == "cpu" || key == "count")
        spec.slots = parse_int(value, where + ": slots");
      else if (key == "max_slots" || key == "max-slots")
        spec.max_slots = parse_int(value, where + ": max_slots");
      else
        throw Error(concat(where, ": unknown hostfile attribute '", tok,
                           "' (edprun understands Open MPI's slots=N and max_slots=N)"));
    }
    if (spec.max_slots > 0 && spec.slots > spec.max_slots)
      throw Error(concat(origin, ":", lineno, ": slots=", spec.slots, " exceeds max_slots=", spec.max_slots));
    auto it = std::find_if(hosts.begin(), hosts.end(), [&](const HostSpec& h) { return h.name == name; });
    if (it == hosts.end()) {
      hosts.push_back(spec);
    } else {  // Open MPI adds the slots of repeated lines for one host
      it->slots = (it->slots ? it->slots : 1) + (spec.slots ? spec.slots : 1);
      it->max_slots = std::max(it->max_slots, spec.max_slots);
    }
  }
  if (hosts.empty()) throw Error(origin + ": the hostfile lists no host");
  return hosts;
}

std::vector<HostSpec> parse_hostfile(const std::string& path) {
  std::optional<std::string> text;
  try {
    text = files::read_file_if_exists(path);
  } catch (const Error& e) {
    throw Error("--hostfile " + path + ": " + e.what());
  }
  if (!text) throw Error("--hostfile " + path + ": cannot open it");
  return parse_hostfile_text(*text, path);
}

std::vector<HostSlots> read_hostfile(const std::string& path) {
  std::vector<HostSlots> out;
  for (const HostSpec& h : parse_hostfile(path)) out.push_back({h.name, h.slots});
  return out;
}

namespace {
// The most hosts a node list may name: far above any cluster's, far below what would exhaust memory.
constexpr int64_t kMaxNodelistHosts = 1 << 20, kMaxNodelistChars = int64_t{64} << 20;
// A node list in a message: its first 80 characters.
std::string shown_list(const std::string& list) { return list.size() <= 80 ? list : list.substr(0, 80) + "..."; }
}  // namespace

std::vector<std::string> expand_slurm_nodelist(const std::string& list) {
  std::vector<std::string> out;
  // Split on commas that are not inside brackets.
  std::vector<std::string> items;
  std::string cur;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      if (!cur.empty()) items.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) items.push_back(cur);
  int64_t chars = 0;  // of the names the ranges expand to
  for (const auto& item : items) {
    const auto lb = item.find('[');
    if (lb == std::string::npos) {
      out.push_back(item);
      continue;
    }
    const auto rb = item.find(']', lb);
    if (rb == std::string::npos) throw Error("Slurm node list '" + list + "': unbalanced '['");
    const std::string prefix = item.substr(0, lb), suffix = item.substr(rb + 1);
    for (const auto& range : split_list(item.substr(lb + 1, rb - lb - 1))) {
      const auto dash = range.find('-');
      const std::string a = range.substr(0, dash);
      const std::string b = dash == std::string::npos ? a : range.substr(dash + 1);
      const int lo = parse_int(a, "Slurm node list"), hi = parse_int(b, "Slurm node list");
      if (hi < lo) throw Error("Slurm node list '" + list + "': empty range " + range);
      const int64_t count = static_cast<int64_t>(hi) - lo + 1;
      chars += count * static_cast<int64_t>(prefix.size() + suffix.size() + std::max(a.size(), b.size()));
      if (static_cast<int64_t>(out.size()) + count > kMaxNodelistHosts || chars > kMaxNodelistChars)
        throw Error("Slurm node list '" + shown_list(list) + "': more than " + std::to_string(kMaxNodelistHosts) +
                    " hosts or " + std::to_string(kMaxNodelistChars >> 20) + " MiB of names (range " + range + ")");
      for (int v = lo; v <= hi; ++v) {
        std::string num = std::to_string(v);
        if (num.size() < a.size()) num.insert(0, a.size() - num.size(), '0');  // keep zero padding
        out.push_back(prefix + num + suffix);
      }
    }
  }
  return out;
}

std::vector<int> expand_slurm_tasks_per_node(const std::string& spec) {
  std::vector<int> out;
  for (const auto& item : split_list(spec)) {
    const auto lp = item.find("(x");
    if (lp == std::string::npos) {
      out.push_back(parse_int(item, "SLURM_TASKS_PER_NODE"));
      continue;
    }
    const int n = parse_int(item.substr(0, lp), "SLURM_TASKS_PER_NODE");
    const auto rp = item.find(')', lp);
    if (rp == std::string::npos) throw Error("SLURM_TASKS_PER_NODE '" + spec + "': missing ')'");
    const int times = parse_int(item.substr(lp + 2, rp - lp - 2), "SLURM_TASKS_PER_NODE");
    out.insert(out.end(), times, n);
  }
  return out;
}

std::optional<std::vector<HostSpec>> slurm_hosts_from_env() {
  const char* job = std::getenv("SLURM_JOB_ID");
  if (!job || !*job) return std::nullopt;
  const char* nodelist = std::getenv("SLURM_JOB_NODELIST");
  if (!nodelist) nodelist = std::getenv("SLURM_NODELIST");
  std::vector<HostSpec> hosts;
  if (nodelist && *nodelist)
    for (const auto& n : expand_slurm_nodelist(nodelist)) hosts.push_back({n, 0, 0});
  if (hosts.empty()) {
    const char* nn = std::getenv("SLURM_JOB_NUM_NODES");
    const int n = nn ? std::max(1, std::atoi(nn)) : 1;
    for (int i = 0; i < n; ++i) hosts.push_back({"slurm-node-" + std::to_string(i), 0, 0});
  }
  if (const char* tpn = std::getenv("SLURM_TASKS_PER_NODE"); tpn && *tpn) {
    const auto tasks = expand_slurm_tasks_per_node(tpn);
    for (size_t i = 0; i < hosts.size() && i < tasks.size(); ++i) hosts[i].slots = tasks[i];
  }
  return hosts;
}

std::string slurm_allocation_from_env() {
  auto get = [](const char* k) {
    const char* v = std::getenv(k);
    return std::string(v ? v : "");
  };
  std::string nodes = get("SLURM_JOB_NODELIST");
  if (nodes.empty()) nodes = get("SLURM_NODELIST");
  if (nodes.empty()) nodes = "?";
  const std::string tpn = get("SLURM_TASKS_PER_NODE");
  return "job " + get("SLURM_JOB_ID") + ": " + nodes + ", SLURM_TASKS_PER_NODE=" + (tpn.empty() ? "unset" : tpn);
}

}  // namespace edp::launch
