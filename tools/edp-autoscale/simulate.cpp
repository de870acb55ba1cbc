// edp-autoscale simulate | workload: the pool simulator (simulator.h) over a trace, the node-level
// simulator against the published schedulers (--compare-published, cluster_sim.h), and a trace's
// load with the bounds of each policy's options (job_bounds). Writes per-job CSVs, summary JSON,
// timelines and PNG plots (plot_autoscale.py with matplotlib, skipped with a note without it).
// Past 600 lines on purpose: the three subcommands print the same tables from the same runs.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "edp/autoscale/cluster_sim.h"
#include "edp/autoscale/simulator.h"
#include "edp/core/error.h"
#include "edp/core/files.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace edp;
using namespace edp::autoscale;

namespace edp::autoscale_tool {

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<std::string> policies_or(const cli::Options& o, const char* def) {
  std::vector<std::string> p = split(o.str("policy").empty() ? def : o.str("policy"));
  if (p.empty()) throw DataError("--policy: no policy given");
  return p;
}

// --pause, or its default for the kind of slot: the simulators model GPU clusters unless told cpu.
double default_pause(const cli::Options& o) {
  if (o.given("pause")) return o.f64("pause");
  return o.str("slot-kind") == "cpu" ? kMeasuredCpuRescalePauseS : 30.0;
}

// "7d", "8h", "90m", "45s": the window as the table's header names it.
std::string window_label(double s) {
  char buf[32];
  if (std::fmod(s, 86400) == 0) std::snprintf(buf, sizeof buf, "%gd", s / 86400);
  else if (std::fmod(s, 3600) == 0) std::snprintf(buf, sizeof buf, "%gh", s / 3600);
  else if (std::fmod(s, 60) == 0) std::snprintf(buf, sizeof buf, "%gm", s / 60);
  else std::snprintf(buf, sizeof buf, "%gs", s);
  return buf;
}

// Runs fn(0..n-1) on up to `threads` threads (this one included), each index once. What an index
// throws is collected as "<label(i)>: <what>"; the errors, if any, are thrown together at the end.
void run_parallel(size_t n, int threads, const std::function<void(size_t)>& fn,
                  const std::function<std::string(size_t)>& label) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::string errors;
  auto worker = [&] {
    for (size_t i; (i = next++) < n;) {
      try {
        fn(i);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        errors += (errors.empty() ? "" : "; ") + label(i) + ": " + e.what();
      }
    }
  };
  const int t = std::max(1, std::min<int>(threads, static_cast<int>(n)));
  std::vector<std::thread> pool;
  for (int k = 1; k < t; ++k) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  if (!errors.empty()) throw Error(errors);
}

std::vector<int> cluster_sizes(const cli::Options& o) {
  std::vector<int> sizes;
  if (!o.str("sweep").empty()) {
    for (const std::string& x : split(o.str("sweep"))) sizes.push_back(std::atoi(x.c_str()));
  } else if (o.given("gpus")) {
    sizes.push_back(static_cast<int>(o.i64("gpus")));
  }
  for (int g : sizes)
    if (g < 1) throw DataError("cluster sizes must be >= 1");
  return sizes;
}

// The jobs (--trace or --poisson, --limit) and the model profiles (--profiles, else a
// model_profiles folder beside the trace or up to two folders above it, else synthetic), shared
// by simulate and workload. --trace takes a Philly-format trace or a Pollux workload file (told
// apart by the header); the latter needs the measured profiles, since its jobs name their models.
void load_inputs(const cli::Options& o, std::vector<TraceJob>& trace, std::vector<ModelProfile>& profiles) {
  std::string profiles_dir = o.str("profiles");
  const std::string tr = o.str("trace");
  if (!tr.empty() && ::access(tr.c_str(), R_OK) != 0)
    throw DataError("cannot open trace '" + tr + "': " + std::strerror(errno) +
                    " (a Philly-format or Pollux workload CSV; this repository's are in data/, e.g. "
                    "--trace data/philly_jobs.csv from its root)");
  if (profiles_dir.empty() && !tr.empty()) {
    fs::path dir = fs::path(tr).parent_path();
    for (int up = 0; up < 3 && profiles_dir.empty(); ++up, dir = dir.parent_path())
      if (fs::exists(dir / "model_profiles" / "model_limits.csv")) profiles_dir = (dir / "model_profiles").string();
  }
  if (!profiles_dir.empty()) {
    profiles = load_model_profiles(profiles_dir);
  } else {
    std::cerr << "edp-autoscale: no --profiles given and no model_profiles folder beside the trace or up to two "
                 "folders above it: using synthetic models\n";
    profiles = synthetic_model_profiles();
  }
  if (!tr.empty()) {
    trace = is_pollux_workload(tr) ? load_pollux_workload(tr, profiles) : load_philly_trace(tr);
  } else if (o.given("poisson")) {
    PoissonOptions po;
    po.jobs = static_cast<int>(o.i64("poisson"));
    po.arrivals_per_hour = o.f64("poisson-rate");
    po.seed = static_cast<uint64_t>(o.i64("seed"));
    trace = poisson_trace(po);
  } else {
    throw DataError("needs --trace FILE or --poisson N");
  }
  if (o.given("limit") && static_cast<size_t>(o.i64("limit")) < trace.size())
    trace.resize(static_cast<size_t>(o.i64("limit")));
}

