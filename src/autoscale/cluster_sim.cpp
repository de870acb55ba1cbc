// The node-level simulator (cluster_sim.h): measured tables, job progress in scale-invariant
// iterations, 60-s scheduling intervals with a pause per allocation change, and the policies
// it is calibrated with (Tiresias, Optimus) next to edp's restart-aware DP.
#include "edp/autoscale/cluster_sim.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include "csv.h"
#include "edp/autoscale/goodput.h"
#include "edp/autoscale/plan.h"
#include "edp/autoscale/policy.h"
#include "edp/core/error.h"

namespace edp::autoscale {

// ---- placements and the measured tables --------------------------------------------------

std::vector<int> placement_of(const std::vector<int>& alloc) {
  std::vector<int> p;
  for (size_t i = 0; i < alloc.size(); ++i) {
    if (i == 0 || alloc[i] != alloc[i - 1]) p.push_back(1);
    else ++p.back();
  }
  return p;
}

std::string placement_key(std::vector<int> placement) {
  placement.erase(std::remove(placement.begin(), placement.end(), 0), placement.end());
  std::vector<int> best = placement;
  for (size_t r = 1; r < placement.size(); ++r) {
    std::rotate(placement.begin(), placement.begin() + 1, placement.end());
    if (placement < best) best = placement;
  }
  std::string k;
  for (int d : best) k += std::to_string(d);
  return k;
}

namespace {

// Linear interpolation in the per-GPU batch over rows sorted by local_bsz; clamped at the ends
// (the policies never ask outside the profiled range except by rounding).
std::pair<double, double> interp_b(const std::vector<StepPoint>& rows, double b) {
  EDP_CHECK(!rows.empty(), "interp_b: no rows");
  if (b <= rows.front().local_bsz) return {rows.front().step_s, rows.front().sync_s};
  if (b >= rows.back().local_bsz) return {rows.back().step_s, rows.back().sync_s};
  auto it = std::upper_bound(rows.begin(), rows.end(), b,
                             [](double x, const StepPoint& p) { return x < p.local_bsz; });
  const StepPoint& hi = *it;
  const StepPoint& lo = *(it - 1);
  const double f = (b - lo.local_bsz) / (hi.local_bsz - lo.local_bsz);
  return {lo.step_s + f * (hi.step_s - lo.step_s), lo.sync_s + f * (hi.sync_s - lo.sync_s)};
}

}  // namespace

std::pair<double, double> ClusterApp::step_sync(const std::vector<int>& placement, double local_bsz) const {
  const std::string key = placement_key(placement);
  EDP_CHECK(!key.empty(), "step_sync: empty placement for model ", name);
  if (auto it = placements.find(key); it != placements.end()) return interp_b(it->second, local_bsz);
  // Not profiled (more than 4 nodes): interpolate between the measured node counts, and at each
  // node count between its measured GPU counts (clamped to that level's range).
  int n = 0, g = 0;
  for (int x : placement)
    if (x > 0) {
      ++n;
      g += x;
    }
  n = std::min(n, 16);
  auto at_level = [&](int ln) {
    const std::vector<StepPoint>* lo = nullptr;
    const std::vector<StepPoint>* hi = nullptr;
    int glo = 0, ghi = 0;
    for (const auto& [ng, rows] : levels) {
      if (ng.first != ln) continue;
      if (ng.second <= g && (!lo || ng.second > glo)) {
        lo = &rows;
        glo = ng.second;
      }
      if (ng.second >= g && (!hi || ng.second < ghi)) {
        hi = &rows;
        ghi = ng.second;
      }
    }
    if (!lo) return interp_b(*hi, local_bsz);
    if (!hi || glo == ghi) return interp_b(*lo, local_bsz);
    const auto a = interp_b(*lo, local_bsz), b = interp_b(*hi, local_bsz);
    const double f = double(g - glo) / double(ghi - glo);
    return std::pair<double, double>{a.first + f * (b.first - a.first), a.second + f * (b.second - a.second)};
  };
  int nlo = 0, nhi = 0;
  for (const auto& [ng, rows] : levels) {
    if (ng.first <= n) nlo = std::max(nlo, ng.first);
    if (ng.first >= n && (nhi == 0 || ng.first < nhi)) nhi = ng.first;
  }
  EDP_CHECK(nlo > 0 || nhi > 0, "step_sync: model ", name, " has no throughput levels");
  if (nlo == 0) return at_level(nhi);
  if (nhi == 0 || nlo == nhi) return at_level(nlo);
  const auto a = at_level(nlo), b = at_level(nhi);
  const double f = double(n - nlo) / double(nhi - nlo);
  return {a.first + f * (b.first - a.first), a.second + f * (b.second - a.second)};
}

std::pair<double, double> ClusterApp::grad_stats(double batch, int epoch) const {
  EDP_CHECK(!validation.empty(), "grad_stats: model ", name, " has no convergence data");
  epoch = std::clamp(epoch, 0, max_epochs - 1);
  auto row = [&](const std::vector<EpochStats>& v) { return v[std::min<size_t>(size_t(epoch), v.size() - 1)]; };
  auto hi = validation.lower_bound(static_cast<int>(std::ceil(batch - 1e-9)));
  if (hi == validation.end()) {
    const EpochStats& r = row(validation.rbegin()->second);
    return {r.grad_sqr, r.grad_var};
  }
  if (hi == validation.begin() || hi->first == batch) {
    const EpochStats& r = row(hi->second);
    return {r.grad_sqr, r.grad_var};
  }
  auto lo = std::prev(hi);
  const EpochStats &a = row(lo->second), &b = row(hi->second);
  const double f = (batch - lo->first) / double(hi->first - lo->first);
  return {a.grad_sqr + f * (b.grad_sqr - a.grad_sqr), a.grad_var + f * (b.grad_var - a.grad_var)};
}

double ClusterApp::gain(double batch, int epoch) const {
  const auto [sqr, var] = grad_stats(batch, epoch);
  return statistical_gain(GradStats{sqr, var}, batch, init_batch);
}

double ClusterApp::iterations(double batch, int epoch) const {
  epoch = std::clamp(epoch, 0, max_epochs - 1);
  auto it_of = [&](const std::vector<EpochStats>& v) { return v[std::min<size_t>(size_t(epoch), v.size() - 1)].iteration; };
  auto hi = validation.lower_bound(static_cast<int>(std::ceil(batch - 1e-9)));
  if (hi == validation.end()) return it_of(validation.rbegin()->second);
  if (hi == validation.begin() || hi->first == batch) return it_of(hi->second);
  auto lo = std::prev(hi);
  const double f = (batch - lo->first) / double(hi->first - lo->first);
  return it_of(lo->second) + f * (it_of(hi->second) - it_of(lo->second));
}

ClusterProfiles ClusterProfiles::load(const std::string& dir) {
  ClusterProfiles out;
  {
    detail::CsvFile f(dir + "/model_limits.csv");
    const size_t cm = f.column("model"), ci = f.column("init_batch_size"), cx = f.column("max_batch_size"),
                 cl = f.column("min_local_bsz"), ch = f.column("max_local_bsz"), ce = f.column("max_epochs");
    for (size_t r = 0; r < f.rows(); ++r) {
      ClusterApp a;
      a.name = f.str(r, cm);
      a.init_batch = static_cast<int>(f.integer(r, ci));
      a.max_batch = static_cast<int>(f.integer(r, cx));
      a.min_local = static_cast<int>(f.integer(r, cl));
      a.max_local = static_cast<int>(f.integer(r, ch));
      a.max_epochs = static_cast<int>(f.integer(r, ce));
      if (a.init_batch < 1 || a.max_batch < a.init_batch || a.min_local < 1 || a.max_local < a.min_local ||
          a.max_epochs < 1)
        f.fail(r, ci, "inconsistent batch limits or epochs for model '" + a.name + "'");
      out.apps_.push_back(std::move(a));
    }
  }
  auto find = [&](const detail::CsvFile& f, size_t r, size_t c) -> ClusterApp& {
    for (ClusterApp& a : out.apps_)
      if (a.name == f.str(r, c)) return a;
    f.fail(r, c, "model '" + f.str(r, c) + "' is not in model_limits.csv");
  };
  // Averages of the placement rows per (nodes, GPUs, batch), for the level interpolation.
  std::map<std::tuple<std::string, int, int, double>, std::pair<StepPoint, int>> avg;
  {
    detail::CsvFile f(dir + "/throughput_placements.csv");
    const size_t cm = f.column("model"), cp = f.column("placement"), cl = f.column("local_bsz"),
                 ct = f.column("step_time_s"), cs = f.column("sync_time_s");
    for (size_t r = 0; r < f.rows(); ++r) {
      ClusterApp& a = find(f, r, cm);
      const std::string key = f.str(r, cp);
      std::vector<int> pl;
      for (char c : key) {
        if (c < '1' || c > '9') f.fail(r, cp, "expected a string of digits 1-9, got '" + key + "'");
        pl.push_back(c - '0');
      }
      if (pl.empty()) f.fail(r, cp, "empty placement");
      const StepPoint p{f.num(r, cl), f.num(r, ct), f.num(r, cs)};
      if (!(p.step_s > 0) || p.sync_s < 0) f.fail(r, ct, "step time must be > 0 and sync time >= 0");
      a.placements[placement_key(pl)].push_back(p);
      const int g = std::accumulate(pl.begin(), pl.end(), 0);
      auto& e = avg[{a.name, static_cast<int>(pl.size()), g, p.local_bsz}];
      e.first.local_bsz = p.local_bsz;
      e.first.step_s += p.step_s;
      e.first.sync_s += p.sync_s;
      ++e.second;
    }
  }
  for (auto& [k, e] : avg) {
    ClusterApp& a = const_cast<ClusterApp&>(out.app(std::get<0>(k)));
    a.levels[{std::get<1>(k), std::get<2>(k)}].push_back(
        StepPoint{e.first.local_bsz, e.first.step_s / e.second, e.first.sync_s / e.second});
  }
  {
    detail::CsvFile f(dir + "/throughput_scalability.csv");
    const size_t cm = f.column("model"), cn = f.column("num_nodes"), cg = f.column("num_gpus"),
                 cl = f.column("local_bsz"), ct = f.column("step_time_s"), cs = f.column("sync_time_s");
    for (size_t r = 0; r < f.rows(); ++r) {
      ClusterApp& a = find(f, r, cm);
      const int n = static_cast<int>(f.integer(r, cn)), g = static_cast<int>(f.integer(r, cg));
      if (n < 1 || g < n) f.fail(r, cg, "needs num_gpus >= num_nodes >= 1");
      a.levels[{n, g}].push_back(StepPoint{f.num(r, cl), f.num(r, ct), f.num(r, cs)});
    }
  }
  {
    detail::CsvFile f(dir + "/convergence_gradstats.csv");
    const size_t cm = f.column("model"), cb = f.column("batch_size"), ce = f.column("epoch"),
                 cp = f.column("progress"), ci = f.column("iteration"), cq = f.column("grad_sqr"),
                 cv = f.column("grad_var");
    for (size_t r = 0; r < f.rows(); ++r) {
      ClusterApp& a = find(f, r, cm);
      std::vector<EpochStats>& v = a.validation[static_cast<int>(f.integer(r, cb))];
      if (f.integer(r, ce) != static_cast<int64_t>(v.size()) + 1)
        f.fail(r, ce, "epochs of a (model, batch_size) must be 1, 2, 3, ... in order");
      v.push_back(EpochStats{f.num(r, cp), f.num(r, ci), f.num(r, cq), f.num(r, cv)});
    }
  }
  for (ClusterApp& a : out.apps_) {
    // yolov3's job code caps the per-GPU batch at 8 although 11 and 16 were profiled.
    if (a.name == "yolov3") a.max_local = std::min(a.max_local, 8);
    auto by_b = [](const StepPoint& x, const StepPoint& y) { return x.local_bsz < y.local_bsz; };
    std::set<int> grid;
    for (auto& [k, rows] : a.placements) {
      std::sort(rows.begin(), rows.end(), by_b);
      for (const StepPoint& p : rows) grid.insert(static_cast<int>(std::lround(p.local_bsz)));
    }
    for (auto& [k, rows] : a.levels) std::sort(rows.begin(), rows.end(), by_b);
    for (int b : grid)
      if (b >= a.min_local && b <= a.max_local) a.local_grid.push_back(b);
    EDP_CHECK(!a.placements.empty() && !a.validation.empty(), "model '", a.name,
              "' has no placement rows or no convergence rows in ", dir);
    a.epoch_progress.assign(1, 0.0);
    for (int e = 1; e <= a.max_epochs; ++e) {
      double m = std::numeric_limits<double>::infinity();
      for (const auto& [b, v] : a.validation) {
        EDP_CHECK(static_cast<int>(v.size()) >= e, "model '", a.name, "' batch ", b, ": only ", v.size(),
                  " epochs of convergence data, max_epochs is ", a.max_epochs);
        m = std::min(m, v[size_t(e - 1)].progress);
      }
      a.epoch_progress.push_back(m);
    }
  }
  return out;
}

const ClusterApp& ClusterProfiles::app(const std::string& name) const {
  for (const ClusterApp& a : apps_)
    if (a.name == name) return a;
  std::string known;
  for (const ClusterApp& a : apps_) known += (known.empty() ? "" : ", ") + a.name;
  throw Error("no model profile named '" + name + "' (known: " + known + ")");
}

BatchConfig fixed_batch_config(const ClusterApp& app, int replicas, int batch, bool force_single_gpu_accum) {
  EDP_CHECK(replicas >= 1 && batch >= 1, "fixed_batch_config: replicas and batch must be >= 1");
  return split_global_batch(replicas, batch, app.max_local, app.max_batch, force_single_gpu_accum);
}

namespace {

// The batch search's lower bound for a model: its initial batch, unless n GPUs cannot go that low.
int64_t lowest_batch(const ClusterApp& app, int n, int min_batch) {
  return int64_t{n} * app.min_local <= min_batch ? min_batch : 0;
}

}  // namespace

AdaptiveChoice best_adaptive(const ClusterApp& app, const std::vector<int>& placement, int epoch, bool by_goodput) {
  const int n = std::accumulate(placement.begin(), placement.end(), 0);
  EDP_CHECK(n >= 1, "best_adaptive: empty placement");
  auto eval = [&](int atomic, int accum) {
    const auto [step, sync] = app.step_sync(placement, atomic);
    const double total = accumulated_step_s(step, sync, accum);
    const double M = double(n) * atomic * (accum + 1);
    return AdaptiveChoice{atomic, accum, app.gain(M, epoch) / total, M / total};
  };
  if (app.name == "ncf") {  // the artifact fixes ncf's batch at 32768 for Pollux
    const BatchSplit c = split_batch(n, 32768, app.max_local, app.init_batch, app.max_batch, true);
    return eval(c.atomic, c.accum);
  }
  const int min_batch = std::min(app.init_batch, app.max_batch);
  const std::optional<AdaptiveChoice> best = best_batch<AdaptiveChoice>(
      app.local_grid, n, lowest_batch(app, n, min_batch), app.max_batch,
      [&](int atomic, int accum, int64_t) { return std::optional<AdaptiveChoice>(eval(atomic, accum)); },
      [&](const AdaptiveChoice& c) { return by_goodput ? c.goodput : c.samples_per_s; });
  // Nothing in range (n x min_local > max_batch): the smallest micro-batch.
  return best ? *best : eval(std::max(1, std::min(app.min_local, app.max_batch / n)), 0);
}

NamedBatch best_named_batch(const ClusterApp& app, const std::vector<int>& placement, int epoch) {
  const int n = std::accumulate(placement.begin(), placement.end(), 0);
  EDP_CHECK(n >= 1, "best_named_batch: empty placement");
  auto run = [&](int batch) {
    const BatchSplit sp = split_batch(n, batch, app.max_local, app.init_batch, app.max_batch, true);
    const auto [step, sync] = app.step_sync(placement, sp.atomic);
    const double total = accumulated_step_s(step, sync, sp.accum);
    const double M = double(n) * sp.atomic * (sp.accum + 1);
    return NamedBatch{static_cast<int>(M), AdaptiveChoice{sp.atomic, sp.accum, app.gain(M, epoch) / total, M / total}};
  };
  if (app.name == "ncf") return run(32768);  // the artifact fixes ncf's batch at 32768 for Pollux
  const std::optional<NamedBatch> best = best_batch<NamedBatch>(
      app.local_grid, n, lowest_batch(app, n, app.init_batch), app.max_batch,
      [&](int, int, int64_t M) { return std::optional<NamedBatch>(run(static_cast<int>(M))); },
      [](const NamedBatch& c) { return c.run.goodput; });
  return best ? *best : run(std::max(1, std::min(app.min_local, app.max_batch / n)) * n);
}

LearnSpec learn_spec_of(const ClusterApp& app, int max_gpus_per_job) {
  LearnSpec l;
  l.init_batch = app.init_batch;
  l.max_batch = app.max_batch;
  l.min_local = app.min_local;
  l.max_local = app.max_local;
  l.max_gpus = app.name == "ncf" ? 1 : max_gpus_per_job;
  l.fixed_batch = app.name == "ncf" ? 32768 : 0;
  l.accumulate_on_one_gpu = true;
  return l;
}

std::vector<ClusterJob> load_cluster_workload(const std::string& path) {
  detail::CsvFile f(path);
  const size_t cn = f.column("name"), ct = f.column("time"), ca = f.column("application"),
               cr = f.column("num_replicas"), cb = f.column("batch_size");
  std::vector<ClusterJob> out;
  for (size_t r = 0; r < f.rows(); ++r) {
    ClusterJob j;
    j.name = f.str(r, cn);
    j.submit_s = f.num(r, ct);
    j.app = f.str(r, ca);
    const int64_t g = f.integer(r, cr), b = f.integer(r, cb);
    if (j.submit_s < 0) f.fail(r, ct, "must be >= 0");
    if (g < 1 || g > 4096) f.fail(r, cr, "must be in [1, 4096]");
    if (b < 1 || b > (int64_t{1} << 30)) f.fail(r, cb, "must be a positive batch size");
    j.replicas = static_cast<int>(g);
    j.batch = static_cast<int>(b);
    out.push_back(std::move(j));
  }
  return out;
}

// ---- policies -----------------------------------------------------------------------------

namespace {

// Greedy "most free GPUs first" node choice (ties: lowest node id), the placement of the
// artifact's Tiresias and Optimus: fills the emptiest node, then the next.
std::vector<int> free_after(const std::vector<std::vector<int>>& allocs, int nodes, int gpn) {
  std::vector<int> free(size_t(nodes), gpn);
  for (const auto& a : allocs)
    for (int n : a) {
      EDP_CHECK(n >= 0 && n < nodes, "allocation names node ", n, " of ", nodes);
      --free[size_t(n)];
    }
  return free;
}

// Tiresias (Gu et al., NSDI'19), discretised 2D-LAS as the artifact runs it: two queues, a job
// moves from queue 0 to queue 1 once its executed time x its GPUs reaches the threshold (16
// GPU-hours); within a queue first come first served; jobs are gang-scheduled at their own GPU
// count, preempted when a job ahead needs the GPUs, and a job that does not fit is skipped
// (later, smaller ones may run). Starvation promotion is off, as in the artifact.
class TiresiasPolicy final : public ClusterPolicy {
 public:
  explicit TiresiasPolicy(const ClusterPolicyConfig& c) : cfg_(c) {}
  std::string name() const override { return "tiresias"; }
  bool fixed_replicas() const override { return true; }
  int queue_of(int id) const override {
    if (std::find(q0_.begin(), q0_.end(), id) != q0_.end()) return 0;
    if (std::find(q1_.begin(), q1_.end(), id) != q1_.end()) return 1;
    return -1;
  }
  std::vector<std::vector<int>> plan(const std::vector<ClusterJobView>& active, int nodes, int gpn,
                                     double now) override {
    const double t = std::floor(now);
    std::map<int, size_t> pos;
    for (size_t i = 0; i < active.size(); ++i) pos[active[i].id] = i;
    auto gone = [&](int id) { return !pos.count(id); };
    q0_.erase(std::remove_if(q0_.begin(), q0_.end(), gone), q0_.end());
    q1_.erase(std::remove_if(q1_.begin(), q1_.end(), gone), q1_.end());
    for (auto it = st_.begin(); it != st_.end();) it = gone(it->first) ? st_.erase(it) : std::next(it);
    std::vector<std::vector<int>> out(active.size());
    for (size_t i = 0; i < active.size(); ++i) {
      out[i] = active[i].alloc;
      if (!st_.count(active[i].id)) {
        st_[active[i].id] = State{};
        q0_.push_back(active[i].id);
      }
    }
    for (const ClusterJobView& j : active) {
      State& s = st_[j.id];
      if (s.running) {
        s.executed += t - s.last_check;
        if (s.executed * j.target_replicas >= cfg_.tiresias_threshold_gpu_s) {
          auto it = std::find(q0_.begin(), q0_.end(), j.id);
          if (it != q0_.end()) {
            q0_.erase(it);
            q1_.push_back(j.id);
          }
        }
      }
      s.last_check = t;
    }
    int left = nodes * gpn;
    for (const std::vector<int>* q : {&q0_, &q1_})
      for (int id : *q) {
        const size_t i = pos[id];
        State& s = st_[id];
        if (active[i].target_replicas <= left) {
          s.running = true;
          left -= active[i].target_replicas;
        } else {
          s.running = false;
          out[i].clear();
        }
      }
    std::vector<int> free = free_after(out, nodes, gpn);
    for (const std::vector<int>* q : {&q0_, &q1_})
      for (int id : *q) {
        const size_t i = pos[id];
        if (st_[id].running && out[i].empty()) out[i] = most_free_nodes(free, active[i].target_replicas);
      }
    return out;
  }

