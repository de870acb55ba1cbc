// The node-level simulator's measured tables (cluster_sim.h): placements, step and sync times of
// the actual placement, gradient statistics per epoch, the workload, the batch each policy runs.
#include "edp/autoscale/cluster_sim.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
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

namespace {
// A placement column: per-node GPU counts as digits 1-9 ("1212").
std::vector<int> parse_placement(const detail::CsvFile& f, size_t r, size_t c) {
  const std::string key = f.str(r, c);
  std::vector<int> pl;
  for (char d : key) {
    if (d < '1' || d > '9') f.fail(r, c, "expected a string of digits 1-9, got '" + key + "'");
    pl.push_back(d - '0');
  }
  if (pl.empty()) f.fail(r, c, "empty placement");
  return pl;
}

// After the tables are read: the per-GPU batch grid, the rows sorted by batch, the best progress
// any batch made by the end of each epoch.
void finish_app(ClusterApp& a, const std::string& dir) {
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
}  // namespace

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
      const std::vector<int> pl = parse_placement(f, r, cp);
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
    finish_app(a, dir);
  }
  return out;
}

namespace {

// The Sia artifact's facts per model (applications.py and simulator_config.py of
// siasosp23/artifacts): epochs to run, restart delay (s), the calibration slowdown of its real runs.
struct SiaModel {
  const char* name;
  int max_epochs;
  double pause_s, slowdown;
};
constexpr SiaModel kSiaModels[] = {
    {"bert", 2, 120, 1.2},      {"cifar10", 100, 50, 1.8}, {"deepspeech2", 80, 25, 1.2},
    {"imagenet", 90, 250, 1.2}, {"ncf", 10, 15, 1.5},      {"yolov3", 50, 80, 1.2},
};
// GPUs per node and the most nodes profiled per GPU type (simulator_config.py).
struct SiaType {
  const char* name;
  int gpus_per_node, max_job_nodes;
};
constexpr SiaType kSiaTypes[] = {{"aws", 4, 16}, {"azure", 8, 5}, {"dgx", 8, 2},
                                 {"dgx-ext", 8, 2}, {"quad", 4, 1}, {"rtx", 8, 3}};

}  // namespace

ClusterProfiles ClusterProfiles::load_sia(const std::string& sim_dir, const std::string& type) {
  namespace fs = std::filesystem;
  const fs::path traces = fs::path(sim_dir) / "traces";
  if (!fs::is_directory(traces)) throw DataError("'" + sim_dir + "' has no traces/ (the artifact's sia-simulator/)");
  ClusterProfiles out;
  for (const SiaModel& m : kSiaModels) {
    const fs::path dir = traces / m.name;
    const fs::path pl = dir / ("placements-" + type + ".csv"), sc = dir / ("scalability-" + type + ".csv");
    if (!fs::is_regular_file(pl) || !fs::is_regular_file(sc)) continue;
    ClusterApp a;
    a.name = m.name;
    a.max_epochs = m.max_epochs;
    a.pause_s = m.pause_s;
    a.slowdown = m.slowdown;
    std::map<std::tuple<int, int, double>, std::pair<StepPoint, int>> avg;
    {
      detail::CsvFile f(pl.string());
      const size_t cp = f.column("placement"), cl = f.column("local_bsz"), ct = f.column("step_time"),
                   cs = f.column("sync_time");
      for (size_t r = 0; r < f.rows(); ++r) {
        const std::vector<int> p = parse_placement(f, r, cp);
        const StepPoint pt{f.num(r, cl), f.num(r, ct), f.num(r, cs)};
        if (!(pt.step_s > 0) || pt.sync_s < 0 || !(pt.local_bsz >= 1))
          f.fail(r, ct, "local_bsz must be >= 1, step time > 0 and sync time >= 0");
        const std::string k = placement_key(p);
        a.placements[k].push_back(pt);
        const int g = std::accumulate(p.begin(), p.end(), 0), b = static_cast<int>(std::lround(pt.local_bsz));
        a.local_max_by_placement[k] = std::max(a.local_max_by_placement[k], b);
        a.local_max_by_gpus[g] = std::max(a.local_max_by_gpus[g], b);
        a.min_local = a.min_local == 0 ? b : std::min(a.min_local, b);
        a.max_local = std::max(a.max_local, b);
        auto& e = avg[{static_cast<int>(p.size()), g, pt.local_bsz}];
        e.first.local_bsz = pt.local_bsz;
        e.first.step_s += pt.step_s;
        e.first.sync_s += pt.sync_s;
        ++e.second;
      }
    }
    for (auto& [k, e] : avg)
      a.levels[{std::get<0>(k), std::get<1>(k)}].push_back(
          StepPoint{e.first.local_bsz, e.first.step_s / e.second, e.first.sync_s / e.second});
    {
      detail::CsvFile f(sc.string());
      const size_t cn = f.column("num_nodes"), cg = f.column("num_replicas"), cl = f.column("local_bsz"),
                   ct = f.column("step_time"), cs = f.column("sync_time");
      for (size_t r = 0; r < f.rows(); ++r) {
        const int n = static_cast<int>(f.integer(r, cn)), g = static_cast<int>(f.integer(r, cg));
        if (n < 1 || g < n) f.fail(r, cg, "needs num_replicas >= num_nodes >= 1");
        const StepPoint pt{f.num(r, cl), f.num(r, ct), f.num(r, cs)};
        if (!(pt.step_s > 0) || pt.sync_s < 0) f.fail(r, ct, "step time must be > 0 and sync time >= 0");
        a.levels[{n, g}].push_back(pt);
        int& mx = a.local_max_by_level[{n, g}];
        mx = std::max(mx, static_cast<int>(std::lround(pt.local_bsz)));
      }
    }
    for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
      const std::string f = e.path().filename().string();
      if (f.rfind("validation-", 0) != 0 || e.path().extension() != ".csv") continue;
      const std::string num = f.substr(11, f.size() - 15);
      if (num.empty() || num.find_first_not_of("0123456789") != std::string::npos || num.size() > 9)
        throw DataError(e.path().string() + ": expected validation-<batch size>.csv");
      const int b = std::stoi(num);
      detail::CsvFile v(e.path().string());
      const size_t cp = v.column("progress"), ci = v.column("iteration"), cq = v.column("grad_sqr"),
                   cv = v.column("grad_var");
      std::vector<EpochStats>& rows = a.validation[b];
      for (size_t r = 0; r < v.rows(); ++r) rows.push_back(EpochStats{v.num(r, cp), v.num(r, ci), v.num(r, cq), v.num(r, cv)});
    }
    if (a.validation.empty()) throw DataError(dir.string() + ": no validation-<batch size>.csv");
    a.init_batch = a.validation.begin()->first;
    a.max_batch = a.validation.rbegin()->first;
    if (a.name == "deepspeech2" && type == "rtx") a.max_local = 57;  // the artifact's memory limit there
    EDP_CHECK(a.max_batch >= a.min_local, "model '", a.name, "' on ", type, ": max batch ", a.max_batch,
              " below the smallest micro-batch ", a.min_local);
    finish_app(a, dir.string());
    out.apps_.push_back(std::move(a));
  }
  if (out.apps_.empty()) throw DataError("no model has tables of GPU type '" + type + "' under " + traces.string());
  return out;
}

