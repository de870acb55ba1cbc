// edp-autoscale: command-line front end of the autoscaler.
//
//   edp-autoscale plan --input FILE [--gpus N] [--rescale-penalty F]
//       JSON in, JSON out (the contract in docs/autoscaler.md). Exit 2 on invalid input.
//   edp-autoscale simulate (--trace FILE | --poisson N) (--gpus N | --sweep A,B,...)
//                          [--policy static,baseline,dp] --out DIR [options]
//       Simulates the policies on the trace; writes per-job CSVs, summary JSON, timelines and
//       PNG plots (via plot_autoscale.py and matplotlib, skipped with a note when unavailable).
//
// Every option can also be set by an environment variable EDP_AUTOSCALE_<NAME> (upper case,
// '-' -> '_'); the command line wins. The option table below is the one place they are defined.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "edp/autoscale/cluster_sim.h"
#include "edp/autoscale/optimizer.h"
#include "edp/autoscale/simulator.h"
#include "edp/core/error.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace edp::autoscale;

namespace {

struct OptSpec {
  const char* name;
  const char* def;  // nullptr: no default; "" for flags means off
  bool flag;        // takes no value
  const char* help;
};

// The single definition of every knob (flag + EDP_AUTOSCALE_* variable + default + help).
const OptSpec kOptions[] = {
    {"input", nullptr, false, "plan: JSON request file ('-' for stdin)"},
    {"gpus", nullptr, false, "cluster size (plan: overrides the request's \"gpus\")"},
    {"rescale-penalty", "0.05", false, "value fraction an option other than a job's current one loses"},
    {"trace", nullptr, false, "Philly-format CSV (submit_time_s,gpus_requested,duration_s,...) or a Pollux workload CSV (name,time,application,num_replicas,batch_size)"},
    {"poisson", nullptr, false, "simulate: use N synthetic Poisson jobs instead of a trace"},
    {"poisson-rate", "40", false, "synthetic arrivals per hour"},
    {"profiles", nullptr, false, "model_profiles directory (default: model_profiles beside the trace or up to two folders above, else synthetic)"},
    {"policy", "static,baseline,dp", false, "comma-separated policies: static, baseline, dp, goodput"},
    {"sweep", nullptr, false, "comma-separated cluster sizes (instead of --gpus)"},
    {"out", nullptr, false, "output directory"},
    {"pause", nullptr, false, "seconds a rescaled job makes no progress (default: 30 with --slots gpu, Pollux's figure; with --slots cpu the pause edp measured, autoscale::kMeasuredCpuRescalePauseS)"},
    {"slots", "gpu", false, "what the cluster's slots are: gpu or cpu (CPU workers; only the default --pause differs)"},
    {"replan", "300", false, "seconds between periodic re-plans (besides arrivals/completions)"},
    {"weighting", "remaining", false, "DP job weights: equal | remaining (1/remaining time, SRPT-like)"},
    {"max-scale", "4", false, "a job may use up to max(4, K x requested) GPUs (<= 64)"},
    {"own-batch", "model", false, "a trace job's own batch: per-gpu (model's initial batch x GPUs) or model (the model's default global batch, kept at any GPU count)"},
    {"window", "604800", false, "seconds: jobs finished by then count as completed in the window"},
    {"limit", nullptr, false, "use only the first N jobs of the trace"},
    {"seed", "1", false, "seed of the model assignment (and the Poisson generator)"},
    {"restart-aware", "", true, "simulate: elastic policies value an option at 1 / (time the job still needs + the pause if it restarts)"},
    {"statistical-efficiency", "", true, "progress = samples/s x statistical efficiency (Pollux)"},
    {"max-ranks-per-gpu", "1", false, "simulate: the elastic policies may run up to K (1, 2, 4, 8) ranks on each GPU (collocation, docs/autoscaler.md §8)"},
    {"colocation-idle", "0", false, "simulate: share of a rank's fixed step time (the model's a) its GPU idles; what collocated ranks can fill (an assumption until measured on a GPU)"},
    {"allocations", "", true, "also write allocations_<policy>_<gpus>.csv (every job's GPUs and batch over time)"},
    {"threads", "1", false, "simulations run in parallel (sweep)"},
    {"no-plots", "", true, "do not call the plot script"},
    {"plot-script", nullptr, false, "path of plot_autoscale.py (default: installed or source copy)"},
    {"quiet", "", true, "no progress on stderr"},
    {"compare-published", "", true, "simulate: run the Pollux workloads in the node-level simulator and print edp's policies next to the published Tiresias / Optimus+Oracle / Pollux average JCTs"},
    {"workloads", nullptr, false, "compare-published: the pollux_workloads folder (default: beside the model_profiles folder, or ../shared/data/pollux_workloads)"},
    {"job-loads", "1.0", false, "compare-published: comma-separated relative job loads (1.0 = workloads/, 0.5 = workloads-0.5/, ...)"},
    {"interval", "60", false, "compare-published: scheduling interval of the node-level simulator (s)"},
};

std::string env_name(const std::string& opt) {
  std::string e = "EDP_AUTOSCALE_";
  for (char c : opt) e += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return e;
}

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Args {
 public:
  Args(int argc, char** argv, int first) {
    for (int i = first; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "-h" || a == "--help") {
        help = true;
        continue;
      }
      if (a.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + a + "'");
      a = a.substr(2);
      std::string val;
      const bool has_eq = a.find('=') != std::string::npos;
      if (has_eq) {
        val = a.substr(a.find('=') + 1);
        a = a.substr(0, a.find('='));
      }
      const OptSpec* spec = find(a);
      if (!spec) throw UsageError("unknown option --" + a + " (see --help)");
      if (spec->flag) {
        vals_[a] = "1";
        continue;
      }
      if (!has_eq) {
        if (i + 1 >= argc) throw UsageError("option --" + a + " needs a value");
        val = argv[++i];
      }
      vals_[a] = val;
    }
  }
  static const OptSpec* find(const std::string& n) {
    for (const OptSpec& o : kOptions)
      if (n == o.name) return &o;
    return nullptr;
  }
  bool has(const std::string& n) const { return !get(n).empty(); }
  // Set on the command line or in the environment (not just defaulted).
  bool given(const std::string& n) const { return vals_.count(n) || std::getenv(env_name(n).c_str()); }
  std::string get(const std::string& n) const {
    auto it = vals_.find(n);
    if (it != vals_.end()) return it->second;
    if (const char* e = std::getenv(env_name(n).c_str())) return e;
    const OptSpec* s = find(n);
    return s && s->def ? s->def : "";
  }
  double num(const std::string& n) const {
    const std::string v = get(n);
    char* end = nullptr;
    const double d = std::strtod(v.c_str(), &end);
    if (v.empty() || *end) throw UsageError("--" + n + ": expected a number, got '" + v + "'");
    return d;
  }
  int integer(const std::string& n) const {
    const std::string v = get(n);
    char* end = nullptr;
    const long d = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end) throw UsageError("--" + n + ": expected an integer, got '" + v + "'");
    return static_cast<int>(d);
  }
  bool help = false;

 private:
  std::map<std::string, std::string> vals_;
};