 private:
  struct State {
    bool running = false;
    double executed = 0, last_check = 0;
  };
  ClusterPolicyConfig cfg_;
  std::vector<int> q0_, q1_;
  std::map<int, State> st_;
};

// Optimus (Peng et al., EuroSys'18) with oracle throughput, as the artifact runs it: the batch
// is the workload's; every job first gets one GPU (in submission order while GPUs last), then
// GPUs go one at a time to the job whose predicted remaining time drops most (step time at n
// minus at n + 1, packed on nodes of 4, times its remaining optimizer steps). A job keeps its
// nodes while its GPU count stays; the others are placed smallest first, most-free node first.
class OptimusPolicy final : public ClusterPolicy {
 public:
  explicit OptimusPolicy(const ClusterPolicyConfig& c) : cfg_(c) {}
  std::string name() const override { return "optimus"; }
  std::vector<std::vector<int>> plan(const std::vector<ClusterJobView>& active, int nodes, int gpn,
                                     double) override {
    const size_t J = active.size();
    std::vector<double> remaining(J);
    std::vector<int> maxr(J), num(J, 0);
    std::vector<double> gain(J, 0);
    for (size_t i = 0; i < J; ++i) {
      const ClusterJobView& j = active[i];
      const int completion_epoch = j.app->max_epochs - 1;
      remaining[i] = completion_epoch <= j.epoch
                         ? 1.0
                         : j.app->iterations(j.target_batch, completion_epoch) - j.app->iterations(j.target_batch, j.epoch);
      maxr[i] = j.app->name == "ncf" ? 1 : std::max(1, j.target_batch / j.app->min_local);
    }
    int left = nodes * gpn;
    auto marginal = [&](size_t i) {
      if (num[i] + 1 > maxr[i] || left < 1) return 0.0;
      return (predict(active[i], num[i]) - predict(active[i], num[i] + 1)) * remaining[i];
    };
    for (size_t i = 0; i < J; ++i) {
      if (left < 1) break;
      num[i] = 1;
      --left;
      gain[i] = marginal(i);
    }
    while (left > 0) {
      size_t best = 0;
      for (size_t i = 1; i < J; ++i)
        if (gain[i] > gain[best]) best = i;
      if (!(gain[best] > 0)) break;
      ++num[best];
      --left;
      gain[best] = marginal(best);
    }
    last_num_ = num;
    std::vector<std::vector<int>> out(J);
    for (size_t i = 0; i < J; ++i)
      if (static_cast<int>(active[i].alloc.size()) == num[i]) out[i] = active[i].alloc;
    std::vector<int> free = free_after(out, nodes, gpn);
    std::vector<size_t> order(J);
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return num[a] < num[b]; });
    for (size_t i : order)
      if (num[i] > 0 && out[i].empty()) out[i] = most_free_nodes(free, num[i]);
    return out;
  }

