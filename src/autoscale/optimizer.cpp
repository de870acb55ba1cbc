// The exact multiple-choice-knapsack DP behind every elastic policy (see optimizer.h and
// docs/autoscaler.md). The speed comes from three exact reductions, not from approximation:
//   1. per job and GPU count only the best option counts (the upper envelope over batches);
//   2. an option that needs more GPUs than a cheaper one but is worth no more is never needed
//      (F is "best value with at most c GPUs", so the cheaper one is always as good);
//   3. after jobs 1..j the table only has to reach min(capacity, sum of their largest options),
//      beyond that it is flat.
// The inner loop is a branch-free max-plus update over contiguous doubles, which the compiler
// vectorises; choices are recovered afterwards by re-evaluating the recurrence on the stored
// tables (exact: the same floating-point operations give the same bits).
#include "edp/autoscale/optimizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <sstream>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "edp/core/error.h"

namespace edp::autoscale {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr int kTile = 16;  // capacities per register tile (4 AVX2 registers of doubles)

struct Kept {
  int gpus;
  int batch;
  double value;
  int tag = 0;
};

// Reductions 1 and 2 for one job. The wait option (0 GPUs, value 0) comes first when allowed.
std::vector<Kept> envelope(const DpJob& job, int capacity) {
  // The options that fit, by GPU count (stable: within a count, in the job's order), then each
  // count's best: a later option replaces the best so far when worth more, or as much and current,
  // or as much and neither current with a smaller batch.
  thread_local std::vector<std::pair<int, size_t>> fit;
  fit.clear();
  for (size_t i = 0; i < job.options.size(); ++i) {
    const Option& o = job.options[i];
    EDP_CHECK(o.gpus >= 1, "solve: an option has gpus=", o.gpus, " (waiting is may_wait, not an option)");
    EDP_CHECK(std::isfinite(o.value), "solve: an option has a non-finite value");
    if (o.gpus <= capacity) fit.emplace_back(o.gpus, i);
  }
  std::stable_sort(fit.begin(), fit.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Kept> best;  // one per GPU count, ascending
  for (const auto& [g, i] : fit) {
    const Option& o = job.options[i];
    if (best.empty() || best.back().gpus != g) {
      best.push_back(Kept{o.gpus, o.batch, o.value, o.tag});
      continue;
    }
    Kept& k = best.back();
    const bool o_cur = o.gpus == job.current_gpus && o.batch == job.current_batch;
    const bool k_cur = k.gpus == job.current_gpus && k.batch == job.current_batch;
    if (o.value > k.value || (o.value == k.value && (o_cur || (!k_cur && o.batch < k.batch))))
      k = Kept{o.gpus, o.batch, o.value, o.tag};
  }
  std::vector<Kept> kept;
  double best_so_far = kNegInf;
  if (job.may_wait) {
    kept.push_back(Kept{0, 0, 0.0});
    best_so_far = 0.0;
  }
  for (const Kept& k : best) {
    const bool is_cur = k.gpus == job.current_gpus;
    if (k.value > best_so_far || (k.value == best_so_far && is_cur)) {
      kept.push_back(k);
      best_so_far = std::max(best_so_far, k.value);
    }
  }
  return kept;
}

// One DP step: out[c] = max over the job's kept options k of in[c - k.gpus] + k.value, for c in
// [0, h], where `in` holds the previous table over [0, hp]. `padded` is scratch of at least
// maxg + h + 2 kTile doubles. The same inputs always give the same bits (the backward pass relies
// on it when it recomputes a segment).
void dp_step(const double* in, int hp, const std::vector<Kept>& opts, double* out, int h, int maxg,
             std::vector<double>& padded) {
  const int h_end = (h / kTile + 1) * kTile;  // tiles cover [0, h_end)
  double* pad0 = padded.data() + maxg;        // pad0[x] == in[x] for 0 <= x <= hp
  // The previous table, padded so that every read in[c - g] is in range without a branch:
  // below 0 it is -inf (no capacity left), above its last cell it is flat (see reduction 3).
  std::fill(padded.data(), pad0, kNegInf);
  std::copy(in, in + hp + 1, pad0);
  std::fill(pad0 + hp + 1, pad0 + h_end, in[hp]);
  // Tiled max-plus: a tile of kTile capacities is kept in registers while every option is
  // applied to it, so each option costs one load per cell instead of load + load + store.
  for (int c0 = 0; c0 < h_end; c0 += kTile) {
    double acc[kTile];
#if defined(__AVX2__)
    // Same arithmetic as the portable loop below (IEEE add, then max), so the backward pass
    // reproduces these values bit for bit.
    __m256d a0 = _mm256_set1_pd(kNegInf), a1 = a0, a2 = a0, a3 = a0;
    for (const Kept& k : opts) {
      const double* src = pad0 + (c0 - k.gpus);
      const __m256d v = _mm256_set1_pd(k.value);
      a0 = _mm256_max_pd(a0, _mm256_add_pd(_mm256_loadu_pd(src), v));
      a1 = _mm256_max_pd(a1, _mm256_add_pd(_mm256_loadu_pd(src + 4), v));
      a2 = _mm256_max_pd(a2, _mm256_add_pd(_mm256_loadu_pd(src + 8), v));
      a3 = _mm256_max_pd(a3, _mm256_add_pd(_mm256_loadu_pd(src + 12), v));
    }
    _mm256_storeu_pd(acc, a0);
    _mm256_storeu_pd(acc + 4, a1);
    _mm256_storeu_pd(acc + 8, a2);
    _mm256_storeu_pd(acc + 12, a3);
#else
    for (int t = 0; t < kTile; ++t) acc[t] = kNegInf;
    for (const Kept& k : opts) {
      const double* src = pad0 + (c0 - k.gpus);
      const double v = k.value;
      for (int t = 0; t < kTile; ++t) acc[t] = std::max(acc[t], src[t] + v);
    }
#endif
    const int n = std::min(kTile, h + 1 - c0);
    for (int t = 0; t < n; ++t) out[c0 + t] = acc[t];
  }
}

// Tables of at most this many cells in all are kept whole for the backward pass; beyond it (many
// jobs on a large cluster: 10^5 jobs x 4096 GPUs would be 3.3 GB) only every K-th table is kept
// (K ~ sqrt(jobs)) and the tables between two of them are recomputed, segment by segment, as the
// backward pass reaches them: memory ~ 2 sqrt(jobs) tables, at the price of a second forward pass.
constexpr size_t kWholeTableCells = size_t{8} << 20;  // 64 MiB of doubles

// The refusal when the jobs that may not wait cannot all fit: each one's smallest option.
[[noreturn]] void throw_infeasible(const std::vector<DpJob>& jobs, const std::vector<std::vector<Kept>>& kept,
                                   int capacity) {
  std::ostringstream os;
  os << "the jobs that must run cannot all fit in " << capacity << " GPUs:";
  int need = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (jobs[j].may_wait) continue;
    int m = std::numeric_limits<int>::max();
    for (const Kept& k : kept[j]) m = std::min(m, k.gpus);
    os << " job #" << j << " needs " << (kept[j].empty() ? -1 : m);
    need += kept[j].empty() ? 0 : m;
  }
  os << " (at least " << need << " in total)";
  throw Error(os.str());
}

// The backward pass's choice for one job: an option that reaches the table's value `target` at
// `c` GPUs from the previous table `in` (cells 0..hp), the job's current allocation first; null
// when none does (an internal error).
const Kept* pick_option(const DpJob& job, const std::vector<Kept>& kept, const double* in, int hp, int c,
                        double target) {
  auto reaches = [&](const Kept& k) { return k.gpus <= c && in[std::min(c - k.gpus, hp)] + k.value == target; };
  for (const Kept& k : kept)
    if (k.gpus == job.current_gpus && (k.gpus == 0 || k.batch == job.current_batch) && reaches(k)) return &k;
  for (const Kept& k : kept)
    if (reaches(k)) return &k;
  return nullptr;
}

}  // namespace