void usage(std::ostream& o) {
  o << "usage:\n"
       "  edp-autoscale plan --input FILE [--gpus N] [--rescale-penalty F]\n"
       "  edp-autoscale simulate (--trace FILE | --poisson N) (--gpus N | --sweep A,B,..) --out DIR [options]\n"
       "  edp-autoscale simulate --compare-published [--workloads DIR] [--job-loads 1.0,0.5,..] [--policy P,..] [--out DIR]\n"
       "  edp-autoscale workload (--trace FILE | --poisson N) [--gpus N | --sweep A,B,..] [--policy P,..] [options]\n"
       "  edp-autoscale serve --root DIR --slots N [--policy goodput|dp|static] ...   (the live controller; serve --help)\n"
       "  edp-autoscale submit --root DIR SPEC.json | status --root DIR [--json] | cancel --root DIR ID\n\n"
       "options (each also settable as EDP_AUTOSCALE_<NAME>):\n";
  for (const OptSpec& s : kOptions) {
    std::string left = std::string("  --") + s.name + (s.flag ? "" : " V");
    left.resize(std::max<size_t>(left.size() + 1, 30), ' ');
    o << left << s.help;
    if (s.def && *s.def) o << " [default " << s.def << "]";
    o << "  (" << env_name(s.name) << ")\n";
  }
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// ---- plan ---------------------------------------------------------------------------------

[[noreturn]] void bad_input(const std::string& where, const std::string& what) {
  throw edp::DataError(where + ": " + what);
}

void check_keys(const json& obj, const std::set<std::string>& allowed, const std::string& where) {
  if (!obj.is_object()) bad_input(where, "must be a JSON object");
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (!allowed.count(it.key())) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      bad_input(where, "unknown field '" + it.key() + "' (allowed: " + list + ")");
    }
}

int get_int(const json& obj, const std::string& key, const std::string& where, bool required, int def = 0) {
  if (!obj.contains(key)) {
    if (required) bad_input(where, "missing field '" + key + "'");
    return def;
  }
  const json& v = obj.at(key);
  if (!v.is_number_integer()) bad_input(where, "field '" + key + "' must be an integer, got " + v.dump());
  const int64_t x = v.get<int64_t>();
  if (x < 0) bad_input(where, "field '" + key + "' must be >= 0, got " + std::to_string(x));
  if (x > 1000000000) bad_input(where, "field '" + key + "' is too large");
  return static_cast<int>(x);
}

// --pause, or its default for the kind of slot (--slots).
double default_pause(const Args& args) {
  const std::string slots = args.get("slots");
  if (slots != "gpu" && slots != "cpu") throw UsageError("--slots must be gpu or cpu, got '" + slots + "'");
  if (args.has("pause")) return args.num("pause");
  return slots == "cpu" ? edp::autoscale::kMeasuredCpuRescalePauseS : 30.0;
}

double get_num(const json& obj, const std::string& key, const std::string& where, bool required, double def) {
  if (!obj.contains(key)) {
    if (required) bad_input(where, "missing field '" + key + "'");
    return def;
  }
  const json& v = obj.at(key);
  if (!v.is_number()) bad_input(where, "field '" + key + "' must be a number, got " + v.dump());
  const double x = v.get<double>();
  if (x < 0) bad_input(where, "field '" + key + "' must be >= 0, got " + v.dump());
  return x;
}