  // Step time of one optimizer step at n GPUs packed 4 per node (accumulation included).
  double predict(const ClusterJobView& j, int n) {
    const auto key = std::make_tuple(j.app, j.target_batch, n);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    std::vector<int> pl;
    for (int left = n; left > 0; left -= 4) pl.push_back(std::min(left, 4));
    const BatchConfig c = fixed_batch_config(*j.app, n, j.target_batch, true);
    const auto [step, sync] = j.app->step_sync(pl, c.atomic);
    const double v = accumulated_step_s(step, sync, c.accum);
    cache_[key] = v;
    return v;
  }
  std::vector<int> last_num_;

 private:
  ClusterPolicyConfig cfg_;
  std::map<std::tuple<const ClusterApp*, int, int>, double> cache_;
};

// edp's DP in the node-level simulator. Each job's options are GPU counts that pack onto nodes
// (1-4 on one node, then whole nodes), valued restart-aware by decide() (plan.h): 1 / (the time the
// job would still need at an option, counting the pause every allocation change and every start
// costs here) — so a change must pay for its pause over the job's remaining time, and the sum
// favours short jobs (SRPT-like). The request carries the nodes, so decide() also places the jobs
// (a job whose count stays keeps its nodes; plan.h's place_on_nodes).
//
// Where the options' rates come from:
//   Learned  each job's reports (ClusterJobView::observed, its gradient statistics): the request
//            carries them (PlanJob::learned) and decide() builds the options (online.h); the
//            policy names the batch (the option's), a change of batch alone is free
//   Oracle   the true tables: per count the named batch with the best true goodput at the packed
//            placement, the current count at the job's actual placement; the policy names the batch
//   JobTuned the true tables with the batch the job tunes itself at every epoch (best_adaptive):
//            options of batch 0 (fill_cluster_request); goodput or raw throughput, restart-aware
//            or eager (rate / remaining work)
class EdpDpPolicy final : public ClusterPolicy {
 public:
  enum class Mode { Learned, Oracle, JobTuned };
  EdpDpPolicy(std::string name, Mode mode, bool by_goodput, bool restart_aware, const ClusterPolicyConfig& c)
      : name_(std::move(name)), mode_(mode), by_goodput_(by_goodput), restart_aware_(restart_aware), cfg_(c) {}
  std::string name() const override { return name_; }
  bool adaptive_batch() const override { return true; }
  bool chooses_batch() const override { return mode_ != Mode::JobTuned; }
  const std::vector<int>& batches() const override { return batches_; }

