// The optimizer over several GPU types (typed_optimizer.h): the exact product-space DP, and the
// Lagrangian decomposition into one exact one-type DP per type for problems too large for it.
#include "edp/autoscale/typed_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

#include "edp/autoscale/optimizer.h"
#include "edp/core/error.h"

namespace edp::autoscale {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// An option that survived the exact reductions, with its index in the job's options.
struct Kept {
  std::vector<int> gpus;
  int batch = 0;
  double value = 0;
  int tag = 0;
  int index = -1;
  bool current = false;
  int total = 0;  // GPUs of every type together
};

void check(const std::vector<TypedJob>& jobs, const std::vector<int>& capacity) {
  EDP_CHECK(!capacity.empty(), "solve_typed: no GPU type (capacity is empty)");
  for (size_t t = 0; t < capacity.size(); ++t)
    EDP_CHECK(capacity[t] >= 0, "solve_typed: type #", t, " has capacity ", capacity[t], " (must be >= 0)");
  for (size_t j = 0; j < jobs.size(); ++j)
    for (size_t i = 0; i < jobs[j].options.size(); ++i) {
      const TypedOption& o = jobs[j].options[i];
      EDP_CHECK(o.gpus.size() == capacity.size(), "solve_typed: job #", j, " option #", i, " gives GPUs of ",
                o.gpus.size(), " types, the cluster has ", capacity.size());
      int total = 0;
      for (int g : o.gpus) {
        EDP_CHECK(g >= 0, "solve_typed: job #", j, " option #", i, " has a negative GPU count");
        total += g;
      }
      EDP_CHECK(total >= 1, "solve_typed: job #", j, " option #", i,
                " has no GPU (waiting is may_wait, not an option)");
      EDP_CHECK(std::isfinite(o.value), "solve_typed: job #", j, " option #", i, " has a non-finite value");
    }
}

bool within(const std::vector<int>& a, const std::vector<int>& b) {  // a <= b in every type
  for (size_t t = 0; t < a.size(); ++t)
    if (a[t] > b[t]) return false;
  return true;
}

// The type a GPU vector uses, or -1 when it spans types.
int type_of(const std::vector<int>& gpus) {
  int t = -1;
  for (size_t u = 0; u < gpus.size(); ++u)
    if (gpus[u] > 0) {
      if (t >= 0) return -1;
      t = static_cast<int>(u);
    }
  return t;
}
int type_of(const Kept& k) { return type_of(k.gpus); }

// The exact reductions for one job: options that fit; per GPU vector the best (ties: the current
// one, then the smaller batch); then every option that costs at least as much of each type as
// another (or as waiting) and is worth no more, unless it is the current one and worth as much.
// Sorted by GPUs in all, then by GPU vector.
std::vector<Kept> reduce(const TypedJob& job, const std::vector<int>& capacity) {
  // Each option that fits as a small record (no copies of GPU vectors): its vector as one number
  // in mixed radix (the first type most significant, so the numbers order as the vectors do).
  struct Cand {
    int64_t key;
    int total;
    double value;
    int batch;
    int index;
    bool current;
  };
  // Where the vectors would not fit one number (many types of huge capacities) they are compared
  // as vectors instead.
  double cells = 1;
  for (int c : capacity) cells *= c + 1.0;
  const bool packed = cells < 4e18;
  std::vector<Cand> cands;
  cands.reserve(job.options.size());
  for (size_t i = 0; i < job.options.size(); ++i) {
    const TypedOption& o = job.options[i];
    if (!within(o.gpus, capacity)) continue;
    Cand c{0, 0, o.value, o.batch, static_cast<int>(i), o.current};
    for (size_t t = 0; t < capacity.size(); ++t) {
      if (packed) c.key = c.key * (capacity[t] + 1) + o.gpus[t];
      c.total += o.gpus[t];
    }
    cands.push_back(c);
  }
  // In the order the DP takes them (fewest GPUs first), each GPU vector's best first: the higher
  // value, then the current option, then the smaller batch, then the earlier option.
  auto gpus = [&](const Cand& c) -> const std::vector<int>& { return job.options[static_cast<size_t>(c.index)].gpus; };
  std::sort(cands.begin(), cands.end(), [&](const Cand& a, const Cand& b) {
    if (a.total != b.total) return a.total < b.total;
    if (a.key != b.key) return a.key < b.key;
    if (!packed && gpus(a) != gpus(b)) return gpus(a) < gpus(b);
    if (a.value != b.value) return a.value > b.value;
    if (a.current != b.current) return a.current;
    if (a.batch != b.batch) return a.batch < b.batch;
    return a.index < b.index;
  });
  // Each GPU vector's best (the records still refer to the job's options: only the survivors of
  // the dominance below are copied out, GPU vector and all).
  size_t distinct = 0;
  for (size_t n = 0; n < cands.size(); ++n) {
    if (n > 0 && cands[n].key == cands[n - 1].key && (packed || gpus(cands[n]) == gpus(cands[n - 1]))) continue;
    cands[distinct++] = cands[n];
  }
  cands.resize(distinct);
  // Dominance. An option on one type is within another only if that one is on the same type with
  // fewer GPUs, all of which come before it: the best value among them (a running maximum per
  // type) decides. An option spanning types is checked against every other.
  std::vector<Kept> kept;
  std::vector<double> best_below(capacity.size(), kNegInf);
  for (const Cand& o : cands) {
    const int t = type_of(gpus(o));
    bool dominated = job.may_wait && (o.value < 0 || (o.value == 0 && !o.current));
    if (t >= 0) {
      const double b = best_below[static_cast<size_t>(t)];
      dominated = dominated || b > o.value || (b == o.value && !o.current);
      best_below[static_cast<size_t>(t)] = std::max(b, o.value);
    } else {
      for (const Cand& p : cands) {
        if (dominated) break;
        if (&p == &o || !within(gpus(p), gpus(o))) continue;
        dominated = p.value > o.value || (p.value == o.value && !o.current);
      }
    }
    if (dominated) continue;
    const TypedOption& x = job.options[static_cast<size_t>(o.index)];
    kept.push_back(Kept{x.gpus, x.batch, x.value, x.tag, o.index, x.current, o.total});
  }
  return kept;
}

[[noreturn]] void infeasible(const std::vector<TypedJob>& jobs, const std::vector<int>& capacity) {
  std::ostringstream os;
  os << "the jobs that must run cannot all fit in the cluster (";
  for (size_t t = 0; t < capacity.size(); ++t) os << (t ? ", " : "") << capacity[t];
  os << " GPUs by type):";
  for (size_t j = 0; j < jobs.size(); ++j)
    if (!jobs[j].may_wait) os << " job #" << j;
  os << " must run";
  throw Error(os.str());
}

TypedChoice choice_of(const Kept* k, size_t types) {
  TypedChoice c;
  c.gpus.assign(types, 0);
  if (!k) return c;
  return TypedChoice{k->gpus, k->batch, k->value, k->tag, k->index};
}

void finish(TypedSolution& s, size_t types) {
  s.gpus_used.assign(types, 0);
  s.objective = 0;
  for (const TypedChoice& c : s.choices) {
    s.objective += c.value;
    for (size_t t = 0; t < types; ++t) s.gpus_used[t] += c.gpus[t];
  }
}

// ---- exact: the DP over the product of the capacities ----------------------------------------

// Cells per lane: one AVX-512 register of doubles (two AVX2 ones). Rows are whole lanes.
constexpr int kLane = 8;
// The most lanes of a tile: 48 cells, 12 AVX2 or 6 AVX-512 registers, leaving room for the value
// and the loads.
constexpr int kTileLanes = 6;

// The layout of a table: one row per combination of the types but the last (row index =
// sum_{t<last} c_t x row_stride_t), in a row the last type's cells, contiguous, rounded up to
// whole lanes. A cell's index is row x width + c_last, so an option moves every cell by one shift.
struct Layout {
  std::vector<int64_t> row_stride;  // per type but the last
  int64_t rows = 1;
  int64_t width = 0;  // the last type's cells, rounded up to whole lanes
  int64_t cells = 0;  // rows x width
  explicit Layout(const std::vector<int>& capacity) : row_stride(capacity.size() - 1) {
    for (size_t t = row_stride.size(); t-- > 0;) {
      row_stride[t] = rows;
      rows *= capacity[t] + 1;
    }
    width = (capacity.back() + kLane) / kLane * kLane;
    cells = rows * width;
  }
  // The index of the cell c, and (the map being linear) how far an option of g GPUs moves a cell.
  int64_t index(const std::vector<int>& c) const {
    int64_t r = 0;
    for (size_t t = 0; t < row_stride.size(); ++t) r += c[t] * row_stride[t];
    return r * width + c.back();
  }
};

// A kept option as the DP applies it: how far it moves a cell, and its value.
struct Step {
  int64_t shift;
  double value;
};

// A lane of cells as one value (GCC's and Clang's vector extension): the tile's lanes stay in
// registers, one AVX-512 register or two AVX2 ones each. Written as plain loops, the compiler
// vectorized the loop over the options instead, with gathers, several times slower.
using Lane = double __attribute__((vector_size(kLane * sizeof(double))));

Lane load(const double* p) {
  Lane l;
  std::memcpy(&l, p, sizeof l);
  return l;
}

// The steps a row takes, in groups that read the same place: the options on the last type alone
// read the row itself, from a copy after -inf (an option of g GPUs of it reads g cells before
// each cell, -inf below c_last = g); those on another type alone read another row, all of it.
struct Group {
  const double* from;  // the source at the tile's first cell
  const Step* steps;
  size_t n;
};

// One tile of L lanes of a row, out[0..L x kLane): the max of init[...] (the cells of in when the
// job may wait, else -inf) and from[x - shift] + value for each step of the groups. The tile stays
// in registers while all of the job's steps go over it: out is written once per job, not once
// per option as when each option swept the whole table.
template <int L>
void relax_tile(const double* init, double* out, const Group* groups, size_t n_groups) {
  Lane acc[L];
  for (int l = 0; l < L; ++l) acc[l] = load(init + l * kLane);
  for (size_t g = 0; g < n_groups; ++g)
    for (size_t s = 0; s < groups[g].n; ++s) {
      const double* i = groups[g].from - groups[g].steps[s].shift;
      const Lane v = groups[g].steps[s].value - Lane{};  // the value in every cell (v - 0 is v, -0 too)
      for (int l = 0; l < L; ++l) {
        const Lane t = load(i + l * kLane) + v;
        acc[l] = acc[l] < t ? t : acc[l];  // max, as std::max(acc, t)
      }
    }
  std::memcpy(out, acc, sizeof acc);
}

void relax(int lanes, const double* init, double* out, const Group* groups, size_t n_groups) {
  switch (lanes) {
    case 1: return relax_tile<1>(init, out, groups, n_groups);
    case 2: return relax_tile<2>(init, out, groups, n_groups);
    case 3: return relax_tile<3>(init, out, groups, n_groups);
    case 4: return relax_tile<4>(init, out, groups, n_groups);
    case 5: return relax_tile<5>(init, out, groups, n_groups);
    default: return relax_tile<6>(init, out, groups, n_groups);
  }
}

TypedSolution solve_exact(const std::vector<TypedJob>& jobs, const std::vector<std::vector<Kept>>& kept,
                          const std::vector<int>& capacity) {
  const size_t J = jobs.size(), K = capacity.size(), m = K - 1;
  const Layout grid(capacity);
  const size_t S = static_cast<size_t>(grid.cells);
  // F_j(c): the best value of jobs 0..j-1 within c GPUs of each type (every cell starts at 0:
  // "at most c", so the tables only grow along each type).
  // Reused across calls of the same thread and never zero-filled (every cell read is written
  // first): fresh pages would cost a fault each, the simulators solve thousands of times.
  thread_local std::vector<double> tables;
  if (tables.size() < (J + 1) * S) tables.resize((J + 1) * S);
  std::fill(tables.begin(), tables.begin() + static_cast<std::ptrdiff_t>(S), 0.0);
  auto table = [&](size_t j) { return tables.data() + j * S; };
  // The copy of a row that the options on the last type read, after -inf for their reads below
  // c_last = 0 (as many cells as the largest of them needs, in whole lanes).
  int most = 0;
  for (const auto& ks : kept)
    for (const Kept& k : ks) most = std::max(most, k.gpus.back());
  const int64_t before = (most + kLane - 1) / kLane * kLane;
  std::vector<double> stage(static_cast<size_t>(before + grid.width), kNegInf);
  double* row_copy = stage.data() + before;
  const std::vector<double> none(static_cast<size_t>(grid.width), kNegInf);  // init when the job must run
  // The tiles of a row: its lanes split as evenly as can be into tiles of at most kTileLanes.
  const int lanes = static_cast<int>(grid.width / kLane);
  const int tiles = (lanes + kTileLanes - 1) / kTileLanes;
  // Only the cells the readback can reach are computed: it starts at every type's whole capacity
  // and each job after j takes at most its largest demand of each type, so table j+1 is needed
  // where c_t >= capacity_t - (the sum of those demands): lo[j + 1].
  std::vector<std::vector<int>> lo(J + 1, std::vector<int>(K));
  {
    std::vector<int> after(K, 0);
    for (size_t j = J + 1; j-- > 0;) {
      for (size_t t = 0; t < K; ++t) lo[j][t] = std::max(0, capacity[t] - after[t]);
      if (j == 0) break;
      for (size_t t = 0; t < K; ++t) {
        int d = 0;
        for (const Kept& k : kept[j - 1]) d = std::max(d, k.gpus[t]);
        after[t] += d;
      }
    }
  }
  TypedSolution sol;
  std::vector<int> c(m);
  // A job's options by the type they use: along[] on the last type alone; on[u] on type u alone,
  // fewest GPUs first, so that a row with c_u GPUs of it takes the first fit[u][c_u] of them;
  // spanning[] the rest, checked cell by cell.
  std::vector<Step> along;
  std::vector<std::vector<Step>> on(m);
  std::vector<std::vector<size_t>> fit(m);
  std::vector<const Kept*> spanning;
  std::vector<Group> groups;
  for (size_t j = 0; j < J; ++j) {
    const double* in = table(j);
    double* out = table(j + 1);
    along.clear();
    spanning.clear();
    for (size_t u = 0; u < m; ++u) on[u].clear();
    for (const Kept& k : kept[j]) {  // fewest GPUs first (reduce)
      const int t = type_of(k);
      if (t == static_cast<int>(m))
        along.push_back(Step{k.gpus.back(), k.value});
      else if (t >= 0)
        on[static_cast<size_t>(t)].push_back(Step{grid.index(k.gpus), k.value});
      else
        spanning.push_back(&k);
    }
    for (size_t u = 0; u < m; ++u) {
      fit[u].assign(static_cast<size_t>(capacity[u]) + 1, 0);
      for (const Step& s : on[u]) ++fit[u][static_cast<size_t>(s.shift / (grid.row_stride[u] * grid.width))];
      for (size_t v = 1; v < fit[u].size(); ++v) fit[u][v] += fit[u][v - 1];
    }
    // The rows within lo[j + 1], by an odometer over the types but the last.
    const std::vector<int>& low = lo[j + 1];
    for (size_t u = 0; u < m; ++u) c[u] = low[u];
    const int first_lane = low.back() / kLane;
    for (bool more = true; more;) {
      int64_t row = 0;
      for (size_t u = 0; u < m; ++u) row += c[u] * grid.row_stride[u];
      const int64_t cell0 = row * grid.width;
      for (int64_t x = 0; x < grid.width; x += kLane) std::memcpy(row_copy + x, in + cell0 + x, sizeof(Lane));
      int at = 0;
      for (int tile = 0; tile < tiles; ++tile) {
        const int w = lanes / tiles + (tile < lanes % tiles ? 1 : 0);
        if (at + w > first_lane) {
          const int64_t x = at * kLane, cell = cell0 + x;
          groups.clear();
          groups.push_back(Group{row_copy + x, along.data(), along.size()});
          for (size_t u = 0; u < m; ++u)
            groups.push_back(Group{in + cell, on[u].data(), fit[u][static_cast<size_t>(c[u])]});
          relax(w, jobs[j].may_wait ? in + cell : none.data() + x, out + cell, groups.data(), groups.size());
          for (const Group& g : groups) sol.cells += int64_t{w} * kLane * static_cast<int64_t>(g.n);
        }
        at += w;
      }
      // Options spanning types, when the row has what they need of the types but the last.
      for (const Kept* k : spanning) {
        if (!std::equal(k->gpus.begin(), k->gpus.end() - 1, c.begin(), std::less_equal<int>())) continue;
        const int64_t shift = grid.index(k->gpus);
        for (int64_t x = std::max(k->gpus.back(), first_lane * kLane); x <= capacity.back(); ++x)
          out[cell0 + x] = std::max(out[cell0 + x], in[cell0 + x - shift] + k->value);
        sol.cells += capacity.back() + 1 - k->gpus.back();
      }
      more = false;
      for (size_t u = m; u-- > 0;) {
        if (++c[u] <= capacity[u]) {
          more = true;
          break;
        }
        c[u] = low[u];
      }
    }
  }
  int64_t at = grid.index(capacity);  // every type's whole capacity
  if (table(J)[at] == kNegInf) infeasible(jobs, capacity);
  sol.choices.resize(J);
  std::vector<int> left = capacity;
  for (size_t j = J; j-- > 0;) {
    const double target = table(j + 1)[at];
    const double* in = table(j);
    auto reaches = [&](const Kept& k) {
      return within(k.gpus, left) && in[at - grid.index(k.gpus)] + k.value == target;
    };
    const Kept* pick = nullptr;
    bool wait = false;
    for (const Kept& k : kept[j])
      if (k.current && reaches(k)) pick = &k;
    if (!pick) wait = jobs[j].may_wait && in[at] == target;
    if (!pick && !wait)
      for (const Kept& k : kept[j])
        if (reaches(k)) {
          pick = &k;
          break;
        }
    EDP_CHECK(pick || wait, "solve_typed: internal error, no option reproduces the DP value of job #", j);
    sol.choices[j] = choice_of(pick, capacity.size());
    if (pick) {
      at -= grid.index(pick->gpus);
      for (size_t t = 0; t < left.size(); ++t) left[t] -= pick->gpus[t];
    }
  }
  sol.method = "exact";
  sol.exact = true;
  finish(sol, capacity.size());
  sol.bound = sol.objective;
  return sol;
}

// ---- decomposed: Lagrangian prices, one exact one-type DP per type ------------------------------


// Each job's best option at prices lambda (nullptr: waiting); the dual value and its subgradient.
struct Priced {
  std::vector<const Kept*> pick;
  double dual = 0;
  std::vector<double> subgradient;
};

Priced price(const std::vector<TypedJob>& jobs, const std::vector<std::vector<Kept>>& kept,
             const std::vector<int>& capacity, const std::vector<double>& lambda) {
  const size_t K = capacity.size();
  Priced p{std::vector<const Kept*>(jobs.size(), nullptr), 0, std::vector<double>(K)};
  for (size_t t = 0; t < K; ++t) {
    p.dual += lambda[t] * capacity[t];
    p.subgradient[t] = capacity[t];
  }
  for (size_t j = 0; j < jobs.size(); ++j) {
    double best = jobs[j].may_wait ? 0.0 : kNegInf;
    for (const Kept& k : kept[j]) {
      double r = k.value;
      for (size_t t = 0; t < K; ++t) r -= lambda[t] * k.gpus[t];
      if (r > best) {
        best = r;
        p.pick[j] = &k;
      }
    }
    p.dual += best;
    if (p.pick[j])
      for (size_t t = 0; t < K; ++t) p.subgradient[t] -= p.pick[j]->gpus[t];
  }
  return p;
}

// A feasible solution from prices: each job goes to the type of its best one-type option at those
// prices, each type is solved exactly over its jobs, then jobs left waiting take what is left of
// any type, best value first. Returns false when the jobs that must run do not fit this way.
bool primal(const std::vector<TypedJob>& jobs, const std::vector<std::vector<Kept>>& kept,
            const std::vector<int>& capacity, const std::vector<double>& lambda, TypedSolution& out) {
  const size_t K = capacity.size(), J = jobs.size();
  std::vector<int> home(J, -1);
  for (size_t j = 0; j < J; ++j) {
    double best = kNegInf;
    for (const Kept& k : kept[j]) {
      const int t = type_of(k);
      if (t < 0) continue;
      // The job's current type when it runs there and must keep running.
      const double r = k.value - lambda[static_cast<size_t>(t)] * k.gpus[static_cast<size_t>(t)] +
                       (k.current && !jobs[j].may_wait ? 1e300 : 0.0);
      if (r > best) {
        best = r;
        home[j] = t;
      }
    }
    if (home[j] < 0 && !jobs[j].may_wait) return false;
  }
  TypedSolution s;
  s.choices.assign(J, choice_of(nullptr, K));
  std::vector<int> left = capacity;
  for (size_t t = 0; t < K; ++t) {
    std::vector<DpJob> dp;
    std::vector<size_t> who;
    for (size_t j = 0; j < J; ++j) {
      if (home[j] != static_cast<int>(t)) continue;
      DpJob d;
      d.may_wait = jobs[j].may_wait;
      for (size_t i = 0; i < kept[j].size(); ++i) {
        const Kept& k = kept[j][i];
        if (type_of(k) != static_cast<int>(t)) continue;
        d.options.push_back(Option{k.gpus[t], k.batch, k.value, static_cast<int>(i)});
        if (k.current) {
          d.current_gpus = k.gpus[t];
          d.current_batch = k.batch;
        }
      }
      dp.push_back(std::move(d));
      who.push_back(j);
    }
    if (dp.empty()) continue;
    Solution one;
    try {
      one = solve(dp, capacity[t]);
    } catch (const Error&) {
      return false;  // this type's must-run jobs do not fit it
    }
    s.cells += one.cells;
    for (size_t x = 0; x < who.size(); ++x)
      if (one.choices[x].gpus > 0) {
        s.choices[who[x]] = choice_of(&kept[who[x]][static_cast<size_t>(one.choices[x].tag)], K);
        left[t] -= one.choices[x].gpus;
      }
  }
  // Jobs still waiting, by their best value: any option that fits what is left.
  std::vector<std::pair<double, size_t>> waiting;
  for (size_t j = 0; j < J; ++j)
    if (s.choices[j].option < 0 && !kept[j].empty()) {
      double v = kNegInf;
      for (const Kept& k : kept[j]) v = std::max(v, k.value);
      if (v > 0) waiting.push_back({-v, j});
    }
  std::sort(waiting.begin(), waiting.end());
  for (const auto& [neg, j] : waiting) {
    const Kept* best = nullptr;
    for (const Kept& k : kept[j])
      if (within(k.gpus, left) && k.value > 0 && (!best || k.value > best->value)) best = &k;
    if (!best) continue;
    s.choices[j] = choice_of(best, K);
    for (size_t t = 0; t < K; ++t) left[t] -= best->gpus[t];
  }
  finish(s, K);
  out = std::move(s);
  return true;
}

TypedSolution solve_decomposed(const std::vector<TypedJob>& jobs, const std::vector<std::vector<Kept>>& kept,
                               const std::vector<int>& capacity) {
  const size_t K = capacity.size();
  std::vector<double> lambda(K, 0.0), best_lambda = lambda;
  double bound = std::numeric_limits<double>::infinity();
  TypedSolution best;
  bool have = false;
  auto try_primal = [&](const std::vector<double>& l) {
    TypedSolution s;
    if (primal(jobs, kept, capacity, l, s) && (!have || s.objective > best.objective)) {
      best = std::move(s);
      have = true;
    }
  };
  // Subgradient descent on the dual, with Polyak's step toward the best feasible value so far; the
  // step's scale halves after 20 rounds without a better bound.
  constexpr int kRounds = 300, kPrimalEvery = 50;
  double scale = 1.0;
  int stale = 0;
  int64_t cells = 0;
  for (int round = 0; round < kRounds; ++round) {
    const Priced p = price(jobs, kept, capacity, lambda);
    for (const auto& ks : kept) cells += static_cast<int64_t>(ks.size());
    if (round == 0 || p.dual < bound - 1e-12 * std::max(1.0, std::fabs(bound))) {
      bound = p.dual;
      best_lambda = lambda;
      stale = 0;
    } else if (++stale >= 20) {
      scale /= 2;
      stale = 0;
    }
    if (round % kPrimalEvery == 0) try_primal(lambda);
    if (have && bound - best.objective <= 1e-9 * std::max(1.0, std::fabs(best.objective))) break;
    double norm = 0;
    for (double g : p.subgradient) norm += g * g;
    if (norm == 0) break;  // every type exactly full at these prices: the bound is reached
    const double target = have ? best.objective : 0.0;
    const double step = scale * std::max(p.dual - target, 1e-9 * std::max(1.0, std::fabs(p.dual))) / norm;
    for (size_t t = 0; t < K; ++t) lambda[t] = std::max(0.0, lambda[t] - step * p.subgradient[t]);
  }
  try_primal(best_lambda);
  if (!have) infeasible(jobs, capacity);
  best.cells += cells;
  best.bound = std::max(bound, best.objective);
  best.exact = best.bound - best.objective <= 1e-9 * std::max(1.0, std::fabs(best.objective));
  best.method = "decomposed";
  return best;
}

}  // namespace