PlanRequest parse_plan(const json& in, const Args& args) {
  PlanRequest req;
  check_keys(in, {"gpus", "jobs", "rescale_penalty"}, "request");
  if (args.has("gpus")) {
    req.gpus = args.integer("gpus");
    if (req.gpus < 0) throw edp::DataError("--gpus: must be >= 0");
  } else {
    req.gpus = get_int(in, "gpus", "request", true);
  }
  req.rescale_penalty = get_num(in, "rescale_penalty", "request", false, args.num("rescale-penalty"));
  if (!in.contains("jobs") || !in.at("jobs").is_array()) bad_input("request", "field 'jobs' must be an array");
  const json& jobs = in.at("jobs");
  for (size_t i = 0; i < jobs.size(); ++i) {
    const json& j = jobs[i];
    std::string where = "jobs[" + std::to_string(i) + "]";
    if (j.is_object() && j.contains("id") && j.at("id").is_string())
      where = "job '" + j.at("id").get<std::string>() + "' (" + where + ")";
    check_keys(j, {"id", "min_gpus", "max_gpus", "max_batch_per_gpu", "weight", "ref", "throughput", "current"}, where);
    JobRequest r;
    if (!j.contains("id") || !j.at("id").is_string()) bad_input(where, "field 'id' must be a string");
    r.id = j.at("id").get<std::string>();
    r.min_gpus = get_int(j, "min_gpus", where, true);
    r.max_gpus = get_int(j, "max_gpus", where, true);
    r.max_batch_per_gpu = get_int(j, "max_batch_per_gpu", where, true);
    r.weight = get_num(j, "weight", where, false, 1.0);
    if (!j.contains("ref")) bad_input(where, "missing field 'ref'");
    check_keys(j.at("ref"), {"gpus", "batch"}, where + ": field 'ref'");
    r.ref_gpus = get_int(j.at("ref"), "gpus", where + ": field 'ref'", true);
    r.ref_batch = get_int(j.at("ref"), "batch", where + ": field 'ref'", true);
    if (j.contains("current")) {
      check_keys(j.at("current"), {"gpus", "batch"}, where + ": field 'current'");
      r.current_gpus = get_int(j.at("current"), "gpus", where + ": field 'current'", true);
      r.current_batch = get_int(j.at("current"), "batch", where + ": field 'current'", true);
    }
    if (!j.contains("throughput") || !j.at("throughput").is_array())
      bad_input(where, "field 'throughput' must be an array");
    const json& tp = j.at("throughput");
    for (size_t k = 0; k < tp.size(); ++k) {
      const std::string w = where + ": field 'throughput[" + std::to_string(k) + "]'";
      check_keys(tp[k], {"gpus", "batch", "samples_per_s"}, w);
      ThroughputPoint p;
      p.gpus = get_int(tp[k], "gpus", w, true);
      p.batch = get_int(tp[k], "batch", w, true);
      p.samples_per_s = get_num(tp[k], "samples_per_s", w, true, 0);
      r.throughput.push_back(p);
    }
    req.jobs.push_back(std::move(r));
  }
  return req;
}

// Runs fn(0..n-1) on up to `threads` threads (this one included), each index once.
void run_parallel(size_t n, int threads, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i; (i = next++) < n;) fn(i);
  };
  const int t = std::max(1, std::min<int>(threads, static_cast<int>(n)));
  std::vector<std::thread> pool;
  for (int k = 1; k < t; ++k) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
}

int cmd_plan(const Args& args) {
  if (!args.has("input")) throw UsageError("plan needs --input FILE");
  const std::string path = args.get("input");
  json in;
  try {
    if (path == "-") {
      in = json::parse(std::cin);
    } else {
      std::ifstream f(path);
      if (!f) throw edp::DataError(path + ": cannot open file");
      in = json::parse(f);
    }
  } catch (const json::parse_error& e) {
    throw edp::DataError(path + ": invalid JSON: " + e.what());
  }
  const PlanRequest req = parse_plan(in, args);
  const PlanResult r = plan(req);
  json out;
  out["objective"] = r.solution.objective;
  json allocs = json::array();
  for (size_t i = 0; i < r.ids.size(); ++i) {
    const Choice& c = r.solution.choices[i];
    allocs.push_back({{"id", r.ids[i]}, {"gpus", c.gpus}, {"batch", c.batch}, {"value", c.value}});
  }
  out["allocations"] = allocs;
  out["solve_ms"] = r.solve_ms;
  std::cout << out.dump(2) << "\n";
  return 0;
}

// ---- simulate -----------------------------------------------------------------------------

std::string plot_script(const Args& args, const char* argv0) {
  if (args.has("plot-script")) return args.get("plot-script");
  std::error_code ec;
  const fs::path exe = fs::canonical(fs::path(argv0), ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "share" / "edp" / "plot_autoscale.py";
    if (fs::exists(installed)) return installed.string();
  }
  return EDP_AUTOSCALE_PLOT_SCRIPT_SRC;
}

OwnBatch own_batch_arg(const Args& args) {
  const std::string v = args.get("own-batch");
  if (v == "per-gpu") return OwnBatch::PerGpu;
  if (v == "model") return OwnBatch::Model;
  throw UsageError("--own-batch: expected per-gpu or model, got '" + v + "'");
}