  std::vector<std::vector<int>> plan(const std::vector<ClusterJobView>& active, int nodes, int gpn,
                                     double) override {
    const size_t J = active.size();
    const int capacity = nodes * gpn;
    if (mode_ == Mode::JobTuned) {
      jobs_.resize(J);
      for (size_t i = 0; i < J; ++i) {
        const ClusterJobView& j = active[i];
        ClusterDpJob& d = jobs_[i];
        const int cur = static_cast<int>(j.alloc.size());
        d.current_gpus = cur;
        d.remaining = std::max(1e-9, j.app->total_progress() - j.progress);
        d.rates.clear();
        for (const Rate& r : rates(*j.app, j.epoch, gpn)) {
          double rate = r.rate;
          if (r.gpus == cur && j.goodput > 0 && by_goodput_) rate = j.goodput;  // actual placement
          d.rates.emplace_back(r.gpus, rate);
        }
      }
      fill_cluster_request(req_, jobs_, capacity, cfg_, restart_aware_);
    } else {
      named_request(active, capacity, gpn);
    }
    req_.nodes.assign(size_t(nodes), gpn);
    for (size_t i = 0; i < J; ++i) req_.jobs[i].current_nodes = active[i].alloc;
    const Plan& s = planner_.decide(req_);
    batches_.assign(J, 0);
    for (size_t i = 0; i < J; ++i) batches_[i] = s.choices[i].config.batch;
    return s.nodes;
  }