TypedSolution solve_typed(const std::vector<TypedJob>& jobs, const std::vector<int>& capacity,
                          const std::string& force) {
  check(jobs, capacity);
  EDP_CHECK(force.empty() || force == "exact" || force == "decomposed", "solve_typed: method '", force,
            "' (known: exact, decomposed)");
  std::vector<std::vector<Kept>> kept(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    kept[j] = reduce(jobs[j], capacity);
    if (!jobs[j].may_wait && kept[j].empty()) infeasible(jobs, capacity);
  }
  // Cells per table as laid out (rows in whole lanes; Layout is the same in any order of the types
  // but the last, which is the largest below).
  std::vector<int> sorted = capacity;
  std::sort(sorted.begin(), sorted.end());
  const int64_t cells = Layout(sorted).cells;
  const bool small = cells <= kExactCells / static_cast<int64_t>(jobs.size() + 1);
  if (force == "exact" || (force.empty() && small)) {
    EDP_CHECK(small, "solve_typed: the exact method needs ", cells, " cells per job for ", jobs.size(),
              " jobs, more than ", kExactCells, " in all");
    // The largest type last: its options run along the contiguous axis, in the fewest, longest runs.
    std::vector<size_t> order(capacity.size());
    for (size_t t = 0; t < order.size(); ++t) order[t] = t;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return capacity[a] < capacity[b]; });
    auto permute = [&](const std::vector<int>& v) {
      std::vector<int> out(v.size());
      for (size_t t = 0; t < v.size(); ++t) out[t] = v[order[t]];
      return out;
    };
    std::vector<int> scratch(capacity.size());  // in place: no vector made per option
    for (auto& ks : kept)
      for (Kept& k : ks) {
        for (size_t t = 0; t < scratch.size(); ++t) scratch[t] = k.gpus[order[t]];
        std::copy(scratch.begin(), scratch.end(), k.gpus.begin());
      }
    TypedSolution sol = solve_exact(jobs, kept, permute(capacity));
    for (TypedChoice& c : sol.choices) {  // back to the caller's order of types
      std::vector<int> g(c.gpus.size());
      for (size_t t = 0; t < g.size(); ++t) g[order[t]] = c.gpus[t];
      c.gpus = std::move(g);
    }
    finish(sol, capacity.size());
    return sol;
  }
  return solve_decomposed(jobs, kept, capacity);
}

