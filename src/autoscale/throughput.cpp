// Loading the measured model profiles and fitting the step-time model of throughput.h.
// The fit is two small weighted least-squares problems per model (compute, then sync), both
// weighted by 1/step_time so that the residual is a relative error of the whole step: a 10 ms
// miss matters on a 50 ms step, not on a 2 s one.
#include "edp/autoscale/throughput.h"

#include <unistd.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <sstream>

#include "csv.h"
#include "edp/core/error.h"

namespace edp::autoscale {

namespace {

int packed_nodes(int gpus, int per_node) { return (gpus + per_node - 1) / per_node; }

// The allreduce time not hidden behind a backward of `compute` seconds.
double sync_behind(const StepTimeModel& m, int gpus, int nodes, double compute) {
  if (gpus <= 1) return 0.0;
  double s = m.s0 + m.s1 * gpus - m.o * compute;
  if (nodes > 1) s += m.s2 + m.s3 * nodes;
  return std::max(0.0, s);
}

double sync_with_nodes(const StepTimeModel& m, int gpus, int nodes, double local_batch) {
  return sync_behind(m, gpus, nodes, m.compute_s(local_batch));
}

struct Sample {
  int gpus, nodes;
  double local, step, sync;
};

Eigen::VectorXd wls(const Eigen::MatrixXd& X, const Eigen::VectorXd& y, const Eigen::VectorXd& w) {
  const Eigen::MatrixXd Xw = w.asDiagonal() * X;
  const Eigen::VectorXd yw = w.asDiagonal() * y;
  return Xw.colPivHouseholderQr().solve(yw);
}

std::vector<int> parse_int_list(const detail::CsvFile& f, size_t row, size_t col) {
  std::vector<int> out;
  std::stringstream ss(f.str(row, col));
  std::string item;
  while (std::getline(ss, item, ';')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0') f.fail(row, col, "expected ';'-separated integers, got '" + f.str(row, col) + "'");
    out.push_back(static_cast<int>(v));
  }
  return out;
}

void fit_model(ModelProfile& p, const std::vector<Sample>& rows) {
  EDP_CHECK(rows.size() >= 8, "model '", p.name, "': only ", rows.size(), " throughput rows, need >= 8 to fit");
  StepTimeModel& m = p.model;
  const Eigen::Index n = static_cast<Eigen::Index>(rows.size());
  Eigen::MatrixXd X(n, 2);
  Eigen::VectorXd y(n), w(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const Sample& s = rows[static_cast<size_t>(i)];
    X(i, 0) = 1.0;
    X(i, 1) = s.local;
    y(i) = s.step - s.sync;
    w(i) = 1.0 / s.step;
  }
  const Eigen::VectorXd cc = wls(X, y, w);
  m.a = cc(0);
  m.c = cc(1);

  std::vector<const Sample*> multi;
  for (const Sample& s : rows)
    if (s.gpus > 1) multi.push_back(&s);
  if (multi.size() >= 5) {
    const Eigen::Index k = static_cast<Eigen::Index>(multi.size());
    Eigen::MatrixXd Xs(k, 5);
    Eigen::VectorXd ys(k), ws(k);
    for (Eigen::Index i = 0; i < k; ++i) {
      const Sample& s = *multi[static_cast<size_t>(i)];
      Xs(i, 0) = 1.0;
      Xs(i, 1) = s.gpus;
      Xs(i, 2) = s.nodes > 1 ? 1.0 : 0.0;
      Xs(i, 3) = s.nodes > 1 ? s.nodes : 0.0;
      Xs(i, 4) = -m.compute_s(s.local);
      ys(i) = s.sync;
      ws(i) = 1.0 / s.step;
    }
    const Eigen::VectorXd sc = wls(Xs, ys, ws);
    m.s0 = sc(0);
    m.s1 = sc(1);
    m.s2 = sc(2);
    m.s3 = sc(3);
    m.o = sc(4);
  }

  std::vector<double> errs;
  double packed_sum = 0;
  FitReport& r = p.fit;
  for (const Sample& s : rows) {
    const double pred = m.compute_s(s.local) + sync_with_nodes(m, s.gpus, s.nodes, s.local);
    const double e = std::abs(pred - s.step) / s.step;
    errs.push_back(e);
    if (s.nodes == packed_nodes(s.gpus, m.gpus_per_node)) {
      ++r.packed_rows;
      packed_sum += e;
      r.packed_max_rel_err = std::max(r.packed_max_rel_err, e);
    }
  }
  r.rows = static_cast<int>(errs.size());
  double sum = 0;
  for (double e : errs) sum += e;
  r.mean_rel_err = sum / static_cast<double>(errs.size());
  std::sort(errs.begin(), errs.end());
  r.p90_rel_err = errs[static_cast<size_t>(0.9 * static_cast<double>(errs.size() - 1))];
  r.max_rel_err = errs.back();
  r.packed_mean_rel_err = r.packed_rows ? packed_sum / r.packed_rows : 0.0;
}

}  // namespace

double StepTimeModel::sync_s(int gpus, double local_batch) const {
  return sync_with_nodes(*this, gpus, packed_nodes(gpus, gpus_per_node), local_batch);
}

double StepTimeModel::samples_per_s(int gpus, int global_batch) const {
  const double local = static_cast<double>(global_batch) / gpus;
  return static_cast<double>(global_batch) / step_s(gpus, local);
}

double StepTimeModel::colocated_compute_s(double rank_batch, int k, double idle) const {
  const double alone = compute_s(rank_batch);
  if (k <= 1) return alone;
  return std::max(alone, k * (c * rank_batch + (1.0 - idle) * a));
}

double StepTimeModel::colocated_samples_per_s(int gpus, int k, int global_batch, double idle) const {
  if (k <= 1) return samples_per_s(gpus, global_batch);
  const double b = static_cast<double>(global_batch) / (static_cast<double>(gpus) * k);
  const double compute = colocated_compute_s(b, k, idle);
  return static_cast<double>(global_batch) /
         (compute + sync_behind(*this, gpus, packed_nodes(gpus, gpus_per_node), compute));
}

std::vector<ModelProfile> load_model_profiles(const std::string& dir) {
  std::vector<ModelProfile> out;
  std::map<std::string, size_t> by_name;
  {
    detail::CsvFile f(dir + "/model_limits.csv");
    const size_t cm = f.column("model"), ci = f.column("init_batch_size"), cx = f.column("max_batch_size"),
                 cl = f.column("min_local_bsz"), ch = f.column("max_local_bsz"),
                 cg = f.column("profiled_local_bsz_placements");
    const size_t ct = f.has_column("total_progress") ? f.column("total_progress") : SIZE_MAX;
    for (size_t r = 0; r < f.rows(); ++r) {
      ModelProfile p;
      p.name = f.str(r, cm);
      p.init_batch = static_cast<int>(f.integer(r, ci));
      p.max_batch = static_cast<int>(f.integer(r, cx));
      p.min_local = static_cast<int>(f.integer(r, cl));
      p.max_local = static_cast<int>(f.integer(r, ch));
      if (p.init_batch < 1) f.fail(r, ci, "must be >= 1");
      if (p.max_batch < p.init_batch) f.fail(r, cx, "must be >= init_batch_size");
      if (p.min_local < 1) f.fail(r, cl, "must be >= 1");
      if (p.max_local < p.min_local) f.fail(r, ch, "must be >= min_local_bsz");
      if (ct != SIZE_MAX) {
        // Progress is counted in iterations at the initial batch (the data README), so one
        // complete run is total_progress x init_batch_size samples.
        const double tp = f.num(r, ct);
        if (!(tp > 0)) f.fail(r, ct, "must be > 0");
        p.total_samples = tp * p.init_batch;
      }
      for (int b : parse_int_list(f, r, cg))
        if (b >= p.min_local && b <= p.max_local) p.local_grid.push_back(b);
      if (p.name.empty()) f.fail(r, cm, "empty model name");
      by_name[p.name] = out.size();
      out.push_back(std::move(p));
    }
  }
  std::vector<std::vector<Sample>> samples(out.size());
  auto read_rows = [&](const std::string& file, bool placements) {
    detail::CsvFile f(dir + "/" + file);
    const size_t cm = f.column("model"), cn = f.column("num_nodes"), cg = f.column("num_gpus"),
                 cl = f.column("local_bsz"), ct = f.column("step_time_s"), cs = f.column("sync_time_s");
    for (size_t r = 0; r < f.rows(); ++r) {
      auto it = by_name.find(f.str(r, cm));
      if (it == by_name.end()) f.fail(r, cm, "model '" + f.str(r, cm) + "' is not in model_limits.csv");
      const ModelProfile& p = out[it->second];
      Sample s;
      s.nodes = static_cast<int>(f.integer(r, cn));
      s.gpus = static_cast<int>(f.integer(r, cg));
      s.local = static_cast<double>(f.integer(r, cl));
      s.step = f.num(r, ct);
      s.sync = f.num(r, cs);
      if (s.gpus < 1) f.fail(r, cg, "must be >= 1");
      if (s.nodes < 1 || s.nodes > s.gpus) f.fail(r, cn, "must be in [1, num_gpus]");
      if (!(s.step > 0)) f.fail(r, ct, "must be > 0");
      if (s.sync < 0 || s.sync > s.step) f.fail(r, cs, "must be in [0, step_time_s]");
      // Rows above the per-GPU memory bound are never offered to a job; fitting them would
      // spend the model's freedom where it is not used.
      if (s.local < p.min_local || s.local > p.max_local) continue;
      (void)placements;
      samples[it->second].push_back(s);
    }
  };
  read_rows("throughput_placements.csv", true);
  read_rows("throughput_scalability.csv", false);
  for (size_t i = 0; i < out.size(); ++i) fit_model(out[i], samples[i]);

  // Gradient noise scale: the median over the init-batch run's epochs of M0 * var / sqr.
  const std::string gs = dir + "/convergence_gradstats.csv";
  if (::access(gs.c_str(), F_OK) == 0) {
    detail::CsvFile f(gs);
    const size_t cm = f.column("model"), cb = f.column("batch_size"), cq = f.column("grad_sqr"),
                 cv = f.column("grad_var");
    std::vector<std::vector<double>> bn(out.size());
    for (size_t r = 0; r < f.rows(); ++r) {
      auto it = by_name.find(f.str(r, cm));
      if (it == by_name.end()) continue;
      const ModelProfile& p = out[it->second];
      if (f.integer(r, cb) != p.init_batch) continue;
      const double sqr = f.num(r, cq), var = f.num(r, cv);
      if (sqr > 0 && var >= 0) bn[it->second].push_back(p.init_batch * var / sqr);
    }
    for (size_t i = 0; i < out.size(); ++i) {
      if (bn[i].empty()) continue;
      std::sort(bn[i].begin(), bn[i].end());
      out[i].grad_noise_scale = bn[i][bn[i].size() / 2];
    }
  }
  return out;
}

std::vector<ModelProfile> synthetic_model_profiles() {
  auto make = [](const char* name, int init, int maxb, int lo, int hi, StepTimeModel m, double bn, double total) {
    ModelProfile p;
    p.name = name;
    p.init_batch = init;
    p.max_batch = maxb;
    p.min_local = lo;
    p.max_local = hi;
    for (int b = lo; b <= hi; b *= 2) p.local_grid.push_back(b);
    if (p.local_grid.back() != hi) p.local_grid.push_back(hi);
    p.model = m;
    p.grad_noise_scale = bn;
    p.total_samples = total;
    p.synthetic = true;
    return p;
  };
  // Coefficients chosen to span the measured range: a small model whose step is dominated by
  // overheads (batch helps a lot), a medium one, and a large one that scales well.
  StepTimeModel small{0.010, 0.00015, 0.010, 0.0010, 0.030, 0.004, 0.2, 4};
  StepTimeModel medium{0.030, 0.0020, 0.020, 0.0020, 0.080, 0.010, 0.3, 4};
  StepTimeModel large{0.050, 0.0800, 0.050, 0.0050, 0.300, 0.020, 0.4, 4};
  return {make("synth-small", 128, 4096, 32, 1024, small, 2000.0, 5e6),
          make("synth-medium", 64, 2048, 16, 256, medium, 800.0, 2e6),
          make("synth-large", 8, 256, 4, 16, large, 100.0, 2e5)};
}

std::vector<int> candidate_batches(const ModelProfile& m, int gpus, int min_batch, int max_batch) {
  std::set<int> s;
  std::vector<int> locals = m.local_grid;
  locals.push_back(m.min_local);
  locals.push_back(m.max_local);
  for (int lb : locals) {
    if (lb < m.min_local || lb > m.max_local) continue;
    const int64_t B = int64_t{lb} * gpus;
    if (B >= min_batch && B <= max_batch) s.insert(static_cast<int>(B));
  }
  return {s.begin(), s.end()};
}

}  // namespace edp::autoscale