 private:
  struct Rate {
    int gpus;
    double rate;  // progress per second (goodput) or init-batch samples per second (dp)
  };
  // The counts a job may take: 1..node size, then whole nodes, up to max_batch / min_local (ncf 1).
  int max_count(const ClusterApp& app) const {
    return app.name == "ncf" ? 1 : std::min({cfg_.max_gpus_per_job, 4096, std::max(1, app.max_batch / app.min_local)});
  }
  static std::vector<int> packed(int n, int gpn) {
    std::vector<int> pl;
    for (int left = n; left > 0; left -= gpn) pl.push_back(std::min(left, gpn));
    return pl;
  }
  const std::vector<Rate>& rates(const ClusterApp& app, int epoch, int gpn) {
    const auto key = std::make_pair(&app, by_goodput_ ? epoch : 0);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    std::vector<Rate> v;
    // Counts above the cluster are never chosen (solve() drops them), so the cache does not
    // depend on the capacity.
    for (int n = 1; n <= max_count(app); ++n) {
      if (n > gpn && n % gpn != 0) continue;  // only counts that pack onto whole nodes
      const AdaptiveChoice c = best_adaptive(app, packed(n, gpn), epoch, by_goodput_);
      v.push_back(Rate{n, by_goodput_ ? c.goodput : c.samples_per_s / app.init_batch});
    }
    return cache_.emplace(key, std::move(v)).first->second;
  }
  // An option at the batch the policy names, valued by the true goodput (progress per second x
  // init_batch = samples_per_s x efficiency).
  static Config named_option(const ClusterApp& app, int n, const NamedBatch& nb) {
    const double sps = nb.run.samples_per_s;
    return Config{n, nb.batch, 1, sps, nb.run.goodput * app.init_batch / sps};
  }
  const NamedBatch& oracle_packed(const ClusterApp& app, int epoch, int n, int gpn) {
    const auto key = std::make_tuple(&app, epoch, n);
    auto it = named_cache_.find(key);
    if (it != named_cache_.end()) return it->second;
    return named_cache_.emplace(key, best_named_batch(app, packed(n, gpn), epoch)).first->second;
  }
  // The request of the Learned and Oracle modes: remaining work in init-batch samples, a change of
  // batch alone free (the job rebatches at its next step), the current batch the one it runs.
  void named_request(const std::vector<ClusterJobView>& active, int capacity, int gpn) {
    req_.gpus = capacity;
    req_.objective = Objective::RestartAware;
    req_.hysteresis = cfg_.hysteresis;
    req_.margin_s = cfg_.margin_s;
    req_.pause_per_gpu = cfg_.pause_per_gpu;
    req_.pause_s = req_.start_s = cfg_.restart_s;
    req_.jobs.resize(active.size());
    for (size_t i = 0; i < active.size(); ++i) {
      const ClusterJobView& j = active[i];
      const ClusterApp& app = *j.app;
      PlanJob& pj = req_.jobs[i];
      pj = PlanJob{};
      pj.id = std::to_string(j.id);
      pj.remaining = std::max(1e-9, app.total_progress() - j.progress) * app.init_batch;
      const int cur = static_cast<int>(j.alloc.size());
      if (cur > 0) pj.current = Config{cur, j.batch, 1, 0, 1.0};
      pj.rebatch_s = 0;
      if (mode_ == Mode::Learned) {
        pj.learned = true;
        pj.learn = learn_spec_of(app, cfg_.max_gpus_per_job);
        pj.learn.observed = j.observed;
        pj.learn.has_grad = j.has_grad;
        pj.learn.grad_sqr = j.grad_sqr;
        pj.learn.grad_var = j.grad_var;
        continue;
      }
      for (int n = 1; n <= std::max(max_count(app), cur); ++n) {
        if (n > gpn && n % gpn != 0 && n != cur) continue;
        if (n == cur) pj.options.push_back(named_option(app, n, best_named_batch(app, placement_of(j.alloc), j.epoch)));
        else pj.options.push_back(named_option(app, n, oracle_packed(app, j.epoch, n, gpn)));
      }
    }
  }