std::vector<ClusterNodeType> sia_cluster(const std::string& spec) {
  auto bad = [&](const std::string& why) { throw DataError("cluster '" + spec + "': " + why); };
  std::string known;
  for (const SiaType& k : kSiaTypes) known += (known.empty() ? "" : ", ") + std::string(k.name);
  if (spec.empty() || spec.back() == ',') bad("expected TYPE:NODES,... (types: " + known + ")");
  std::vector<ClusterNodeType> out;
  std::stringstream ss(spec);
  std::string part;
  while (std::getline(ss, part, ',')) {
    const size_t c = part.find(':');
    if (c == std::string::npos || c == 0) bad("expected TYPE:NODES,... (types: " + known + ")");
    const std::string name = part.substr(0, c), num = part.substr(c + 1);
    if (num.empty() || num.size() > 6 || num.find_first_not_of("0123456789") != std::string::npos || std::stoi(num) < 1)
      bad("the nodes of '" + name + "' must be a number >= 1");
    const SiaType* t = nullptr;
    for (const SiaType& k : kSiaTypes)
      if (name == k.name) t = &k;
    if (t == nullptr) bad("unknown GPU type '" + name + "' (known: " + known + ")");
    for (const ClusterNodeType& o : out)
      if (o.name == name) bad("type '" + name + "' given twice");
    out.push_back(ClusterNodeType{name, std::stoi(num), t->gpus_per_node, t->max_job_nodes});
  }
  return out;
}

int ClusterApp::max_local_at(const std::vector<int>& placement) const {
  if (local_max_by_placement.empty()) return max_local;
  const std::string key = placement_key(placement);
  if (auto it = local_max_by_placement.find(key); it != local_max_by_placement.end()) return it->second;
  int n = 0, g = 0, best = 0;
  for (int x : placement)
    if (x > 0) {
      ++n;
      g += x;
    }
  for (const auto& [ng, b] : local_max_by_level)
    if (ng.first >= n && ng.second >= g) best = std::max(best, b);
  return best > 0 ? best : max_local;
}

BatchSplit ClusterApp::split(const std::vector<int>& placement, int batch) const {
  const int n = std::accumulate(placement.begin(), placement.end(), 0);
  BatchSplit s = split_batch(n, batch, max_local_at(placement), init_batch, max_batch, true);
  if (auto it = local_max_by_gpus.find(n); it != local_max_by_gpus.end() && s.atomic > it->second) {
    s.atomic = it->second;  // the artifact's memory correction, after the split
    s.atomic = std::max(1, std::min(s.atomic, max_batch / (n * (s.accum + 1))));
  }
  return s;
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

NamedBatch named_batch_at(const ClusterApp& app, const std::vector<int>& placement, int epoch, int batch) {
  const int n = std::accumulate(placement.begin(), placement.end(), 0);
  EDP_CHECK(n >= 1 && batch >= 1, "named_batch_at: empty placement or batch < 1");
  const BatchSplit sp = app.split(placement, batch);
  const auto [step, sync] = app.step_sync(placement, sp.atomic);
  const double total = accumulated_step_s(step, sync, sp.accum) * app.slowdown;
  const double M = double(n) * sp.atomic * (sp.accum + 1);
  return NamedBatch{static_cast<int>(M), AdaptiveChoice{sp.atomic, sp.accum, app.gain(M, epoch) / total, M / total}};
}

NamedBatch best_named_batch(const ClusterApp& app, const std::vector<int>& placement, int epoch) {
  const int n = std::accumulate(placement.begin(), placement.end(), 0);
  EDP_CHECK(n >= 1, "best_named_batch: empty placement");
  auto run = [&](int batch) { return named_batch_at(app, placement, epoch, batch); };
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

}  // namespace edp::autoscale