// The jobs (--trace or --poisson, --limit) and the model profiles (--profiles, else a
// model_profiles folder beside the trace or up to two folders above it, else synthetic), shared
// by simulate and workload. --trace takes a Philly-format trace or a Pollux workload file (told
// apart by the header); the latter needs the measured profiles, since its jobs name their models.
void load_inputs(const Args& args, std::vector<TraceJob>& trace, std::vector<ModelProfile>& profiles) {
  std::string profiles_dir = args.get("profiles");
  if (profiles_dir.empty() && args.has("trace")) {
    fs::path dir = fs::path(args.get("trace")).parent_path();
    for (int up = 0; up < 3 && profiles_dir.empty(); ++up, dir = dir.parent_path())
      if (fs::exists(dir / "model_profiles" / "model_limits.csv")) profiles_dir = (dir / "model_profiles").string();
  }
  if (!profiles_dir.empty()) {
    profiles = load_model_profiles(profiles_dir);
  } else {
    std::cerr << "edp-autoscale: no --profiles and none beside the trace: using synthetic models\n";
    profiles = synthetic_model_profiles();
  }
  if (args.has("trace")) {
    const std::string path = args.get("trace");
    trace = is_pollux_workload(path) ? load_pollux_workload(path, profiles) : load_philly_trace(path);
  } else if (args.has("poisson")) {
    PoissonOptions po;
    po.jobs = args.integer("poisson");
    po.arrivals_per_hour = args.num("poisson-rate");
    po.seed = static_cast<uint64_t>(args.integer("seed"));
    trace = poisson_trace(po);
  } else {
    throw UsageError("needs --trace FILE or --poisson N");
  }
  if (args.has("limit") && static_cast<size_t>(args.integer("limit")) < trace.size())
    trace.resize(static_cast<size_t>(args.integer("limit")));
}

int cmd_compare_published(const Args& args);