  std::string name_;
  Mode mode_;
  bool by_goodput_, restart_aware_;
  ClusterPolicyConfig cfg_;
  std::vector<ClusterDpJob> jobs_;  // reused across plans
  PlanRequest req_;
  Planner planner_;
  std::vector<int> batches_;
  std::map<std::pair<const ClusterApp*, int>, std::vector<Rate>> cache_;
  std::map<std::tuple<const ClusterApp*, int, int>, NamedBatch> named_cache_;
};

}  // namespace

void fill_cluster_request(PlanRequest& req, const std::vector<ClusterDpJob>& jobs, int capacity,
                          const ClusterPolicyConfig& cfg, bool restart_aware) {
  req.gpus = capacity;
  req.objective = restart_aware ? Objective::RestartAware : Objective::Remaining;
  req.hysteresis = cfg.hysteresis;
  req.margin_s = restart_aware ? cfg.margin_s : 0.0;
  req.pause_per_gpu = restart_aware ? cfg.pause_per_gpu : 0.0;
  req.pause_s = cfg.restart_s;
  req.start_s = cfg.restart_s;  // this simulator charges the pause to every allocation change, a start too
  req.jobs.resize(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const ClusterDpJob& d = jobs[i];
    PlanJob& pj = req.jobs[i];
    pj.may_wait = true;
    pj.weight = 1.0;
    pj.remaining = d.remaining;
    pj.current = d.current_gpus > 0 ? Config{d.current_gpus, 0, 1, 0, 1.0} : Config{};
    pj.pause_s = pj.start_s = -1;
    pj.options.clear();
    for (const auto& [g, rate] : d.rates)
      if (rate > 0) pj.options.push_back(Config{g, 0, 1, rate, 1.0});
  }
}

std::unique_ptr<ClusterPolicy> make_cluster_policy(const std::string& name, const ClusterPolicyConfig& cfg) {
  using Mode = EdpDpPolicy::Mode;
  switch (parse_policy(name, PolicyScope::Cluster)) {
    case PolicyKind::Tiresias: return std::make_unique<TiresiasPolicy>(cfg);
    case PolicyKind::Optimus: return std::make_unique<OptimusPolicy>(cfg);
    case PolicyKind::Goodput: return std::make_unique<EdpDpPolicy>(name, Mode::Learned, true, true, cfg);
    case PolicyKind::GoodputOracle: return std::make_unique<EdpDpPolicy>(name, Mode::Oracle, true, true, cfg);
    case PolicyKind::Dp: return std::make_unique<EdpDpPolicy>(name, Mode::JobTuned, false, cfg.restart_aware, cfg);
    case PolicyKind::GoodputEager: {
      // The formulation before restart awareness: value rate / remaining work, the pool
      // simulator's 5% hysteresis, no pause in the value.
      ClusterPolicyConfig c = cfg;
      c.hysteresis = 0.05;
      c.margin_s = c.pause_per_gpu = 0;
      return std::make_unique<EdpDpPolicy>(name, Mode::JobTuned, true, false, c);
    }
    default: break;
  }
  throw Error("make_cluster_policy: '" + name + "' is not a node-level policy");  // parse_policy refused it already
}

