// Solve time of the exact DP optimizer (edp::autoscale::solve) on one core, for the sizes the
// autoscaler must handle: 64 jobs x 64 GPUs (target <= 1 ms) and 1000 jobs x 4096 GPUs (target
// <= 50 ms). Each job's raw options are every (GPUs, batch) pair its model allows: GPU counts
// 1..max_gpus (or powers of two), batches from the model's per-GPU grid (4-11 per GPU count),
// valued by the step-time model of three model shapes (synthetic_model_profiles, so the bench
// needs no data files). The envelope/pruning work is included in the time. decide_ms: the same
// instance through plan.h's decide() (the request's checks and the valuation of every option on
// top of the solve), which is what plan, the simulators and serve call. Then solve_typed on
// several GPU types: the same instance (64 jobs x 64 GPUs of 3 types, exact; 1000 jobs x 4096
// GPUs of 4 types, decomposed), and the exact cases over --instances random instances, with the
// pruning (the default) and without it ("exact-dense", which must give the same choices: the
// bench stops with an error if not), as the spread of the per-instance medians.
//
//   bench_autoscale_solve [--reps N] [--instances N] [--only NAME]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "edp/autoscale/optimizer.h"
#include "edp/autoscale/plan.h"
#include "edp/autoscale/throughput.h"
#include "edp/autoscale/typed_optimizer.h"
#include "edp/core/cli.h"
#include "edp/core/random.h"

using namespace edp::autoscale;