OwnBatch own_batch_of(const cli::Options& o) { return o.str("own-batch") == "per-gpu" ? OwnBatch::PerGpu : OwnBatch::Model; }

std::string trace_name(const cli::Options& o) {
  return !o.str("trace").empty() ? o.str("trace") : "poisson:" + o.str("poisson");
}

SimConfig sim_config(const cli::Options& o) {
  SimConfig c;
  c.rescale_pause_s = default_pause(o);
  c.replan_interval_s = o.f64("sim-replan");
  c.hysteresis = o.f64("rescale-penalty");
  c.weighting = o.str("weighting") == "equal" ? Weighting::Equal : Weighting::Remaining;
  c.max_scale = static_cast<int>(o.i64("max-scale"));
  c.own_batch = own_batch_of(o);
  c.window_s = o.f64("window");
  c.seed = static_cast<uint64_t>(o.i64("seed"));
  c.statistical_efficiency = o.flag("statistical-efficiency");
  c.restart_aware = o.flag("restart-aware");
  c.max_ranks_per_gpu = static_cast<int>(o.i64("max-ranks-per-gpu"));
  c.colocation_idle = o.f64("colocation-idle");
  c.record_allocations = o.flag("allocations");
  return c;
}

void write_profiles_fit(const fs::path& out, const std::vector<ModelProfile>& profiles) {
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
  files::write_atomic((out / "profiles_fit.json").string(), fit.dump(2) + "\n");
}

// A file edp installs under <prefix>/share/edp (beside this program's bin/), else its copy in the
// source tree.
std::string share_file(const char* argv0, const std::string& name, const std::string& source_copy) {
  std::error_code ec;
  const fs::path exe = fs::canonical(fs::path(argv0), ec);
  if (!ec) {
    const fs::path installed = exe.parent_path().parent_path() / "share" / "edp" / name;
    if (fs::exists(installed)) return installed.string();
  }
  return source_copy;
}

std::string plot_script(const cli::Options& o, const char* argv0) {
  if (!o.str("plot-script").empty()) return o.str("plot-script");
  return share_file(argv0, "plot_autoscale.py", EDP_AUTOSCALE_PLOT_SCRIPT_SRC);
}