// ---- the simulation -----------------------------------------------------------------------

namespace {

// One run of the node-level simulator: the jobs' state, their progress over an interval, and the
// policy's allocations applied at the end of each interval.
class ClusterRunState {
 public:
  ClusterRunState(const std::vector<ClusterJob>& jobs, const ClusterProfiles& profiles, const ClusterSimConfig& cfg);
  ClusterSimResult run();

 private:
  struct Run {
    const ClusterApp* app = nullptr;
    std::vector<int> alloc, placement;
    int atomic = 0, accum = 0;
    int target = 0;  // the batch the policy named (chooses_batch policies)
    double pause_left = 0, progress = 0;
    int epoch = 0;
    bool done = false, started = false;
    // What the job reports: each configuration's first step and its gradient statistics.
    std::vector<StepObservation> observed;
    bool has_grad = false;
    double grad_sqr = 0, grad_var = 0;
  };
  void configure(size_t i);
  double goodput_of(const Run& r) const;
  void advance(size_t i, double t, double seconds);
  void report(Run& r);
  void plan_and_apply(double t, double& plan_ms);
  void summarise(double plan_ms);

  const std::vector<ClusterJob>& jobs_;
  const ClusterSimConfig& cfg_;
  std::unique_ptr<ClusterPolicy> policy_;
  bool adaptive_ = false, names_batch_ = false;
  bool tune_goodput_ = false;  // a batch tuned inside the job: for goodput (else throughput; dp)
  std::vector<Run> run_;
  ClusterSimResult res_;
  std::vector<ClusterJobView> views_;
  std::vector<size_t> active_;
};

ClusterRunState::ClusterRunState(const std::vector<ClusterJob>& jobs, const ClusterProfiles& profiles,
                                 const ClusterSimConfig& cfg)
    : jobs_(jobs), cfg_(cfg) {
  ClusterPolicyConfig pc = cfg.policy_cfg;
  pc.restart_s = cfg.restart_s;
  policy_ = make_cluster_policy(cfg.policy, pc);
  adaptive_ = policy_->adaptive_batch();
  names_batch_ = policy_->chooses_batch();
  tune_goodput_ = parse_policy(cfg.policy, PolicyScope::Cluster) != PolicyKind::Dp;
  const size_t N = jobs.size();
  run_.resize(N);
  res_.policy = cfg.policy;
  res_.jobs.resize(N);
  for (size_t i = 0; i < N; ++i) {
    run_[i].app = &profiles.app(jobs[i].app);
    res_.jobs[i].name = jobs[i].name;
    res_.jobs[i].app = jobs[i].app;
    res_.jobs[i].submit_s = jobs[i].submit_s;
    EDP_CHECK(!policy_->fixed_replicas() || jobs[i].replicas <= cfg.nodes * cfg.gpus_per_node, "job ", jobs[i].name,
              " needs ", jobs[i].replicas, " GPUs, the cluster has ", cfg.nodes * cfg.gpus_per_node);
  }
}

void ClusterRunState::configure(size_t i) {
  Run& r = run_[i];
  if (r.alloc.empty()) return;
  if (names_batch_) {
    const int n = static_cast<int>(r.alloc.size());
    EDP_CHECK(r.target >= 1, "policy ", cfg_.policy, " named no batch for job ", jobs_[i].name);
    const BatchSplit c = split_batch(n, r.target, r.app->max_local, r.app->init_batch, r.app->max_batch, true);
    r.atomic = c.atomic;
    r.accum = c.accum;
  } else if (adaptive_) {
    const AdaptiveChoice c = best_adaptive(*r.app, r.placement, r.epoch, tune_goodput_);
    r.atomic = c.atomic;
    r.accum = c.accum;
  } else {
    const int n = static_cast<int>(r.alloc.size());
    const BatchSplit c = split_batch(n, jobs_[i].batch, r.app->max_local, r.app->init_batch, r.app->max_batch, true);
    r.atomic = c.atomic;
    r.accum = c.accum;
  }
}

double ClusterRunState::goodput_of(const Run& r) const {
  if (r.alloc.empty()) return 0.0;
  const auto [step, sync] = r.app->step_sync(r.placement, r.atomic);
  const double M = double(r.alloc.size()) * r.atomic * (r.accum + 1);
  return r.app->gain(M, r.epoch) / accumulated_step_s(step, sync, r.accum);
}

// One job over [t, t + seconds): the pause first, then epochs; the batch is re-tuned at every
// epoch boundary for adaptive jobs. Times of epoch ends are whole seconds (as in the artifact).
void ClusterRunState::advance(size_t i, double t, double seconds) {
  Run& r = run_[i];
  if (r.alloc.empty() || r.done) return;
  res_.jobs[i].gpu_seconds += double(r.alloc.size()) * seconds;
  const double delay = std::min(r.pause_left, seconds);
  r.pause_left -= delay;
  seconds -= delay;
  t += delay;
  while (seconds > 0 && !r.done) {
    const double g = goodput_of(r);
    EDP_CHECK(g > 0, "job ", jobs_[i].name, ": non-positive goodput");
    report(r);
    const double next = r.app->epoch_progress[size_t(r.epoch) + 1];
    if (r.progress + g * seconds < next) {
      r.progress += g * seconds;
      break;
    }
    ++r.epoch;
    const double delta = std::min(seconds, std::nearbyint((next - r.progress) / g));
    r.progress = next;
    t += delta;
    seconds -= delta;
    if (r.epoch >= r.app->max_epochs) {
      r.done = true;
      res_.jobs[i].finish_s = t;
    } else if (adaptive_ && !names_batch_) {
      configure(i);
    }
  }
}

// What the job reports at a step (the artifact's Job.update_params): the step and sync time of a
// configuration it has not run at before, and its gradient statistics now.
void ClusterRunState::report(Run& r) {
  const int nodes = static_cast<int>(r.placement.size()), gpus = static_cast<int>(r.alloc.size());
  const auto same = [&](const StepObservation& o) { return o.nodes == nodes && o.gpus == gpus && o.local_batch == r.atomic; };
  if (std::none_of(r.observed.begin(), r.observed.end(), same)) {
    const auto [step, sync] = r.app->step_sync(r.placement, r.atomic);
    r.observed.push_back(StepObservation{nodes, gpus, double(r.atomic), step, sync});
  }
  const double M = double(gpus) * r.atomic * (r.accum + 1);
  std::tie(r.grad_sqr, r.grad_var) = r.app->grad_stats(M, r.epoch);
  r.has_grad = true;
}

void ClusterRunState::plan_and_apply(double t, double& plan_ms) {
  const auto p0 = std::chrono::steady_clock::now();
  std::vector<std::vector<int>> plan = policy_->plan(views_, cfg_.nodes, cfg_.gpus_per_node, t);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - p0).count();
  plan_ms += ms;
  res_.plan_ms_max = std::max(res_.plan_ms_max, ms);
  ++res_.plans;
  EDP_CHECK(plan.size() == active_.size(), "policy ", cfg_.policy, " returned ", plan.size(), " allocations for ",
            active_.size(), " jobs");
  std::vector<int> used(size_t(cfg_.nodes), 0);
  for (const auto& a : plan)
    for (int n : a) {
      EDP_CHECK(n >= 0 && n < cfg_.nodes, "policy ", cfg_.policy, " used node ", n, " of ", cfg_.nodes);
      EDP_CHECK(++used[size_t(n)] <= cfg_.gpus_per_node, "policy ", cfg_.policy, " over-allocated node ", n);
    }
  const std::vector<int>& named = policy_->batches();
  EDP_CHECK(!names_batch_ || named.size() == active_.size(), "policy ", cfg_.policy, " named ", named.size(),
            " batches for ", active_.size(), " jobs");
  for (size_t k = 0; k < active_.size(); ++k) {
    const size_t i = active_[k];
    Run& r = run_[i];
    if (names_batch_ && !plan[k].empty()) {
      const bool rebatch = named[k] != r.target;
      r.target = named[k];
      if (rebatch && plan[k] == r.alloc) configure(i);  // in place, no pause
    }
    if (plan[k] == r.alloc) continue;
    EDP_CHECK(!policy_->fixed_replicas() || plan[k].empty() || static_cast<int>(plan[k].size()) == jobs_[i].replicas,
              "policy ", cfg_.policy, " changed the GPU count of a fixed job");
    r.alloc = plan[k];
    if (r.alloc.empty()) {
      r.placement.clear();
      r.pause_left = 0;
      continue;
    }
    r.placement = placement_of(r.alloc);
    r.pause_left = cfg_.restart_s;
    if (r.started) {
      ++res_.jobs[i].restarts;
    } else {
      r.started = true;
      res_.jobs[i].start_s = t;
    }
    configure(i);
  }
}