Solution solve(const std::vector<DpJob>& jobs, int capacity) {
  EDP_CHECK(capacity >= 0, "solve: capacity must be >= 0, got ", capacity);
  const size_t J = jobs.size();
  std::vector<std::vector<Kept>> kept(J);
  std::vector<int> hi(J + 1, 0);
  size_t total = 1;  // F_0 is the single cell [0]
  int maxg_all = 0;
  for (size_t j = 0; j < J; ++j) {
    kept[j] = envelope(jobs[j], capacity);
    int maxg = 0;
    for (const Kept& k : kept[j]) maxg = std::max(maxg, k.gpus);
    maxg_all = std::max(maxg_all, maxg);
    hi[j + 1] = static_cast<int>(std::min<int64_t>(capacity, int64_t{hi[j]} + maxg));
    total += static_cast<size_t>(hi[j + 1]) + 1;
  }
  // Segments of `seg` jobs: the table before each segment is kept (a checkpoint); the tables inside
  // one segment are (re)computed into `buf` when the backward pass needs them.
  const size_t seg = total <= kWholeTableCells
                         ? std::max<size_t>(J, 1)
                         : std::max<size_t>(1, static_cast<size_t>(std::ceil(std::sqrt(static_cast<double>(J)))));
  const size_t nseg = (J + seg - 1) / seg;
  // The buffers are reused across calls of the same thread (the simulator re-plans thousands of
  // times) and never zero-filled: every cell that is read is written first. Fresh pages would cost
  // a fault each on first touch.
  thread_local std::vector<double> buf, marks, padded;
  thread_local std::vector<size_t> mark_at;
  padded.resize(static_cast<size_t>(maxg_all) + static_cast<size_t>(capacity) + 2 * kTile);
  size_t seg_cells = 1;
  for (size_t s = 0; s < nseg; ++s) {
    size_t cells = 0;
    for (size_t j = s * seg; j < std::min(J, (s + 1) * seg); ++j) cells += static_cast<size_t>(hi[j + 1]) + 1;
    seg_cells = std::max(seg_cells, cells);
  }
  if (buf.size() < seg_cells + static_cast<size_t>(capacity) + 1) buf.resize(seg_cells + static_cast<size_t>(capacity) + 1);
  mark_at.assign(nseg + 1, 0);
  size_t mark_cells = 0;
  for (size_t s = 0; s <= nseg; ++s) {
    mark_at[s] = mark_cells;
    mark_cells += static_cast<size_t>(hi[std::min(J, s * seg)]) + 1;
  }
  if (nseg > 1 && marks.size() < mark_cells) marks.resize(mark_cells);
  Solution sol;

  // The tables of segment s, from its checkpoint: table j (s*seg <= j <= end) at buf + at[j - s*seg].
  std::vector<size_t> at(seg + 1);
  auto run_segment = [&](size_t s, const double* start, bool keep_marks) {
    const size_t j0 = s * seg, j1 = std::min(J, (s + 1) * seg);
    at[0] = 0;
    std::copy(start, start + hi[j0] + 1, buf.data());
    for (size_t j = j0; j < j1; ++j) {
      at[j - j0 + 1] = at[j - j0] + static_cast<size_t>(hi[j]) + 1;
      dp_step(buf.data() + at[j - j0], hi[j], kept[j], buf.data() + at[j - j0 + 1], hi[j + 1], maxg_all, padded);
    }
    if (keep_marks && nseg > 1)
      std::copy(buf.data() + at[j1 - j0], buf.data() + at[j1 - j0] + hi[j1] + 1, marks.data() + mark_at[s + 1]);
  };
  const double zero = 0.0;
  if (nseg > 1) marks[0] = 0.0;
  for (size_t s = 0; s < nseg; ++s) {
    run_segment(s, nseg > 1 ? marks.data() + mark_at[s] : &zero, true);
    for (size_t j = s * seg; j < std::min(J, (s + 1) * seg); ++j)
      sol.cells += static_cast<int64_t>(kept[j].size()) * (hi[j + 1] + 1);
  }
  // The last segment's tables are in buf now.
  const size_t last_seg = nseg == 0 ? 0 : nseg - 1;
  int c = hi[J];
  const double best = J == 0 ? 0.0 : buf[at[J - last_seg * seg] + static_cast<size_t>(c)];
  if (best == kNegInf) throw_infeasible(jobs, kept, capacity);
  sol.objective = best;
  sol.choices.assign(J, Choice{});
  for (size_t s = nseg; s-- > 0;) {
    if (s != last_seg) run_segment(s, marks.data() + mark_at[s], false);
    const size_t j0 = s * seg;
    for (size_t j = std::min(J, (s + 1) * seg); j-- > j0;) {
      c = std::min(c, hi[j + 1]);
      const double target = buf[at[j - j0 + 1] + static_cast<size_t>(c)];
      const double* in = buf.data() + at[j - j0];
      const int hp = hi[j];
      const Kept* pick = pick_option(jobs[j], kept[j], in, hp, c, target);
      EDP_CHECK(pick != nullptr, "solve: internal error, no option reproduces the DP value of job #", j);
      sol.choices[j] = Choice{pick->gpus, pick->batch, pick->value, pick->tag};
      c -= pick->gpus;
      sol.gpus_used += pick->gpus;
    }
  }
  return sol;
}

Solution solve_brute_force(const std::vector<DpJob>& jobs, int capacity) {
  const size_t J = jobs.size();
  std::vector<Choice> cur(J), best_choice;
  double best = kNegInf;
  // Depth-first over every job's options (plus waiting), cut only by capacity.
  auto rec = [&](auto&& self, size_t j, int left, double acc) -> void {
    if (j == J) {
      if (acc > best) {
        best = acc;
        best_choice = cur;
      }
      return;
    }
    if (jobs[j].may_wait) {
      cur[j] = Choice{0, 0, 0.0};
      self(self, j + 1, left, acc + 0.0);
    }
    for (const Option& o : jobs[j].options) {
      if (o.gpus > left) continue;
      cur[j] = Choice{o.gpus, o.batch, o.value, o.tag};
      self(self, j + 1, left - o.gpus, acc + o.value);
    }
  };
  rec(rec, 0, capacity, 0.0);
  EDP_CHECK(best != kNegInf, "solve_brute_force: no feasible assignment");
  Solution s;
  s.objective = best;
  s.choices = best_choice;
  for (const Choice& ch : s.choices) s.gpus_used += ch.gpus;
  return s;
}

}  // namespace edp::autoscale