int cmd_simulate(const Args& args, const char* argv0) {
  if (args.has("compare-published")) return cmd_compare_published(args);
  if (!args.has("out")) throw UsageError("simulate needs --out DIR");
  const fs::path out = args.get("out");
  fs::create_directories(out);
  std::vector<TraceJob> trace;
  std::vector<ModelProfile> profiles;
  load_inputs(args, trace, profiles);
  {
    json fit = json::array();
    for (const ModelProfile& p : profiles) {
      const StepTimeModel& m = p.model;
      fit.push_back({{"model", p.name},
                     {"synthetic", p.synthetic},
                     {"rows", p.fit.rows},
                     {"mean_rel_err", p.fit.mean_rel_err},
                     {"p90_rel_err", p.fit.p90_rel_err},
                     {"max_rel_err", p.fit.max_rel_err},
                     {"packed_rows", p.fit.packed_rows},
                     {"packed_mean_rel_err", p.fit.packed_mean_rel_err},
                     {"grad_noise_scale", p.grad_noise_scale},
                     {"coef", {{"a", m.a}, {"c", m.c}, {"s0", m.s0}, {"s1", m.s1}, {"s2", m.s2}, {"s3", m.s3}, {"o", m.o}}}});
    }
    std::ofstream(out / "profiles_fit.json") << fit.dump(2) << "\n";
  }

  std::vector<int> sizes;
  if (args.has("sweep")) {
    for (const std::string& s : split(args.get("sweep"))) sizes.push_back(std::atoi(s.c_str()));
  } else if (args.has("gpus")) {
    sizes.push_back(args.integer("gpus"));
  } else {
    throw UsageError("simulate needs --gpus N or --sweep A,B,...");
  }
  for (int g : sizes)
    if (g < 1) throw UsageError("cluster sizes must be >= 1");
  const std::vector<std::string> policies = split(args.get("policy"));
  for (const std::string& p : policies) make_policy(p);  // fail early on a bad name

  SimConfig base;
  base.rescale_pause_s = default_pause(args);
  base.replan_interval_s = args.num("replan");
  base.rescale_penalty = args.num("rescale-penalty");
  const std::string w = args.get("weighting");
  if (w == "equal") base.weighting = Weighting::Equal;
  else if (w == "remaining") base.weighting = Weighting::Remaining;
  else throw UsageError("--weighting: expected equal or remaining, got '" + w + "'");
  base.max_scale = args.integer("max-scale");
  base.own_batch = own_batch_arg(args);
  base.window_s = args.num("window");
  base.seed = static_cast<uint64_t>(args.integer("seed"));
  base.statistical_efficiency = args.has("statistical-efficiency");
  base.restart_aware = args.has("restart-aware");
  base.max_ranks_per_gpu = static_cast<int>(args.integer("max-ranks-per-gpu"));
  base.colocation_idle = args.num("colocation-idle");
  if (base.max_ranks_per_gpu < 1 || base.max_ranks_per_gpu > 8)
    throw UsageError("--max-ranks-per-gpu: expected 1 to 8, got " + args.get("max-ranks-per-gpu"));
  if (!(base.colocation_idle >= 0 && base.colocation_idle <= 1))
    throw UsageError("--colocation-idle: expected a share in [0, 1], got " + args.get("colocation-idle"));
  base.record_allocations = args.has("allocations");
  const bool quiet = args.has("quiet");

  struct Run {
    std::string policy;
    int gpus;
    SimSummary summary;
  };
  std::vector<Run> runs;
  for (int g : sizes)
    for (const std::string& p : policies) runs.push_back(Run{p, g, {}});
  std::mutex mu;
  std::vector<std::string> errors;
  run_parallel(runs.size(), static_cast<int>(args.integer("threads")), [&](size_t i) {
    Run& run = runs[i];
    SimConfig cfg = base;
    cfg.gpus = run.gpus;
    cfg.policy = run.policy;
    const std::string tag = run.policy + "_" + std::to_string(run.gpus);
    if (!quiet)
      cfg.progress = [&, tag](double t, int done, int total) {
        std::lock_guard<std::mutex> lock(mu);
        std::fprintf(stderr, "[%s] day %5.1f: %d/%d jobs done\n", tag.c_str(), t / 86400.0, done, total);
      };
    try {
      const SimResult r = simulate(trace, profiles, cfg);
      write_jobs_csv(r, (out / ("jobs_" + tag + ".csv")).string());
      write_timeline_csv(r, (out / ("timeline_" + tag + ".csv")).string());
      if (cfg.record_allocations) write_allocations_csv(r, (out / ("allocations_" + tag + ".csv")).string());
      std::ofstream(out / ("summary_" + tag + ".json")) << summary_json(r.summary) << "\n";
      std::lock_guard<std::mutex> lock(mu);
      run.summary = r.summary;
      if (!quiet)
        std::fprintf(stderr, "[%s] done in %.1f s: avg JCT %.0f s, %d/%d completed in window\n", tag.c_str(),
                     r.summary.wall_s, r.summary.avg_jct_s, r.summary.completed_in_window, r.summary.jobs);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu);
      errors.push_back(tag + ": " + e.what());
    }
  });
  if (!errors.empty()) {
    for (const auto& e : errors) std::cerr << "edp-autoscale: " << e << "\n";
    return 1;
  }

  json all = json::array();
  for (const Run& r : runs) all.push_back(json::parse(summary_json(r.summary)));
  json meta = {{"trace", args.has("trace") ? args.get("trace") : "poisson:" + args.get("poisson")},
               {"jobs", trace.size()},
               {"pause_s", base.rescale_pause_s},
               {"replan_s", base.replan_interval_s},
               {"rescale_penalty", base.rescale_penalty},
               {"weighting", w},
               {"max_scale", base.max_scale},
               {"own_batch", args.get("own-batch")},
               {"statistical_efficiency", base.statistical_efficiency},
               {"restart_aware", base.restart_aware},
               {"max_ranks_per_gpu", base.max_ranks_per_gpu},
               {"colocation_idle", base.colocation_idle},
               {"seed", base.seed},
               {"runs", all}};
  std::ofstream(out / "summary.json") << meta.dump(2) << "\n";

  // Table on stdout.
  std::printf("%-9s %6s %8s %10s %12s %12s %12s %12s %7s %9s\n", "policy", "gpus", "done/7d", "completed",
              "avg_jct_s", "median_s", "p95_s", "avg_queue_s", "util", "rescales");
  for (const Run& r : runs) {
    const SimSummary& s = r.summary;
    std::printf("%-9s %6d %8d %10d %12.0f %12.0f %12.0f %12.0f %7.3f %9d\n", s.policy.c_str(), s.gpus,
                s.completed_in_window, s.completed, s.avg_jct_s, s.median_jct_s, s.p95_jct_s, s.avg_queue_s,
                s.utilisation, s.rescales);
  }

  if (!args.has("no-plots")) {
    const std::string script = plot_script(args, argv0);
    // The first interpreter on PATH may lack matplotlib (pyenv, venvs); Debian's has it when
    // python3-matplotlib is installed.
    std::string python;
    for (const char* cand : {"python3", "/usr/bin/python3"}) {
      const std::string probe = std::string(cand) + " -c 'import matplotlib' >/dev/null 2>&1";
      if (std::system(probe.c_str()) == 0) {
        python = cand;
        break;
      }
    }
    const std::string cmd = python + " '" + script + "' '" + out.string() + "'";
    const int rc = fs::exists(script) && !python.empty() ? std::system(cmd.c_str()) : -1;
    if (rc != 0)
      std::cerr << "edp-autoscale: plots skipped (needs python3 with matplotlib and " << script
                << "; apt-get install python3-matplotlib)\n";
  }
  return 0;
}

// ---- simulate --compare-published ----------------------------------------------------------

// Published average JCTs (s) of the Pollux paper's simulator study, 16 nodes x 4 GPUs, per
// workload file 1..8 (petuum/adaptdl, branch osdi21-artifact, simulator/results*/ summaries;
// docs/autoscaler.md cites them). 0 = not published.
struct Published {
  const char* policy;
  double load;
  double per_workload[8];
  double mean;
};
const Published kPublished[] = {
    {"pollux", 1.0, {2089, 3323, 2188, 2721, 2674, 2446, 3616, 2952}, 2751},
    {"tiresias", 1.0, {2474, 5145, 3876, 3280, 3501, 3470, 5480, 5080}, 4038},
    {"optimus", 1.0, {4087, 6914, 3944, 5968, 5656, 5302, 7291, 6294}, 5682},
    {"pollux", 0.5, {0, 0, 0, 0, 0, 0, 0, 0}, 1534},
    {"pollux", 1.5, {0, 0, 0, 0, 0, 0, 0, 0}, 3685},
    {"pollux", 2.0, {0, 0, 0, 0, 0, 0, 0, 0}, 5289},
    {"tiresias", 0.5, {1450.9, 2333.3, 1869.9, 1946.8, 1425.4, 1826.6, 3979.2, 1900.0}, 2091.5},
    {"tiresias", 1.5, {5520.3, 6333.8, 6562.0, 5577.3, 6832.4, 5830.5, 5366.8, 7435.8}, 6182.3},
};