ClusterSimResult ClusterRunState::run() {
  double t = 0, plan_ms = 0;
  size_t done = 0;
  while (done < jobs_.size() && t < cfg_.max_time_s) {
    for (size_t i = 0; i < jobs_.size(); ++i) advance(i, t, cfg_.interval_s);
    t += cfg_.interval_s;
    active_.clear();
    views_.clear();
    done = 0;
    for (size_t i = 0; i < jobs_.size(); ++i) {
      if (run_[i].done) {
        ++done;
        run_[i].alloc.clear();
        continue;
      }
      if (jobs_[i].submit_s > t) continue;
      active_.push_back(i);
      ClusterJobView v;
      v.id = static_cast<int>(i);
      v.app = run_[i].app;
      v.submit_s = jobs_[i].submit_s;
      v.target_replicas = jobs_[i].replicas;
      v.target_batch = jobs_[i].batch;
      v.epoch = run_[i].epoch;
      v.progress = run_[i].progress;
      v.alloc = run_[i].alloc;
      v.goodput = goodput_of(run_[i]);
      v.restarts = res_.jobs[i].restarts;
      v.observed = run_[i].observed;
      v.has_grad = run_[i].has_grad;
      v.grad_sqr = run_[i].grad_sqr;
      v.grad_var = run_[i].grad_var;
      v.batch = run_[i].alloc.empty() ? 0 : run_[i].target;
      views_.push_back(std::move(v));
    }
    if (active_.empty()) continue;
    plan_and_apply(t, plan_ms);
  }
  summarise(plan_ms);
  return std::move(res_);
}

void ClusterRunState::summarise(double plan_ms) {
  double jct = 0, gpu_s = 0;
  for (const ClusterJobResult& j : res_.jobs) {
    res_.restarts += j.restarts;
    gpu_s += j.gpu_seconds;
    if (j.finished()) {
      ++res_.finished;
      jct += j.finish_s - j.submit_s;
      res_.makespan_s = std::max(res_.makespan_s, j.finish_s);
    }
  }
  res_.avg_jct_s = res_.finished ? jct / res_.finished : 0.0;
  res_.restarts_per_job = jobs_.empty() ? 0.0 : double(res_.restarts) / double(jobs_.size());
  res_.utilisation = res_.makespan_s > 0 ? gpu_s / (double(cfg_.nodes * cfg_.gpus_per_node) * res_.makespan_s) : 0.0;
  res_.plan_ms_avg = res_.plans ? plan_ms / res_.plans : 0.0;
}

}  // namespace

ClusterSimResult simulate_cluster(const std::vector<ClusterJob>& jobs, const ClusterProfiles& profiles,
                                  const ClusterSimConfig& cfg) {
  EDP_CHECK(cfg.nodes >= 1 && cfg.gpus_per_node >= 1, "simulate_cluster: nodes and gpus_per_node must be >= 1");
  EDP_CHECK(cfg.interval_s > 0 && cfg.restart_s >= 0, "simulate_cluster: interval must be > 0, restart >= 0");
  return ClusterRunState(jobs, profiles, cfg).run();
}

}  // namespace edp::autoscale