namespace {

struct Case {
  const char* name;
  int jobs;
  int gpus;
  int max_gpus;      // per job
  bool pow2;         // GPU counts restricted to powers of two
};

std::vector<DpJob> make_instance(const Case& c, uint64_t seed, long* raw_options) {
  const auto models = synthetic_model_profiles();
  edp::Rng rng(seed);
  std::vector<DpJob> jobs(static_cast<size_t>(c.jobs));
  *raw_options = 0;
  for (auto& j : jobs) {
    const ModelProfile& m = models[rng.below(models.size())];
    const int req = 1 << rng.below(3);  // 1, 2 or 4 GPUs at its own batch
    const int ref_batch = m.init_batch * req;
    const double ref = m.model.samples_per_s(req, std::min(ref_batch, m.max_local * req));
    for (int g = 1; g <= c.max_gpus; g = c.pow2 ? g * 2 : g + 1)
      for (int B : candidate_batches(m, g, m.init_batch, m.max_batch)) {
        j.options.push_back(Option{g, B, m.model.samples_per_s(g, B) / ref});
        ++*raw_options;
      }
    // Half the jobs run now (somewhere in their range): exercises the tie-break path.
    if (rng.uniform() < 0.5 && !j.options.empty()) {
      const Option& o = j.options[rng.below(j.options.size())];
      j.current_gpus = o.gpus;
      j.current_batch = o.batch;
    }
  }
  return jobs;
}

// The same instance as a request of plan.h (objective throughput with own.samples_per_s = 1, so
// that every option's value is the instance's): what every caller of the autoscaler now times, the
// valuation and the request's checks included.
PlanRequest as_request(const std::vector<DpJob>& jobs, int gpus) {
  PlanRequest r;
  r.gpus = gpus;
  r.objective = Objective::Throughput;
  r.hysteresis = 0;
  for (const DpJob& j : jobs) {
    PlanJob p;
    p.own = Config{1, 1, 1, 1.0, 1.0};
    if (j.current_gpus > 0) p.current = Config{j.current_gpus, j.current_batch, 1, 0, 1.0};
    for (const Option& o : j.options) p.options.push_back(Config{o.gpus, o.batch, 1, o.value, 1.0});
    r.jobs.push_back(std::move(p));
  }
  return r;
}

// A cluster of several GPU types: each job's options on each type are the one-type instance's,
// at that type's speed for the job's model (types differ per model: a model gains more from a
// faster type when it is compute-bound), GPU counts up to max_gpus on each type.
struct TypedCase {
  const char* name;
  int jobs;
  std::vector<int> capacity;
  int max_gpus;
  bool pow2;
};

std::vector<TypedJob> make_typed(const TypedCase& c, uint64_t seed) {
  const auto models = synthetic_model_profiles();
  edp::Rng rng(seed);
  const size_t K = c.capacity.size();
  std::vector<TypedJob> jobs(static_cast<size_t>(c.jobs));
  for (auto& j : jobs) {
    const ModelProfile& m = models[rng.below(models.size())];
    const int req = 1 << rng.below(3);
    const double ref = m.model.samples_per_s(req, std::min(m.init_batch * req, m.max_local * req));
    std::vector<double> speed(K);
    for (size_t t = 0; t < K; ++t) speed[t] = (t == 0 ? 1.0 : 1.0 / (1.0 + 0.6 * static_cast<double>(t))) * (0.8 + 0.4 * rng.uniform());
    const size_t cur_type = rng.below(K);
    for (size_t t = 0; t < K; ++t)
      for (int g = 1; g <= std::min(c.max_gpus, c.capacity[t]); g = c.pow2 ? g * 2 : g + 1)
        for (int B : candidate_batches(m, g, m.init_batch, m.max_batch)) {
          TypedOption o;
          o.gpus.assign(K, 0);
          o.gpus[t] = g;
          o.batch = B;
          o.value = speed[t] * m.model.samples_per_s(g, B) / ref;
          j.options.push_back(std::move(o));
        }
    if (rng.uniform() < 0.5) {  // half the jobs run now, on some type
      std::vector<size_t> there;
      for (size_t i = 0; i < j.options.size(); ++i)
        if (j.options[i].gpus[cur_type] > 0) there.push_back(i);
      if (!there.empty()) j.options[there[rng.below(there.size())]].current = true;
    }
  }
  return jobs;
}

double median_ms(std::vector<double>& ms) {
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  edp::cli::Options o("bench_autoscale_solve", "Times the exact DP optimizer (solve) on the autoscaler's sizes.");
  o.add("reps", "20", "repetitions per case (median and min are reported)").int_range(1, 100000);
  o.add("instances", "30", "random instances of each exact typed case (their spread is reported)").int_range(1, 10000);
  o.add("only", "", "run only the cases whose name contains this");
  o.parse(argc, argv);
  const int reps = static_cast<int>(o.i64("reps"));
  const int instances = static_cast<int>(o.i64("instances"));
  const std::string only = o.str("only");
  auto wanted = [&](const char* name) { return only.empty() || std::string(name).find(only) != std::string::npos; };
  const Case cases[] = {
      {"64x64_all_g<=16", 64, 64, 16, false},
      {"64x64_all_g<=64", 64, 64, 64, false},
      {"1000x4096_pow2_g<=64", 1000, 4096, 64, true},
      {"1000x4096_all_g<=16", 1000, 4096, 16, false},
      {"1000x4096_all_g<=64", 1000, 4096, 64, false},
  };
  std::printf("edp autoscale DP solve time (single thread, %d reps, median and min)\n", reps);
  std::printf("%-24s %6s %6s %11s %13s %11s %11s %9s %11s\n", "case", "jobs", "gpus", "raw_opts/j", "cells", "median_ms",
              "min_ms", "objective", "decide_ms");
  std::string json = "{\"bench\":\"autoscale_solve\",\"reps\":" + std::to_string(reps) + ",\"cases\":[";
  bool first = true;
  for (const Case& c : cases) {
    if (!wanted(c.name)) continue;
    long raw = 0;
    const auto jobs = make_instance(c, 42, &raw);
    std::vector<double> ms;
    Solution s;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      s = solve(jobs, c.gpus);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    const double med = median_ms(ms), mn = ms.front();
    // The same through decide() (median over reps; its plan must have the solve's objective).
    const PlanRequest req = as_request(jobs, c.gpus);
    Planner planner;
    std::vector<double> dms;
    double dobj = 0;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      dobj = planner.decide(req).objective;
      dms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    if (dobj != s.objective) std::fprintf(stderr, "decide() and solve() disagree on %s: %g vs %g\n", c.name, dobj, s.objective);
    const double dmed = median_ms(dms);
    std::printf("%-24s %6d %6d %11.1f %13lld %11.3f %11.3f %9.2f %11.3f\n", c.name, c.jobs, c.gpus,
                static_cast<double>(raw) / c.jobs, static_cast<long long>(s.cells), med, mn, s.objective, dmed);
    char buf[480];
    std::snprintf(buf, sizeof buf,
                  "%s{\"case\":\"%s\",\"jobs\":%d,\"gpus\":%d,\"max_gpus_per_job\":%d,\"pow2\":%s,"
                  "\"raw_options_per_job\":%.2f,\"cells\":%lld,\"median_ms\":%.4f,\"min_ms\":%.4f,"
                  "\"decide_median_ms\":%.4f}",
                  first ? "" : ",", c.name, c.jobs, c.gpus, c.max_gpus, c.pow2 ? "true" : "false",
                  static_cast<double>(raw) / c.jobs, static_cast<long long>(s.cells), med, mn, dmed);
    json += buf;
    first = false;
  }
  json += "],\"typed\":[";
  // Several GPU types (typed_optimizer.h): the exact product DP where it fits, else the
  // decomposition, whose gap to its bound is reported.
  const TypedCase typed[] = {
      {"64x64_3types_g<=16", 64, {32, 16, 16}, 16, false},
      {"64x64_3types_pow2", 64, {32, 16, 16}, 16, true},
      {"1000x4096_4types_pow2", 1000, {1024, 1024, 1024, 1024}, 64, true},
      {"1000x4096_4types_g<=16", 1000, {1024, 1024, 1024, 1024}, 16, false},
  };
  std::printf("\nseveral GPU types (solve_typed)\n%-24s %6s %16s %11s %11s %11s %12s %9s\n", "case", "jobs",
              "gpus by type", "method", "median_ms", "min_ms", "objective", "gap_%");
  first = true;
  for (const TypedCase& c : typed) {
    if (!wanted(c.name)) continue;
    const auto jobs = make_typed(c, 42);
    std::vector<double> ms;
    TypedSolution s;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      s = solve_typed(jobs, c.capacity);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    const double med = median_ms(ms), mn = ms.front();
    std::string caps;
    for (int g : c.capacity) caps += (caps.empty() ? "" : "+") + std::to_string(g);
    const double gap = 100.0 * (s.bound - s.objective) / std::max(1e-12, s.bound);
    std::printf("%-24s %6d %16s %11s %11.3f %11.3f %12.2f %9.3f\n", c.name, c.jobs, caps.c_str(), s.method.c_str(),
                med, mn, s.objective, gap);
    char buf[480];
    std::snprintf(buf, sizeof buf,
                  "%s{\"case\":\"%s\",\"jobs\":%d,\"gpus\":\"%s\",\"method\":\"%s\",\"cells\":%lld,"
                  "\"median_ms\":%.4f,\"min_ms\":%.4f,\"objective\":%.6f,\"bound\":%.6f}",
                  first ? "" : ",", c.name, c.jobs, caps.c_str(), s.method.c_str(), static_cast<long long>(s.cells),
                  med, mn, s.objective, s.bound);
    json += buf;
    first = false;
  }
  // The exact cases over many instances (seeds 1..instances): per instance the median of the
  // repetitions, with pruning (the default) and without ("exact-dense"), which must agree.
  json += "],\"typed_instances\":[";
  std::printf("\nseveral GPU types, exact, over %d instances (per instance the median of %d reps)\n%-24s %12s %11s %11s %11s %9s %13s\n",
              instances, reps, "case", "method", "median_ms", "p90_ms", "max_ms", "<=1ms", "median_cells");
  first = true;
  for (const TypedCase& c : typed) {
    if (!wanted(c.name) || c.jobs > 64) continue;
    for (const char* method : {"exact", "exact-dense"}) {
      std::vector<double> med, cells;
      for (int i = 1; i <= instances; ++i) {
        const auto jobs = make_typed(c, static_cast<uint64_t>(i));
        std::vector<double> ms;
        TypedSolution s;
        for (int r = 0; r < reps; ++r) {
          const auto t0 = std::chrono::steady_clock::now();
          s = solve_typed(jobs, c.capacity, method);
          ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        med.push_back(median_ms(ms));
        cells.push_back(static_cast<double>(s.cells));
        if (std::string(method) == "exact-dense") {
          const TypedSolution pruned = solve_typed(jobs, c.capacity, "exact");
          bool same = pruned.objective == s.objective;
          for (size_t j = 0; j < jobs.size(); ++j) same = same && pruned.choices[j].option == s.choices[j].option;
          if (!same) {
            std::fprintf(stderr, "%s instance %d: the pruned and the dense DP disagree (%.17g vs %.17g)\n", c.name, i,
                         pruned.objective, s.objective);
            return 1;
          }
        }
      }
      std::sort(med.begin(), med.end());
      const double p50 = med[med.size() / 2], p90 = med[(med.size() * 9 + 9) / 10 - 1], top = med.back();
      const double c50 = median_ms(cells);
      const long fast = std::count_if(med.begin(), med.end(), [](double ms) { return ms <= 1.0; });
      std::printf("%-24s %12s %11.3f %11.3f %11.3f %9ld %13.0f\n", c.name, method, p50, p90, top, fast, c50);
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "%s{\"case\":\"%s\",\"method\":\"%s\",\"instances\":%d,\"median_ms\":%.4f,\"p90_ms\":%.4f,"
                    "\"max_ms\":%.4f,\"within_1ms\":%ld,\"median_cells\":%.0f}",
                    first ? "" : ",", c.name, method, instances, p50, p90, top, fast, c50);
      json += buf;
      first = false;
    }
  }
  json += "]}";
  std::printf("%s\n", json.c_str());
  return 0;
}