const Published* published(const std::string& policy, double load) {
  for (const Published& p : kPublished)
    if (p.policy == policy && std::abs(p.load - load) < 1e-9) return &p;
  return nullptr;
}

int cmd_compare_published(const Args& args) {
  fs::path wl = args.get("workloads");
  fs::path prof = args.get("profiles");
  if (wl.empty() && !prof.empty()) wl = prof.parent_path() / "pollux_workloads";
  if (wl.empty()) wl = "../shared/data/pollux_workloads";
  if (prof.empty()) prof = wl.parent_path() / "model_profiles";
  if (!fs::exists(wl / "workloads" / "workload-1.csv"))
    throw UsageError("--compare-published: no workloads/workload-1.csv under '" + wl.string() +
                     "' (give --workloads DIR, the pollux_workloads folder)");
  const ClusterProfiles profiles = ClusterProfiles::load(prof.string());
  std::vector<std::string> policies =
      args.given("policy") ? split(args.get("policy")) : std::vector<std::string>{"tiresias", "optimus", "goodput"};
  for (const std::string& p : policies) make_cluster_policy(p);  // fail early on a bad name
  std::vector<double> loads;
  for (const std::string& x : split(args.get("job-loads"))) {
    char* end = nullptr;
    const double v = std::strtod(x.c_str(), &end);
    if (*end || !(v > 0)) throw UsageError("--job-loads: expected positive numbers, got '" + x + "'");
    loads.push_back(v);
  }
  ClusterSimConfig base;
  base.interval_s = args.num("interval");
  base.restart_s = default_pause(args);
  // The node-level policies have their own default hysteresis (cluster_sim.h); the flag's
  // default belongs to the pool simulator.
  if (args.given("rescale-penalty")) base.policy_cfg.hysteresis = args.num("rescale-penalty");
  struct Run {
    double load;
    int workload;
    std::string policy;
    ClusterSimResult r;
    double wall_s = 0;
  };
  std::vector<Run> runs;
  std::vector<std::vector<std::vector<ClusterJob>>> jobs(loads.size());
  for (size_t l = 0; l < loads.size(); ++l) {
    char dir[64];
    if (std::abs(loads[l] - 1.0) < 1e-9) std::snprintf(dir, sizeof dir, "workloads");
    else std::snprintf(dir, sizeof dir, "workloads-%.1f", loads[l]);
    for (int w = 1; w <= 8; ++w) {
      const fs::path f = wl / dir / ("workload-" + std::to_string(w) + ".csv");
      if (!fs::exists(f)) throw UsageError("--compare-published: missing " + f.string());
      jobs[l].push_back(load_cluster_workload(f.string()));
      for (const std::string& p : policies) runs.push_back(Run{loads[l], w, p, {}, 0});
    }
  }
  std::mutex mu;
  std::vector<std::string> errors;
  run_parallel(runs.size(), static_cast<int>(args.integer("threads")), [&](size_t i) {
    Run& run = runs[i];
    ClusterSimConfig cfg = base;
    cfg.policy = run.policy;
    const size_t l = static_cast<size_t>(std::find(loads.begin(), loads.end(), run.load) - loads.begin());
    try {
      const auto t0 = std::chrono::steady_clock::now();
      run.r = simulate_cluster(jobs[l][size_t(run.workload - 1)], profiles, cfg);
      run.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu);
      errors.push_back(run.policy + " load " + std::to_string(run.load) + " workload-" +
                       std::to_string(run.workload) + ": " + e.what());
    }
  });
  if (!errors.empty()) {
    for (const auto& e : errors) std::cerr << "edp-autoscale: " << e << "\n";
    return 1;
  }
  auto find_run = [&](double load, int w, const std::string& p) -> const Run& {
    for (const Run& r : runs)
      if (r.load == load && r.workload == w && r.policy == p) return r;
    throw edp::Error("internal: run not found");
  };
  json jl = json::array();
  std::printf("node-level simulator: %d nodes x %d GPUs, %.0f s interval, %.0f s pause per allocation change\n",
              base.nodes, base.gpus_per_node, base.interval_s, base.restart_s);
  for (double load : loads) {
    std::printf("\njob load %.1f: average JCT (s) per workload; [published; sim/published - 1]\n%-10s", load, "workload");
    for (const std::string& p : policies) std::printf(" %24s", p.c_str());
    std::printf(" %10s\n", "pollux(pub)");
    json jw = json::array();
    std::map<std::string, double> sum;
    std::map<std::string, int> restarts, njobs;
    std::map<std::string, double> plan_ms, plan_max, wall;
    std::map<std::string, int> plans;
    for (int w = 1; w <= 8; ++w) {
      std::printf("%-10d", w);
      json jr = {{"workload", w}};
      for (const std::string& p : policies) {
        const Run& r = find_run(load, w, p);
        sum[p] += r.r.avg_jct_s;
        restarts[p] += r.r.restarts;
        njobs[p] += static_cast<int>(r.r.jobs.size());
        plan_ms[p] += r.r.plan_ms_avg * r.r.plans;
        plans[p] += r.r.plans;
        plan_max[p] = std::max(plan_max[p], r.r.plan_ms_max);
        wall[p] += r.wall_s;
        const Published* pub = published(p, load);
        char cell[64];
        if (pub && pub->per_workload[w - 1] > 0)
          std::snprintf(cell, sizeof cell, "%6.0f [%5.0f; %+5.1f%%]", r.r.avg_jct_s, pub->per_workload[w - 1],
                        100 * (r.r.avg_jct_s / pub->per_workload[w - 1] - 1));
        else
          std::snprintf(cell, sizeof cell, "%6.0f", r.r.avg_jct_s);
        std::printf(" %24s", cell);
        jr[p] = {{"avg_jct_s", r.r.avg_jct_s}, {"finished", r.r.finished}, {"jobs", r.r.jobs.size()},
                 {"restarts", r.r.restarts}, {"restarts_per_job", r.r.restarts_per_job},
                 {"utilisation", r.r.utilisation}, {"makespan_s", r.r.makespan_s}};
        if (pub && pub->per_workload[w - 1] > 0) jr[p]["published_s"] = pub->per_workload[w - 1];
      }
      const Published* pp = published("pollux", load);
      if (pp && pp->per_workload[w - 1] > 0) std::printf(" %10.0f", pp->per_workload[w - 1]);
      std::printf("\n");
      jw.push_back(jr);
    }
    std::printf("%-10s", "mean");
    json jm;
    for (const std::string& p : policies) {
      const double m = sum[p] / 8;
      const Published* pub = published(p, load);
      char cell[64];
      if (pub) std::snprintf(cell, sizeof cell, "%6.0f [%5.0f; %+5.1f%%]", m, pub->mean, 100 * (m / pub->mean - 1));
      else std::snprintf(cell, sizeof cell, "%6.0f", m);
      std::printf(" %24s", cell);
      jm[p] = {{"mean_avg_jct_s", m},
               {"restarts_per_job", double(restarts[p]) / std::max(1, njobs[p])},
               {"plan_ms_avg", plans[p] ? plan_ms[p] / plans[p] : 0.0},
               {"plan_ms_max", plan_max[p]},
               {"sim_wall_s", wall[p]}};
      if (pub) jm[p]["published_mean_s"] = pub->mean;
    }
    const Published* pp = published("pollux", load);
    if (pp) std::printf(" %10.0f", pp->mean);
    std::printf("\n");
    if (pp)
      for (const std::string& p : policies)
        std::printf("  %-14s vs Pollux (published %.0f s): %+.1f%%\n", p.c_str(), pp->mean,
                    100 * (sum[p] / 8 / pp->mean - 1));
    std::printf("%-14s %16s %14s %14s %12s\n", "policy", "restarts/job", "plan_ms_avg", "plan_ms_max", "sim_wall_s");
    for (const std::string& p : policies)
      std::printf("%-14s %16.2f %14.3f %14.3f %12.2f\n", p.c_str(), double(restarts[p]) / std::max(1, njobs[p]),
                  plans[p] ? plan_ms[p] / plans[p] : 0.0, plan_max[p], wall[p]);
    jl.push_back({{"load", load}, {"workloads", jw}, {"mean", jm},
                  {"pollux_published_mean_s", pp ? pp->mean : 0.0}});
  }
  const json out = {{"nodes", base.nodes}, {"gpus_per_node", base.gpus_per_node}, {"interval_s", base.interval_s},
                    {"pause_s", base.restart_s}, {"policies", policies}, {"loads", jl}};
  std::printf("%s\n", out.dump().c_str());
  if (args.has("out")) {
    fs::create_directories(args.get("out"));
    std::ofstream(fs::path(args.get("out")) / "compare_published.json") << out.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

// ---- workload -----------------------------------------------------------------------------

// How loaded each cluster size is, and what each policy's options alone allow (job_bounds):
// the fewest GPU-hours the work needs (what matters on a saturated cluster) and the average JCT
// on an unlimited cluster (what scaling alone can give). No simulation; a second or so.
int cmd_workload(const Args& args) {
  std::vector<TraceJob> trace;
  std::vector<ModelProfile> profiles;
  load_inputs(args, trace, profiles);
  EDP_CHECK(!trace.empty(), "workload: no jobs");
  SimConfig cfg;
  cfg.max_scale = args.integer("max-scale");
  cfg.own_batch = own_batch_arg(args);
  cfg.seed = static_cast<uint64_t>(args.integer("seed"));
  cfg.statistical_efficiency = args.has("statistical-efficiency");
  const double window = args.num("window");
  std::vector<std::string> policies = split(args.get("policy"));
  if (policies.empty()) throw UsageError("--policy: no policy given");
  std::vector<std::vector<JobBound>> bounds;
  for (const std::string& p : policies) {
    cfg.policy = p;
    bounds.push_back(job_bounds(trace, profiles, cfg));
  }
  const size_t N = trace.size();
  std::vector<std::string> models;
  std::map<std::string, int> jobs;
  std::map<std::string, double> own_gpu_h;
  double own_total = 0;
  for (const JobBound& b : bounds[0]) {
    if (!jobs.count(b.model)) models.push_back(b.model);
    ++jobs[b.model];
    own_gpu_h[b.model] += b.own_gpu_s / 3600;
    own_total += b.own_gpu_s / 3600;
  }
  std::sort(models.begin(), models.end(), [&](const auto& a, const auto& b) { return own_gpu_h[a] < own_gpu_h[b]; });
  std::printf("work by model (GPU-h at the jobs' own configurations) and per policy: min GPU-h / contribution to the\n"
              "unlimited-cluster avg JCT (h)\n%-12s %6s %10s %6s", "model", "jobs", "own_GPU-h", "share");
  for (const auto& p : policies) std::printf(" %22s", p.c_str());
  std::printf("\n");
  json jmodels = json::array();
  std::vector<double> min_total(policies.size()), jct_total(policies.size());
  for (const std::string& m : models) {
    std::printf("%-12s %6d %10.0f %6.3f", m.c_str(), jobs[m], own_gpu_h[m], own_gpu_h[m] / own_total);
    json jm = {{"model", m}, {"jobs", jobs[m]}, {"own_gpu_h", own_gpu_h[m]}};
    for (size_t k = 0; k < policies.size(); ++k) {
      double g = 0, t = 0;
      for (const JobBound& b : bounds[k])
        if (b.model == m) {
          g += b.min_gpu_s / 3600;
          t += b.min_time_s / 3600 / static_cast<double>(N);
        }
      min_total[k] += g;
      jct_total[k] += t;
      std::printf(" %12.0f / %7.3f", g, t);
      jm[policies[k]] = {{"min_gpu_h", g}, {"unlimited_avg_jct_h", t}};
    }
    std::printf("\n");
    jmodels.push_back(jm);
  }
  std::printf("%-12s %6zu %10.0f %6.3f", "total", N, own_total, 1.0);
  for (size_t k = 0; k < policies.size(); ++k) std::printf(" %12.0f / %7.3f", min_total[k], jct_total[k]);
  std::printf("\n");

  // Offered load: all the work over the window, and the demand inside the window if every job
  // ran at its own configuration from its submission (the trace README's "unqueued demand").
  double in_window = 0, last_end = 0;
  for (const TraceJob& j : trace) {
    in_window += j.gpus * std::max(0.0, std::min(window, j.submit_s + j.duration_s) - std::min(window, j.submit_s));
    last_end = std::max(last_end, j.submit_s + j.duration_s);
  }
  const double demand = in_window / window;
  std::vector<int> sizes;
  if (args.has("sweep"))
    for (const std::string& x : split(args.get("sweep"))) sizes.push_back(std::atoi(x.c_str()));
  else if (args.has("gpus"))
    sizes.push_back(args.integer("gpus"));
  std::printf("\nunqueued demand in the window: %.1f GPUs on average; all work = %.1f GPUs x window\n", demand,
              own_total * 3600 / window);
  json jsizes = json::array();
  if (!sizes.empty()) {
    std::printf("%6s %14s %16s", "gpus", "demand/gpus", "all_work/gpus");
    for (const auto& p : policies) std::printf(" %12s", ("min_" + p).c_str());
    std::printf("   (load = GPU-hours / (gpus x window))\n");
  }
  for (int g : sizes) {
    if (g < 1) throw UsageError("cluster sizes must be >= 1");
    const double cap_h = g * window / 3600;
    std::printf("%6d %14.2f %16.2f", g, demand / g, own_total / cap_h);
    json js = {{"gpus", g}, {"demand_load", demand / g}, {"work_load", own_total / cap_h}};
    for (size_t k = 0; k < policies.size(); ++k) {
      std::printf(" %12.2f", min_total[k] / cap_h);
      js["min_load_" + policies[k]] = min_total[k] / cap_h;
    }
    std::printf("\n");
    jsizes.push_back(js);
  }
  json jp = json::array();
  for (size_t k = 0; k < policies.size(); ++k)
    jp.push_back({{"policy", policies[k]}, {"min_gpu_h", min_total[k]}, {"unlimited_avg_jct_h", jct_total[k]}});
  const json line = {{"workload", args.has("trace") ? args.get("trace") : "poisson:" + args.get("poisson")},
                     {"jobs", N},
                     {"own_gpu_h", own_total},
                     {"demand_gpus", demand},
                     {"max_scale", cfg.max_scale},
                     {"own_batch", args.get("own-batch")},
                     {"seed", cfg.seed},
                     {"policies", jp},
                     {"models", jmodels},
                     {"sizes", jsizes}};
  std::printf("%s\n", line.dump().c_str());
  return 0;
}

int live_main(int argc, char** argv);  // serve.cpp

int main(int argc, char** argv) {
  if (argc >= 2) {
    const std::string c = argv[1];
    if (c == "serve" || c == "submit" || c == "status" || c == "cancel") return live_main(argc, argv);
  }
  if (argc < 2 || std::string(argv[1]) == "-h" || std::string(argv[1]) == "--help") {
    usage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    Args args(argc, argv, 2);
    if (args.help) {
      usage(std::cout);
      return 0;
    }
    if (cmd == "plan") return cmd_plan(args);
    if (cmd == "simulate") return cmd_simulate(args, argv[0]);
    if (cmd == "workload") return cmd_workload(args);
    throw UsageError("unknown command '" + cmd + "' (plan, simulate, workload, serve, submit, status, cancel)");
  } catch (const UsageError& e) {
    std::cerr << "edp-autoscale: " << e.what() << "\n";
    return 2;
  } catch (const edp::DataError& e) {
    std::cerr << "edp-autoscale: invalid input: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "edp-autoscale: error: " << e.what() << "\n";
    return 1;
  }
}