void draw_plots(const cli::Options& o, const char* argv0, const fs::path& out) {
  const std::string script = plot_script(o, argv0);
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

struct SimRun {
  std::string policy;
  int gpus;
  SimSummary summary;
};

// Every (size, policy) simulated, each run's files written; returns the runs or throws the errors.
std::vector<SimRun> run_simulations(const cli::Options& o, const std::vector<TraceJob>& trace,
                                    const std::vector<ModelProfile>& profiles, const SimConfig& base, const fs::path& out) {
  std::vector<SimRun> runs;
  for (int g : cluster_sizes(o))
    for (const std::string& p : policies_or(o, "static,baseline,dp")) runs.push_back(SimRun{p, g, {}});
  const bool quiet = o.flag("quiet");
  std::mutex mu;  // stderr
  auto tag_of = [&](size_t i) { return runs[i].policy + "_" + std::to_string(runs[i].gpus); };
  run_parallel(
      runs.size(), static_cast<int>(o.i64("threads")),
      [&](size_t i) {
        SimRun& run = runs[i];
        SimConfig cfg = base;
        cfg.gpus = run.gpus;
        cfg.policy = run.policy;
        const std::string tag = tag_of(i);
        if (!quiet)
          cfg.progress = [&, tag](double t, int done, int total) {
            std::lock_guard<std::mutex> lock(mu);
            std::fprintf(stderr, "[%s] day %5.1f: %d/%d jobs done\n", tag.c_str(), t / 86400.0, done, total);
          };
        const SimResult r = simulate(trace, profiles, cfg);
        write_jobs_csv(r, (out / ("jobs_" + tag + ".csv")).string());
        write_timeline_csv(r, (out / ("timeline_" + tag + ".csv")).string());
        if (cfg.record_allocations) write_allocations_csv(r, (out / ("allocations_" + tag + ".csv")).string());
        files::write_atomic((out / ("summary_" + tag + ".json")).string(), summary_json(r.summary) + "\n");
        run.summary = r.summary;
        std::lock_guard<std::mutex> lock(mu);
        if (!quiet)
          std::fprintf(stderr, "[%s] done in %.1f s: avg JCT %.0f s, %d/%d completed in window\n", tag.c_str(),
                       r.summary.wall_s, r.summary.avg_jct_s, r.summary.completed_in_window, r.summary.jobs);
      },
      tag_of);
  return runs;
}

void write_summary(const cli::Options& o, const fs::path& out, size_t jobs, const SimConfig& base,
                   const std::vector<SimRun>& runs) {
  json all = json::array();
  for (const SimRun& r : runs) all.push_back(json::parse(summary_json(r.summary)));
  const json meta = {{"trace", trace_name(o)},
                     {"jobs", jobs},
                     {"pause_s", base.rescale_pause_s},
                     {"replan_s", base.replan_interval_s},
                     {"rescale_penalty", base.hysteresis},
                     {"weighting", o.str("weighting")},
                     {"max_scale", base.max_scale},
                     {"own_batch", o.str("own-batch")},
                     {"statistical_efficiency", base.statistical_efficiency},
                     {"restart_aware", base.restart_aware},
                     {"max_ranks_per_gpu", base.max_ranks_per_gpu},
                     {"colocation_idle", base.colocation_idle},
                     {"seed", base.seed},
                     {"window_s", base.window_s},
                     {"runs", all}};
  files::write_atomic((out / "summary.json").string(), meta.dump(2) + "\n");
}

void print_sim_table(const std::vector<SimRun>& runs, double window_s) {
  const std::string done = "done/" + window_label(window_s);
  std::printf("%-9s %6s %8s %10s %12s %12s %12s %12s %7s %9s\n", "policy", "gpus", done.c_str(), "completed",
              "avg_jct_s", "median_s", "p95_s", "avg_queue_s", "util", "rescales");
  for (const SimRun& r : runs) {
    const SimSummary& s = r.summary;
    std::printf("%-9s %6d %8d %10d %12.0f %12.0f %12.0f %12.0f %7.3f %9d\n", s.policy.c_str(), s.gpus,
                s.completed_in_window, s.completed, s.avg_jct_s, s.median_jct_s, s.p95_jct_s, s.avg_queue_s,
                s.utilisation, s.rescales);
  }
}

// ---- simulate --compare-published ----------------------------------------------------------

struct ClusterRun {
  double load;
  int workload;
  std::string policy;
  ClusterSimResult r;
  double wall_s = 0;
};

struct PolicyTotals {
  double jct_sum = 0, plan_ms = 0, plan_max = 0, wall = 0;
  int restarts = 0, jobs = 0, plans = 0;
};

std::string jct_cell(double sim, const PublishedJct* pub, double published) {
  char cell[64];
  if (pub && published > 0) std::snprintf(cell, sizeof cell, "%6.0f [%5.0f; %+5.1f%%]", sim, published, 100 * (sim / published - 1));
  else std::snprintf(cell, sizeof cell, "%6.0f", sim);
  return cell;
}

// One load's table (per workload, the mean, restarts and plan times); returns its JSON.
json print_load(double load, const std::vector<std::string>& policies, const std::vector<ClusterRun>& runs) {
  auto find_run = [&](int w, const std::string& p) -> const ClusterRun& {
    for (const ClusterRun& r : runs)
      if (r.load == load && r.workload == w && r.policy == p) return r;
    throw Error("internal: run not found");
  };
  std::printf("\njob load %.1f: average JCT (s) per workload; [published; sim/published - 1]\n%-10s", load, "workload");
  for (const std::string& p : policies) std::printf(" %24s", p.c_str());
  std::printf(" %10s\n", "pollux(pub)");
  json jw = json::array();
  std::map<std::string, PolicyTotals> tot;
  const PublishedJct* pp = published_jct("pollux", load);
  for (int w = 1; w <= 8; ++w) {
    std::printf("%-10d", w);
    json jr = {{"workload", w}};
    for (const std::string& p : policies) {
      const ClusterRun& r = find_run(w, p);
      PolicyTotals& t = tot[p];
      t.jct_sum += r.r.avg_jct_s;
      t.restarts += r.r.restarts;
      t.jobs += static_cast<int>(r.r.jobs.size());
      t.plan_ms += r.r.plan_ms_avg * r.r.plans;
      t.plans += r.r.plans;
      t.plan_max = std::max(t.plan_max, r.r.plan_ms_max);
      t.wall += r.wall_s;
      const PublishedJct* pub = published_jct(p, load);
      const double pw = pub ? pub->per_workload[w - 1] : 0.0;
      std::printf(" %24s", jct_cell(r.r.avg_jct_s, pub, pw).c_str());
      jr[p] = {{"avg_jct_s", r.r.avg_jct_s}, {"finished", r.r.finished}, {"jobs", r.r.jobs.size()},
               {"restarts", r.r.restarts}, {"restarts_per_job", r.r.restarts_per_job},
               {"utilisation", r.r.utilisation}, {"makespan_s", r.r.makespan_s}};
      if (pw > 0) jr[p]["published_s"] = pw;
    }
    if (pp && pp->per_workload[w - 1] > 0) std::printf(" %10.0f", pp->per_workload[w - 1]);
    std::printf("\n");
    jw.push_back(jr);
  }
  std::printf("%-10s", "mean");
  json jm;
  for (const std::string& p : policies) {
    const PolicyTotals& t = tot[p];
    const double m = t.jct_sum / 8;
    const PublishedJct* pub = published_jct(p, load);
    std::printf(" %24s", jct_cell(m, pub, pub ? pub->mean : 0.0).c_str());
    jm[p] = {{"mean_avg_jct_s", m},
             {"restarts_per_job", double(t.restarts) / std::max(1, t.jobs)},
             {"plan_ms_avg", t.plans ? t.plan_ms / t.plans : 0.0},
             {"plan_ms_max", t.plan_max},
             {"sim_wall_s", t.wall}};
    if (pub) jm[p]["published_mean_s"] = pub->mean;
  }
  if (pp) std::printf(" %10.0f", pp->mean);
  std::printf("\n");
  if (pp)
    for (const std::string& p : policies)
      std::printf("  %-14s vs Pollux (published %.0f s): %+.1f%%\n", p.c_str(), pp->mean, 100 * (tot[p].jct_sum / 8 / pp->mean - 1));
  std::printf("%-14s %16s %14s %14s %12s\n", "policy", "restarts/job", "plan_ms_avg", "plan_ms_max", "sim_wall_s");
  for (const std::string& p : policies) {
    const PolicyTotals& t = tot[p];
    std::printf("%-14s %16.2f %14.3f %14.3f %12.2f\n", p.c_str(), double(t.restarts) / std::max(1, t.jobs),
                t.plans ? t.plan_ms / t.plans : 0.0, t.plan_max, t.wall);
  }
  return {{"load", load}, {"workloads", jw}, {"mean", jm}, {"pollux_published_mean_s", pp ? pp->mean : 0.0}};
}

int compare_published(const cli::Options& o, const char* argv0) {
  fs::path wl = o.str("workloads"), prof = o.str("profiles");
  if (wl.empty() && !prof.empty()) wl = prof.parent_path() / "pollux_workloads";
  if (wl.empty()) wl = share_file(argv0, "data/pollux_workloads", EDP_AUTOSCALE_DATA_SRC "/pollux_workloads");
  if (prof.empty()) prof = wl.parent_path() / "model_profiles";
  if (!fs::exists(wl / "workloads" / "workload-1.csv"))
    throw DataError("--compare-published: no workloads/workload-1.csv under '" + wl.string() +
                    "' (give --workloads DIR, the pollux_workloads folder)");
  const ClusterProfiles profiles = ClusterProfiles::load(prof.string());
  const std::vector<std::string> policies = policies_or(o, "tiresias,optimus,goodput");
  for (const std::string& p : policies) parse_policy(p, PolicyScope::Cluster);  // fail early on a bad name
  std::vector<double> loads;
  for (const std::string& x : split(o.str("job-loads"))) {
    char* end = nullptr;
    const double v = std::strtod(x.c_str(), &end);
    if (*end || !(v > 0)) throw DataError("--job-loads: expected positive numbers, got '" + x + "'");
    loads.push_back(v);
  }
  ClusterSimConfig base;
  base.interval_s = o.f64("interval");
  base.restart_s = default_pause(o);
  // The node-level policies have their own default hysteresis (cluster_sim.h); the flag's
  // default belongs to the pool simulator.
  if (o.given("rescale-penalty")) base.policy_cfg.hysteresis = o.f64("rescale-penalty");
  base.policy_cfg.margin_s = o.f64("change-margin");
  base.policy_cfg.pause_per_gpu = o.f64("pause-per-gpu");
  if (o.given("learn-fixed-share")) base.policy_cfg.fixed_share = o.f64("learn-fixed-share");
  if (o.given("learn-trust-half")) base.policy_cfg.trust_half = o.f64("learn-trust-half");
  std::vector<ClusterRun> runs;
  std::vector<std::vector<std::vector<ClusterJob>>> jobs(loads.size());
  for (size_t l = 0; l < loads.size(); ++l) {
    char dir[64];
    if (std::abs(loads[l] - 1.0) < 1e-9) std::snprintf(dir, sizeof dir, "workloads");
    else std::snprintf(dir, sizeof dir, "workloads-%.1f", loads[l]);
    for (int w = 1; w <= 8; ++w) {
      const fs::path f = wl / dir / ("workload-" + std::to_string(w) + ".csv");
      if (!fs::exists(f)) throw DataError("--compare-published: missing " + f.string());
      jobs[l].push_back(load_cluster_workload(f.string()));
      for (const std::string& p : policies) runs.push_back(ClusterRun{loads[l], w, p, {}, 0});
    }
  }
  auto one = [&](size_t i) {
    ClusterRun& run = runs[i];
    ClusterSimConfig cfg = base;
    cfg.policy = run.policy;
    const size_t l = static_cast<size_t>(std::find(loads.begin(), loads.end(), run.load) - loads.begin());
    const auto t0 = std::chrono::steady_clock::now();
    run.r = simulate_cluster(jobs[l][size_t(run.workload - 1)], profiles, cfg);
    run.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  run_parallel(runs.size(), static_cast<int>(o.i64("threads")), one,
      [&](size_t i) {
        return runs[i].policy + " load " + std::to_string(runs[i].load) + " workload-" + std::to_string(runs[i].workload);
      });
  std::printf("node-level simulator: %d nodes x %d GPUs, %.0f s interval, %.0f s pause per allocation change\n",
              base.nodes, base.gpus_per_node, base.interval_s, base.restart_s);
  json jl = json::array();
  for (double load : loads) jl.push_back(print_load(load, policies, runs));
  const json out = {{"nodes", base.nodes}, {"gpus_per_node", base.gpus_per_node}, {"interval_s", base.interval_s},
                    {"pause_s", base.restart_s}, {"policies", policies}, {"loads", jl}};
  std::printf("%s\n", out.dump().c_str());
  if (!o.str("out").empty()) {
    files::make_dir(o.str("out"), "--out");
    files::write_atomic((fs::path(o.str("out")) / "compare_published.json").string(), out.dump(2) + "\n");
    // Per run, every job: what the averages are made of.
    for (const ClusterRun& run : runs) {
      char name[96];
      std::snprintf(name, sizeof name, "jobs_%s_load%.1f_workload-%d.csv", run.policy.c_str(), run.load, run.workload);
      std::ostringstream f;
      f << "name,model,submit_s,start_s,finish_s,jct_s,restarts,gpu_seconds\n";
      for (const ClusterJobResult& j : run.r.jobs)
        f << j.name << "," << j.app << "," << j.submit_s << "," << j.start_s << "," << j.finish_s << ","
          << (j.finished() ? j.finish_s - j.submit_s : -1.0) << "," << j.restarts << "," << j.gpu_seconds << "\n";
      files::write_atomic((fs::path(o.str("out")) / name).string(), f.str());
    }
  }
  return 0;
}

// ---- simulate --sia ------------------------------------------------------------------------

// Sia's workloads on its cluster of several GPU types in the node-level simulator: each type's
// tables from the artifact (ClusterProfiles::load_sia), edp's policy deciding over the types.
int simulate_sia(const cli::Options& o) {
  fs::path sim = o.str("sia");
  if (fs::is_directory(sim / "sia-simulator")) sim /= "sia-simulator";
  if (!fs::is_directory(sim / "traces") || !fs::is_directory(sim / "workloads"))
    throw DataError("--sia: '" + o.str("sia") + "' has no traces/ and workloads/ (a checkout of siasosp23/artifacts, "
                    "or its sia-simulator/)");
  const std::vector<ClusterNodeType> types = sia_cluster(o.str("cluster"));
  std::vector<ClusterProfiles> tables;
  for (const ClusterNodeType& t : types) tables.push_back(ClusterProfiles::load_sia(sim.string(), t.name));
  std::vector<const ClusterProfiles*> profiles;
  for (const ClusterProfiles& p : tables) profiles.push_back(&p);
  const std::vector<std::string> policies = policies_or(o, "goodput");
  for (const std::string& p : policies) {
    const PolicyKind k = parse_policy(p, PolicyScope::Cluster);  // fail early on a bad name
    if (k != PolicyKind::Goodput && k != PolicyKind::GoodputOracle)
      throw DataError("--sia: policy '" + p + "' does not take GPU types (goodput or goodput-oracle do)");
  }
  ClusterSimConfig base;
  base.types = types;
  base.interval_s = o.f64("interval");
  if (o.given("rescale-penalty")) base.policy_cfg.hysteresis = o.f64("rescale-penalty");
  // edp's settings on Sia's cluster (sia_policy.py's defaults; chosen on its philly and saturn
  // workloads in this simulator, docs/autoscaler.md §9): a change must save 300 s beyond its pause,
  // a running job's pause counts (1 + its GPUs) times, and the learning priors bolder than on one
  // type, where restarts of up to 250 s make each cautious step of growth cost more.
  base.policy_cfg.margin_s = o.given("change-margin") ? o.f64("change-margin") : 300;
  base.policy_cfg.pause_per_gpu = o.given("pause-per-gpu") ? o.f64("pause-per-gpu") : 1.0;
  base.policy_cfg.fixed_share = o.given("learn-fixed-share") ? o.f64("learn-fixed-share") : 0.75;
  base.policy_cfg.trust_half = o.given("learn-trust-half") ? o.f64("learn-trust-half") : 0.25;
  struct SiaRun {
    std::string trace;
    int workload;
    std::string policy;
    const std::vector<ClusterJob>* jobs;
    ClusterSimResult r;
    double wall_s = 0;
  };
  std::vector<std::vector<ClusterJob>> loaded;
  std::vector<std::pair<std::string, int>> names;
  for (const std::string& tr : split(o.str("sia-traces"))) {
    if (tr.empty() || tr.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") != std::string::npos)
      throw DataError("--sia-traces: trace names are folders of workloads/ (philly, saturn, newtrace, rate_10, ...), got '" +
                      tr + "'");
    const fs::path dir = sim / "workloads" / (tr.rfind("rate_", 0) == 0 ? "scale/" + tr : tr);
    for (const std::string& w : split(o.str("sia-workloads"))) {
      if (w.empty() || w.find_first_not_of("0123456789") != std::string::npos || w.size() > 6)
        throw DataError("--sia-workloads: expected workload numbers, got '" + w + "'");
      const fs::path f = dir / ("workload-" + w + ".csv");
      if (!fs::is_regular_file(f)) throw DataError("--sia: no workload " + f.string());
      std::vector<ClusterJob> jobs = load_cluster_workload(f.string());
      if (o.given("limit") && jobs.size() > size_t(o.i64("limit"))) {
        std::stable_sort(jobs.begin(), jobs.end(), [](const ClusterJob& a, const ClusterJob& b) { return a.submit_s < b.submit_s; });
        jobs.resize(size_t(o.i64("limit")));
      }
      for (const ClusterJob& j : jobs)
        for (size_t t = 0; t < types.size(); ++t)
          if (std::none_of(tables[t].apps().begin(), tables[t].apps().end(), [&](const ClusterApp& a) { return a.name == j.app; }))
            throw DataError(f.string() + ": job " + j.name + "'s model '" + j.app + "' has no tables of GPU type '" +
                            types[t].name + "' under " + (sim / "traces").string());
      loaded.push_back(std::move(jobs));
      names.emplace_back(tr, std::stoi(w));
    }
  }
  std::vector<SiaRun> runs;
  for (size_t k = 0; k < loaded.size(); ++k)
    for (const std::string& p : policies) runs.push_back(SiaRun{names[k].first, names[k].second, p, &loaded[k], {}, 0});
  auto one = [&](size_t i) {
    SiaRun& run = runs[i];
    ClusterSimConfig cfg = base;
    cfg.policy = run.policy;
    const auto t0 = std::chrono::steady_clock::now();
    run.r = simulate_cluster(*run.jobs, profiles, cfg);
    run.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  run_parallel(runs.size(), static_cast<int>(o.i64("threads")), one, [&](size_t i) {
    return runs[i].policy + " " + runs[i].trace + " workload-" + std::to_string(runs[i].workload);
  });
  std::printf("node-level simulator with GPU types (%s), %.0f s interval, each model's restart delay\n",
              o.str("cluster").c_str(), base.interval_s);
  std::printf("%-10s %-9s %-16s %8s %10s %12s %14s %12s %8s\n", "trace", "workload", "policy", "jobs", "avg JCT s",
              "restarts/job", "type chg/job", "GPU-h/job", "wall s");
  json jr = json::array();
  for (const SiaRun& run : runs) {
    double gpu_s = 0;
    int changes = 0;
    for (const ClusterJobResult& j : run.r.jobs) {
      gpu_s += j.gpu_seconds;
      changes += j.type_changes;
    }
    const double n = std::max<double>(1, double(run.r.jobs.size()));
    json by_app = json::object();  // per model: jobs, average JCT, restarts and GPU-hours per job
    for (const ClusterJobResult& j : run.r.jobs) {
      json& m = by_app[j.app];
      if (m.is_null()) m = {{"jobs", 0}, {"avg_jct_s", 0.0}, {"restarts_per_job", 0.0}, {"gpu_hours_per_job", 0.0}};
      m["jobs"] = m["jobs"].get<int>() + 1;
      m["avg_jct_s"] = m["avg_jct_s"].get<double>() + (j.finished() ? j.finish_s - j.submit_s : 0.0);
      m["restarts_per_job"] = m["restarts_per_job"].get<double>() + j.restarts;
      m["gpu_hours_per_job"] = m["gpu_hours_per_job"].get<double>() + j.gpu_seconds / 3600;
    }
    for (auto& [name, m] : by_app.items())
      for (const char* k : {"avg_jct_s", "restarts_per_job", "gpu_hours_per_job"}) m[k] = m[k].get<double>() / m["jobs"].get<int>();
    std::printf("%-10s %-9d %-16s %8zu %10.0f %12.2f %14.2f %12.2f %8.1f\n", run.trace.c_str(), run.workload,
                run.policy.c_str(), run.r.jobs.size(), run.r.avg_jct_s, run.r.restarts_per_job, changes / n,
                gpu_s / 3600 / n, run.wall_s);
    jr.push_back({{"trace", run.trace}, {"workload", run.workload}, {"policy", run.policy}, {"jobs", run.r.jobs.size()},
                  {"finished", run.r.finished}, {"avg_jct_s", run.r.avg_jct_s}, {"restarts_per_job", run.r.restarts_per_job},
                  {"type_changes_per_job", changes / n}, {"gpu_hours_per_job", gpu_s / 3600 / n},
                  {"makespan_s", run.r.makespan_s}, {"plan_ms_avg", run.r.plan_ms_avg}, {"plan_ms_max", run.r.plan_ms_max},
                  {"by_app", by_app}, {"wall_s", run.wall_s}});
  }
  const json out = {{"cluster", o.str("cluster")}, {"interval_s", base.interval_s}, {"runs", jr}};
  std::printf("%s\n", out.dump().c_str());
  if (!o.str("out").empty()) {
    files::make_dir(o.str("out"), "--out");
    files::write_atomic((fs::path(o.str("out")) / "simulate_sia.json").string(), out.dump(2) + "\n");
  }
  return 0;
}

}  // namespace

int cmd_simulate(int argc, char** argv, const char* argv0) {
  cli::Options o = options_for(
      "simulate",
      "Simulates the policies on a trace (pool simulator: per-job CSVs, summary JSON, timelines, plots in --out), or "
      "with --compare-published the Pollux workloads in the node-level simulator next to the published JCTs, or with "
      "--sia DIR Sia's workloads on a cluster of several GPU types.",
      {"trace", "poisson", "poisson-rate", "profiles", "policy", "gpus", "sweep", "out", "pause", "slot-kind",
       "sim-replan", "rescale-penalty", "weighting", "max-scale", "own-batch", "window", "limit", "seed",
       "restart-aware", "statistical-efficiency", "max-ranks-per-gpu", "colocation-idle", "allocations", "threads",
       "no-plots", "plot-script", "quiet", "compare-published", "workloads", "job-loads", "interval", "change-margin",
       "pause-per-gpu", "sia", "sia-traces", "sia-workloads", "cluster", "learn-fixed-share", "learn-trust-half"});
  if (const int rc = parse(o, argc, argv); rc >= 0) return rc;
  if (o.flag("compare-published")) return compare_published(o, argv0);
  if (!o.str("sia").empty()) return simulate_sia(o);
  if (o.str("out").empty()) throw DataError("simulate needs --out DIR");
  const fs::path out = o.str("out");
  if (cluster_sizes(o).empty()) throw DataError("simulate needs --gpus N or --sweep A,B,...");
  for (const std::string& p : policies_or(o, "static,baseline,dp")) parse_policy(p, PolicyScope::Pool);  // fail early
  files::make_dir(out.string(), "--out");
  std::vector<TraceJob> trace;
  std::vector<ModelProfile> profiles;
  load_inputs(o, trace, profiles);
  write_profiles_fit(out, profiles);
  const SimConfig base = sim_config(o);
  const std::vector<SimRun> runs = run_simulations(o, trace, profiles, base, out);
  write_summary(o, out, trace.size(), base, runs);
  print_sim_table(runs, base.window_s);
  if (!o.flag("no-plots")) draw_plots(o, argv0, out);
  return 0;
}

// ---- workload -----------------------------------------------------------------------------

namespace {

struct Bounds {
  std::vector<std::string> models;  // by own GPU-hours, ascending
  std::map<std::string, int> jobs;
  std::map<std::string, double> own_gpu_h;
  double own_total = 0;
  std::vector<double> min_total, jct_total;  // per policy
};

// What each policy's options alone allow (job_bounds), per model and in total; prints the table.
json model_bounds(const std::vector<std::string>& policies, const std::vector<std::vector<JobBound>>& bounds, size_t N,
                  Bounds& b) {
  for (const JobBound& x : bounds[0]) {
    if (!b.jobs.count(x.model)) b.models.push_back(x.model);
    ++b.jobs[x.model];
    b.own_gpu_h[x.model] += x.own_gpu_s / 3600;
    b.own_total += x.own_gpu_s / 3600;
  }
  std::sort(b.models.begin(), b.models.end(), [&](const auto& x, const auto& y) { return b.own_gpu_h[x] < b.own_gpu_h[y]; });
  std::printf("work by model (GPU-h at the jobs' own configurations) and per policy: min GPU-h / contribution to the\n"
              "unlimited-cluster avg JCT (h)\n%-12s %6s %10s %6s", "model", "jobs", "own_GPU-h", "share");
  for (const auto& p : policies) std::printf(" %22s", p.c_str());
  std::printf("\n");
  json jmodels = json::array();
  b.min_total.assign(policies.size(), 0);
  b.jct_total.assign(policies.size(), 0);
  for (const std::string& m : b.models) {
    std::printf("%-12s %6d %10.0f %6.3f", m.c_str(), b.jobs[m], b.own_gpu_h[m], b.own_gpu_h[m] / b.own_total);
    json jm = {{"model", m}, {"jobs", b.jobs[m]}, {"own_gpu_h", b.own_gpu_h[m]}};
    for (size_t k = 0; k < policies.size(); ++k) {
      double g = 0, t = 0;
      for (const JobBound& x : bounds[k])
        if (x.model == m) {
          g += x.min_gpu_s / 3600;
          t += x.min_time_s / 3600 / static_cast<double>(N);
        }
      b.min_total[k] += g;
      b.jct_total[k] += t;
      std::printf(" %12.0f / %7.3f", g, t);
      jm[policies[k]] = {{"min_gpu_h", g}, {"unlimited_avg_jct_h", t}};
    }
    std::printf("\n");
    jmodels.push_back(jm);
  }
  std::printf("%-12s %6zu %10.0f %6.3f", "total", N, b.own_total, 1.0);
  for (size_t k = 0; k < policies.size(); ++k) std::printf(" %12.0f / %7.3f", b.min_total[k], b.jct_total[k]);
  std::printf("\n");
  return jmodels;
}

// Offered load per cluster size: all the work over the window, and the demand inside the window if
// every job ran at its own configuration from its submission (the trace README's "unqueued demand").
json size_loads(const cli::Options& o, const std::vector<TraceJob>& trace, const std::vector<std::string>& policies,
                const Bounds& b, double& demand) {
  const double window = o.f64("window");
  double in_window = 0;
  for (const TraceJob& j : trace)
    in_window += j.gpus * std::max(0.0, std::min(window, j.submit_s + j.duration_s) - std::min(window, j.submit_s));
  demand = in_window / window;
  const std::vector<int> sizes = cluster_sizes(o);
  std::printf("\nunqueued demand in the window: %.1f GPUs on average; all work = %.1f GPUs x window\n", demand,
              b.own_total * 3600 / window);
  json jsizes = json::array();
  if (!sizes.empty()) {
    std::printf("%6s %14s %16s", "gpus", "demand/gpus", "all_work/gpus");
    for (const auto& p : policies) std::printf(" %12s", ("min_" + p).c_str());
    std::printf("   (load = GPU-hours / (gpus x window))\n");
  }
  for (int g : sizes) {
    const double cap_h = g * window / 3600;
    std::printf("%6d %14.2f %16.2f", g, demand / g, b.own_total / cap_h);
    json js = {{"gpus", g}, {"demand_load", demand / g}, {"work_load", b.own_total / cap_h}};
    for (size_t k = 0; k < policies.size(); ++k) {
      std::printf(" %12.2f", b.min_total[k] / cap_h);
      js["min_load_" + policies[k]] = b.min_total[k] / cap_h;
    }
    std::printf("\n");
    jsizes.push_back(js);
  }
  return jsizes;
}

}  // namespace

// How loaded each cluster size is, and what each policy's options alone allow (job_bounds):
// the fewest GPU-hours the work needs (what matters on a saturated cluster) and the average JCT
// on an unlimited cluster (what scaling alone can give). No simulation; a second or so.
int cmd_workload(int argc, char** argv) {
  cli::Options o = options_for("workload",
                               "A trace's offered load per cluster size and what each policy's options alone allow "
                               "(fewest GPU-hours, unlimited-cluster average JCT). No simulation.",
                               {"trace", "poisson", "poisson-rate", "profiles", "policy", "gpus", "sweep", "max-scale",
                                "own-batch", "window", "limit", "seed", "statistical-efficiency"});
  if (const int rc = parse(o, argc, argv); rc >= 0) return rc;
  std::vector<TraceJob> trace;
  std::vector<ModelProfile> profiles;
  load_inputs(o, trace, profiles);
  if (trace.empty()) throw DataError("workload: no jobs");
  SimConfig cfg;
  cfg.max_scale = static_cast<int>(o.i64("max-scale"));
  cfg.own_batch = own_batch_of(o);
  cfg.seed = static_cast<uint64_t>(o.i64("seed"));
  cfg.statistical_efficiency = o.flag("statistical-efficiency");
  const std::vector<std::string> policies = policies_or(o, "static,baseline,dp");
  std::vector<std::vector<JobBound>> bounds;
  for (const std::string& p : policies) {
    cfg.policy = p;
    bounds.push_back(job_bounds(trace, profiles, cfg));
  }
  Bounds b;
  const json jmodels = model_bounds(policies, bounds, trace.size(), b);
  double demand = 0;
  const json jsizes = size_loads(o, trace, policies, b, demand);
  json jp = json::array();
  for (size_t k = 0; k < policies.size(); ++k)
    jp.push_back({{"policy", policies[k]}, {"min_gpu_h", b.min_total[k]}, {"unlimited_avg_jct_h", b.jct_total[k]}});
  const json line = {{"workload", trace_name(o)}, {"jobs", trace.size()}, {"own_gpu_h", b.own_total},
                     {"demand_gpus", demand},     {"max_scale", cfg.max_scale}, {"own_batch", o.str("own-batch")},
                     {"seed", cfg.seed},          {"policies", jp},      {"models", jmodels},
                     {"sizes", jsizes}};
  std::printf("%s\n", line.dump().c_str());
  return 0;
}

}  // namespace edp::autoscale_tool