TypedSolution solve_typed_brute_force(const std::vector<TypedJob>& jobs, const std::vector<int>& capacity) {
  check(jobs, capacity);
  const size_t K = capacity.size(), J = jobs.size();
  std::vector<int> pick(J, -1), best_pick;
  double best = kNegInf;
  std::vector<int> left = capacity;
  std::function<void(size_t, double)> go = [&](size_t j, double value) {
    if (j == J) {
      if (value > best) {
        best = value;
        best_pick = pick;
      }
      return;
    }
    if (jobs[j].may_wait) {
      pick[j] = -1;
      go(j + 1, value);
    }
    for (size_t i = 0; i < jobs[j].options.size(); ++i) {
      const TypedOption& o = jobs[j].options[i];
      if (!within(o.gpus, left)) continue;
      for (size_t t = 0; t < K; ++t) left[t] -= o.gpus[t];
      pick[j] = static_cast<int>(i);
      go(j + 1, value + o.value);
      for (size_t t = 0; t < K; ++t) left[t] += o.gpus[t];
    }
    pick[j] = -1;
  };
  go(0, 0.0);
  if (best == kNegInf) infeasible(jobs, capacity);
  TypedSolution s;
  s.choices.assign(J, choice_of(nullptr, K));
  for (size_t j = 0; j < J; ++j)
    if (best_pick[j] >= 0) {
      const TypedOption& o = jobs[j].options[static_cast<size_t>(best_pick[j])];
      s.choices[j] = TypedChoice{o.gpus, o.batch, o.value, o.tag, best_pick[j]};
    }
  s.method = "brute-force";
  s.exact = true;
  finish(s, K);
  s.bound = s.objective;
  return s;
}

}  // namespace edp::autoscale
