// The optimizer over several GPU types (typed_optimizer.h): the exact product-space DP, and the
// Lagrangian decomposition into one exact one-type DP per type for problems too large for it.
#include "edp/autoscale/typed_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <optional>
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
  int type = -1;  // the type it uses, -1 when it spans types
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
int type_of(const Kept& k) { return k.type; }

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
    int type;  // -1: spans types
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
    Cand c{0, 0, o.value, o.batch, static_cast<int>(i), -1, o.current};
    int types = 0;
    for (size_t t = 0; t < capacity.size(); ++t) {
      if (packed) c.key = c.key * (capacity[t] + 1) + o.gpus[t];
      c.total += o.gpus[t];
      if (o.gpus[t] > 0) {
        c.type = static_cast<int>(t);
        ++types;
      }
    }
    if (types > 1) c.type = -1;
    cands.push_back(c);
  }
  auto gpus = [&](const Cand& c) -> const std::vector<int>& { return job.options[static_cast<size_t>(c.index)].gpus; };
  // Each GPU vector's best, in the order the DP takes them (fewest GPUs first, then by vector): the
  // higher value, then the current option, then the smaller batch, then the earlier option.
  auto better = [](const Cand& a, const Cand& b) {
    if (a.value != b.value) return a.value > b.value;
    if (a.current != b.current) return a.current;
    if (a.batch != b.batch) return a.batch < b.batch;
    return a.index < b.index;
  };
  // Where every option is on one type (the usual case), one pass over buckets (GPUs, type) finds
  // them without sorting (for the same GPUs in all, the vectors order as the types in reverse).
  const size_t K = capacity.size();
  bool one_type = packed;
  int most = 0;
  for (size_t n = 0; n < cands.size() && one_type; ++n) {
    one_type = cands[n].type >= 0;
    most = std::max(most, cands[n].total);
  }
  if (one_type && (static_cast<size_t>(most) + 1) * K <= 4 * cands.size() + 64) {  // else mostly empty buckets
    thread_local std::vector<int> slot;
    slot.assign((static_cast<size_t>(most) + 1) * K, -1);
    for (size_t n = 0; n < cands.size(); ++n) {
      int& b = slot[static_cast<size_t>(cands[n].total) * K + (K - 1 - static_cast<size_t>(cands[n].type))];
      if (b < 0 || better(cands[n], cands[static_cast<size_t>(b)])) b = static_cast<int>(n);
    }
    std::vector<Cand> best;
    best.reserve(cands.size());
    for (int b : slot)
      if (b >= 0) best.push_back(cands[static_cast<size_t>(b)]);
    cands = std::move(best);
  } else {
    std::sort(cands.begin(), cands.end(), [&](const Cand& a, const Cand& b) {
      if (a.total != b.total) return a.total < b.total;
      if (a.key != b.key) return a.key < b.key;
      if (!packed && gpus(a) != gpus(b)) return gpus(a) < gpus(b);
      return better(a, b);
    });
    size_t distinct = 0;
    for (size_t n = 0; n < cands.size(); ++n) {
      if (n > 0 && cands[n].key == cands[n - 1].key && (packed || gpus(cands[n]) == gpus(cands[n - 1]))) continue;
      cands[distinct++] = cands[n];
    }
    cands.resize(distinct);
  }
  // Dominance. An option on one type is within another only if that one is on the same type with
  // fewer GPUs, all of which come before it: the best value among them (a running maximum per
  // type) decides. An option spanning types is checked against every other.
  std::vector<Kept> kept;
  std::vector<double> best_below(capacity.size(), kNegInf);
  for (const Cand& o : cands) {
    const int t = o.type;
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
    kept.push_back(Kept{x.gpus, x.batch, x.value, x.tag, o.index, x.current, o.total, t});
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

// Pruning by bounds (docs/autoscaler.md, "Several GPU types"). With every type priced at λ but
// one, e, the jobs j.. can add at most Σ_{t≠e} λ_t r_t + H^e_j(r_e) with r GPUs left, where H^e_j
// is the one-type DP of the jobs j.. over type e, each option worth its value less λ x its GPUs of
// the other types (a Lagrangian bound, exact along e); the least of these over e bounds them too.
// A cell c of table j where F_j(c) + that bound at C - c is below the floor lies on no path to a
// plan worth the floor or more: it is set to -inf, a row left with no cell is not kept (nothing
// reads it, and the rows only it would feed are not computed), and a row's remaining cells bound
// the lanes the next job computes from it. Every cell on the path of a plan worth at least the
// floor passes, so when the optimum is worth that the DP finds it, with the same values along its
// path and the same choices as without pruning.
struct Prune {
  std::vector<double> lambda;             // per type, in the DP's order of types
  std::vector<std::vector<double>> tail;  // per type e, per table j = 0..J: H^e_j(r), r = 0..C_e
  double floor = kNegInf;                 // already lowered by the rounding tolerance
};

// The exact DP; with prune, cells are pruned by the bound and the result is nullopt when no plan
// worth prune->floor is found.
std::optional<TypedSolution> solve_exact(const std::vector<TypedJob>& jobs, const std::vector<std::vector<Kept>>& kept,
                                         const std::vector<int>& capacity, const Prune* prune) {
  const size_t J = jobs.size(), K = capacity.size(), m = K - 1;
  const Layout grid(capacity);
  const size_t S = static_cast<size_t>(grid.cells), R = static_cast<size_t>(grid.rows);
  // F_j(c): the best value of jobs 0..j-1 within c GPUs of each type (every cell starts at 0:
  // "at most c", so the tables only grow along each type).
  // Reused across calls of the same thread and never zero-filled (every cell read is written
  // first): fresh pages would cost a fault each, the simulators solve thousands of times.
  thread_local std::vector<double> tables;
  if (tables.size() < (J + 1) * S) tables.resize((J + 1) * S);
  std::fill(tables.begin(), tables.begin() + static_cast<std::ptrdiff_t>(S), 0.0);
  auto table = [&](size_t j) { return tables.data() + j * S; };
  // The rows of each table that hold values (computed and not pruned): any other row is -inf to
  // every reader, whatever its memory holds.
  std::vector<uint8_t> rows_held((J + 1) * R, 0);
  auto held = [&](size_t j) { return rows_held.data() + j * R; };
  // The copy of a row that the options on the last type read, after -inf for their reads below
  // c_last = 0 (as many cells as the largest of them needs, in whole lanes).
  int most = 0;
  for (const auto& ks : kept)
    for (const Kept& k : ks) most = std::max(most, k.gpus.back());
  const int64_t before = (most + kLane - 1) / kLane * kLane;
  std::vector<double> stage(static_cast<size_t>(before + grid.width), kNegInf);
  double* row_copy = stage.data() + before;
  const std::vector<double> none(static_cast<size_t>(grid.width), kNegInf);  // init when the job must run
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
  // The bound's terms for table j (Prune), along a row: along[x] = H^last_j(C_last - x) and
  // priced[x] = λ_last (C_last - x), both -inf below lo[j]. Per row, with s = Σ_{u<last} λ_u
  // (C_u - c_u), the bound at x is s + min(along[x], priced[x] + min_{e<last} (H^e_j(C_e - c_e) -
  // λ_e (C_e - c_e))).
  std::vector<double> along_h(static_cast<size_t>(grid.width)), priced(static_cast<size_t>(grid.width));
  auto price_table = [&](size_t j) {
    const int L = capacity.back();
    const double* h = prune->tail[m].data() + j * static_cast<size_t>(L + 1);
    for (int x = 0; x < grid.width; ++x) {
      const bool in = x >= lo[j].back() && x <= L;
      along_h[static_cast<size_t>(x)] = in ? h[L - x] : kNegInf;
      priced[static_cast<size_t>(x)] = in ? prune->lambda[m] * (L - x) : kNegInf;
    }
  };
  // A held row's cells that hold values: from live_a to live_b (of the last type); the others are
  // -inf (pruned) or, without pruning, below lo[j] and never read. Read only where held, so never
  // cleared.
  thread_local std::vector<int> live_a, live_b;
  if (live_a.size() < (J + 1) * R) {
    live_a.resize((J + 1) * R);
    live_b.resize((J + 1) * R);
  }
  // Keeps the cells of a computed row (cells from x0 to x1) whose bound reaches the floor: false
  // when there is none; else the row's other cells are set to -inf and its range is recorded.
  std::vector<double> sum(static_cast<size_t>(grid.width));
  auto keep = [&](size_t j, int64_t row, int x0, int x1, const std::vector<int>& c) {
    double* cells = table(j) + row * grid.width;
    const size_t at = j * R + static_cast<size_t>(row);
    x0 = std::max(x0, lo[j].back());
    x1 = std::min(x1, capacity.back());
    if (!prune) {
      live_a[at] = x0;
      live_b[at] = x1;
      return x0 <= x1;
    }
    double rest = 0, other = std::numeric_limits<double>::infinity();
    for (size_t u = 0; u < m; ++u) {
      const int left = capacity[u] - c[u];
      rest += prune->lambda[u] * left;
      other = std::min(other, prune->tail[u][j * static_cast<size_t>(capacity[u] + 1) + static_cast<size_t>(left)] -
                                  prune->lambda[u] * left);
    }
    const Lane shift = other - Lane{};
    for (int x = x0 / kLane * kLane; x <= x1; x += kLane) {
      const Lane a = load(along_h.data() + x), p = load(priced.data() + x) + shift;
      const Lane v = load(cells + x) + (a < p ? a : p);
      std::memcpy(sum.data() + x, &v, sizeof v);
    }
    const double floor = prune->floor - rest;
    int a = x0;
    while (a <= x1 && !(sum[static_cast<size_t>(a)] >= floor)) ++a;
    if (a > x1) return false;
    int b = x1;
    while (!(sum[static_cast<size_t>(b)] >= floor)) --b;
    std::fill(cells, cells + a, kNegInf);
    std::fill(cells + b + 1, cells + grid.width, kNegInf);
    live_a[at] = a;
    live_b[at] = b;
    return true;
  };
  // The rows by an odometer over the types but the last, from a lower corner.
  std::vector<int> c(m);
  auto first_row = [&](const std::vector<int>& low) {
    for (size_t u = 0; u < m; ++u) c[u] = low[u];
  };
  auto next_row = [&](const std::vector<int>& low) {
    for (size_t u = m; u-- > 0;) {
      if (++c[u] <= capacity[u]) return true;
      c[u] = low[u];
    }
    return false;
  };
  auto row_of = [&]() {
    int64_t row = 0;
    for (size_t u = 0; u < m; ++u) row += c[u] * grid.row_stride[u];
    return row;
  };
  // Each row's count of each type but the last.
  std::vector<int> coord(m * R);
  {
    const std::vector<int> zero(K, 0);
    first_row(zero);
    do {
      const int64_t row = row_of();
      for (size_t u = 0; u < m; ++u) coord[u * R + static_cast<size_t>(row)] = c[u];
    } while (next_row(zero));
  }
  // Table 0 (all zeros): its rows within lo[0].
  if (prune) price_table(0);
  std::vector<size_t> listed, next_listed;  // the held rows of table j, of table j + 1
  first_row(lo[0]);
  do {
    const int64_t row = row_of();
    held(0)[row] = keep(0, row, 0, capacity.back(), c);
    if (held(0)[row]) listed.push_back(static_cast<size_t>(row));
  } while (next_row(lo[0]));
  TypedSolution sol;
  // A job's options by the type they use: along[] on the last type alone; on[u] on type u alone;
  // spanning[] the rest, checked cell by cell. The options on another type alone reach a row from
  // the rows back along that type: each held row of the table in gives them to the rows it
  // reaches (reads[], by row: from reads[start[r]] to reads[start[r + 1]]).
  std::vector<Step> along, reads;
  std::vector<std::vector<Step>> on(m);
  std::vector<std::vector<int>> gpus_on(m);
  std::vector<std::vector<size_t>> fit(m);
  std::vector<uint32_t> start(R + 1);
  std::vector<const Kept*> spanning;
  std::vector<Group> groups;
  std::vector<size_t> todo;
  std::vector<int> read_a(R), read_b(R);
  int along_min = 0, along_max = 0;  // the fewest and most GPUs of the options along the last type
  for (size_t j = 0; j < J; ++j) {
    const double* in = table(j);
    double* out = table(j + 1);
    const uint8_t* in_held = held(j);
    uint8_t* out_held = held(j + 1);
    along.clear();
    spanning.clear();
    for (size_t u = 0; u < m; ++u) {
      on[u].clear();
      gpus_on[u].clear();
    }
    along_min = std::numeric_limits<int>::max();
    along_max = 0;
    for (const Kept& k : kept[j]) {  // fewest GPUs first (reduce)
      const int t = type_of(k);
      if (t == static_cast<int>(m)) {
        along.push_back(Step{k.gpus.back(), k.value});
        along_min = std::min(along_min, k.gpus.back());
        along_max = std::max(along_max, k.gpus.back());
      } else if (t >= 0) {
        const auto u = static_cast<size_t>(t);
        on[u].push_back(Step{grid.index(k.gpus), k.value});
        gpus_on[u].push_back(k.gpus[u]);
      } else {
        spanning.push_back(&k);
      }
    }
    // Two passes over the held rows: count what each row reads, then place it; and the range of
    // the cells it reads.
    std::fill(start.begin(), start.end(), 0);
    std::fill(read_a.begin(), read_a.end(), std::numeric_limits<int>::max());
    std::fill(read_b.begin(), read_b.end(), -1);
    const std::vector<int>& low = lo[j + 1];
    auto inside = [&](size_t r) {
      for (size_t u = 0; u < m; ++u)
        if (coord[u * R + r] < low[u]) return false;
      return true;
    };
    todo.clear();
    for (int pass = 0; pass < 2 && prune; ++pass) {
      for (const size_t r : listed) {
        for (size_t u = 0; u < m; ++u) {
          const int room = capacity[u] - coord[u * R + r];
          const int64_t rows_per_gpu = grid.row_stride[u];
          for (size_t s = 0; s < on[u].size() && gpus_on[u][s] <= room; ++s) {
            const size_t to = r + static_cast<size_t>(gpus_on[u][s] * rows_per_gpu);
            if (pass == 0) {
              if (start[to + 1]++ == 0 && !in_held[to] && inside(to)) todo.push_back(to);
              read_a[to] = std::min(read_a[to], live_a[j * R + r]);
              read_b[to] = std::max(read_b[to], live_b[j * R + r]);
            } else {
              reads[start[to]++] = on[u][s];
            }
          }
        }
      }
      if (pass == 0) {
        for (size_t r = 0; r < R; ++r) start[r + 1] += start[r];
        reads.resize(start[R]);
      } else {
        for (size_t r = R; r-- > 0;) start[r + 1] = start[r];  // back to the first of each row
        start[0] = 0;
      }
    }
    // The rows within lo[j + 1] that anything reaches: a held row (waiting, the options on the
    // last type), a row that reads another (above), any row when an option spans types.
    const int first_lane = low.back() / kLane;
    if (prune) price_table(j + 1);
    // Without pruning every row within lo[j] is held: a row with c_u GPUs of type u reads the
    // first fit[u][c_u] options on it (fewest GPUs first), no lists.
    if (!prune)
      for (size_t u = 0; u < m; ++u) {
        fit[u].assign(static_cast<size_t>(capacity[u]) + 1, 0);
        for (const int g : gpus_on[u]) ++fit[u][static_cast<size_t>(g)];
        for (size_t v = 1; v < fit[u].size(); ++v) fit[u][v] += fit[u][v - 1];
      }
    if (prune && spanning.empty()) {
      for (const size_t r : listed)
        if (inside(r)) todo.push_back(r);
    } else {
      todo.clear();
      for (size_t r = 0; r < R; ++r)
        if (inside(r)) todo.push_back(r);
    }
    next_listed.clear();
    for (const size_t r : todo) {
      const auto row = static_cast<int64_t>(r);
      for (size_t u = 0; u < m; ++u) c[u] = coord[u * R + r];
      const int64_t cell0 = row * grid.width;
      const bool self = in_held[row] != 0;
      bool spans = false;
      for (const Kept* k : spanning)
        spans = spans || (std::equal(k->gpus.begin(), k->gpus.end() - 1, c.begin(), std::less_equal<int>()) &&
                          in_held[row - grid.index(k->gpus) / grid.width]);
      const bool waits = jobs[j].may_wait && self;
      const bool walks = self && !along.empty();
      size_t n_reads = 0;
      if (prune) {
        n_reads = start[r + 1] - start[r];
      } else {
        for (size_t u = 0; u < m; ++u) n_reads += fit[u][static_cast<size_t>(c[u])];
      }
      // The cells anything reaches, in whole lanes.
      int x0 = std::numeric_limits<int>::max(), x1 = -1;
      if (!prune) {  // every row is computed (-inf where nothing reaches): its reads are not checked
        x0 = 0;
        x1 = capacity.back();
      } else if (n_reads) {
        x0 = read_a[r];
        x1 = read_b[r];
      }
      if (waits) {
        x0 = std::min(x0, live_a[j * R + r]);
        x1 = std::max(x1, live_b[j * R + r]);
      }
      if (walks) {
        x0 = std::min(x0, live_a[j * R + r] + along_min);
        x1 = std::max(x1, live_b[j * R + r] + along_max);
      }
      if (spans) {
        x0 = 0;
        x1 = capacity.back();
      }
      x1 = std::min(x1, capacity.back());
      const int lane0 = std::max(first_lane, x0 / kLane), lane1 = x1 / kLane;
      if (x0 > x1 || lane0 > lane1) continue;  // nothing reaches it: not held
      if (walks)
        for (int64_t x = 0; x < grid.width; x += kLane) std::memcpy(row_copy + x, in + cell0 + x, sizeof(Lane));
      // The lanes in tiles of at most kTileLanes, as even as can be.
      const int n_lanes = lane1 - lane0 + 1, n_tiles = (n_lanes + kTileLanes - 1) / kTileLanes;
      for (int tile = 0, at = lane0; tile < n_tiles; ++tile) {
        const int w = n_lanes / n_tiles + (tile < n_lanes % n_tiles ? 1 : 0);
        const int64_t x = at * kLane, cell = cell0 + x;
        groups.clear();
        if (walks) groups.push_back(Group{row_copy + x, along.data(), along.size()});
        if (prune && n_reads) groups.push_back(Group{in + cell, reads.data() + start[r], n_reads});
        if (!prune)
          for (size_t u = 0; u < m; ++u)
            if (const size_t n = fit[u][static_cast<size_t>(c[u])]) groups.push_back(Group{in + cell, on[u].data(), n});
        relax(w, waits ? in + cell : none.data() + x, out + cell, groups.data(), groups.size());
        for (const Group& g : groups) sol.cells += int64_t{w} * kLane * static_cast<int64_t>(g.n);
        at += w;
      }
      // Options spanning types, when the row has what they need of the types but the last and
      // the row they read is held.
      for (const Kept* k : spanning) {
        if (!std::equal(k->gpus.begin(), k->gpus.end() - 1, c.begin(), std::less_equal<int>())) continue;
        const int64_t shift = grid.index(k->gpus);
        if (!in_held[row - shift / grid.width]) continue;
        for (int64_t x = std::max(k->gpus.back(), lane0 * kLane); x <= capacity.back(); ++x)
          out[cell0 + x] = std::max(out[cell0 + x], in[cell0 + x - shift] + k->value);
        sol.cells += capacity.back() + 1 - k->gpus.back();
      }
      out_held[row] = keep(j + 1, row, lane0 * kLane, lane1 * kLane + kLane - 1, c);
      if (out_held[row]) next_listed.push_back(r);
    }
    listed.swap(next_listed);
  }
  int64_t at = grid.index(capacity);  // every type's whole capacity
  const double best = held(J)[at / grid.width] ? table(J)[at] : kNegInf;
  if (prune && !(best >= prune->floor)) return std::nullopt;
  if (best == kNegInf) infeasible(jobs, capacity);
  sol.choices.resize(J);
  std::vector<int> left = capacity;
  for (size_t j = J; j-- > 0;) {
    const double target = table(j + 1)[at];
    const double* in = table(j);
    const uint8_t* in_held = held(j);
    auto value_at = [&](int64_t cell) { return in_held[cell / grid.width] ? in[cell] : kNegInf; };
    auto reaches = [&](const Kept& k) {
      return within(k.gpus, left) && value_at(at - grid.index(k.gpus)) + k.value == target;
    };
    const Kept* pick = nullptr;
    bool wait = false;
    for (const Kept& k : kept[j])
      if (k.current && reaches(k)) pick = &k;
    if (!pick) wait = jobs[j].may_wait && value_at(at) == target;
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

// The kept options as the dual reads them, contiguous, in the jobs' order: job j's from first[j]
// to first[j + 1].
struct Priceable {
  double value;
  int type;   // -1: spans types (its GPU vector is read from the kept option)
  int total;  // GPUs in all
};
struct Menu {
  std::vector<Priceable> options;
  std::vector<size_t> first;
  explicit Menu(const std::vector<std::vector<Kept>>& kept) : first(kept.size() + 1, 0) {
    for (size_t j = 0; j < kept.size(); ++j) {
      for (const Kept& k : kept[j]) options.push_back(Priceable{k.value, k.type, k.total});
      first[j + 1] = options.size();
    }
  }
};

// Each job's best option at prices lambda (nullptr: waiting); the dual value and its subgradient.
struct Priced {
  std::vector<const Kept*> pick;
  double dual = 0;
  std::vector<double> subgradient;
};

void price(const std::vector<TypedJob>& jobs, const std::vector<std::vector<Kept>>& kept, const Menu& menu,
           const std::vector<int>& capacity, const std::vector<double>& lambda, Priced& p) {
  const size_t K = capacity.size();
  p.pick.assign(jobs.size(), nullptr);
  p.subgradient.resize(K);
  p.dual = 0;
  for (size_t t = 0; t < K; ++t) {
    p.dual += lambda[t] * capacity[t];
    p.subgradient[t] = capacity[t];
  }
  for (size_t j = 0; j < jobs.size(); ++j) {
    double best = jobs[j].may_wait ? 0.0 : kNegInf;
    size_t pick = 0;
    for (size_t i = menu.first[j]; i < menu.first[j + 1]; ++i) {
      const Priceable& o = menu.options[i];
      double r = o.value;
      if (o.type >= 0) {
        r -= lambda[static_cast<size_t>(o.type)] * o.total;
      } else {
        const Kept& k = kept[j][i - menu.first[j]];
        for (size_t t = 0; t < K; ++t) r -= lambda[t] * k.gpus[t];
      }
      if (r > best) {
        best = r;
        pick = i - menu.first[j] + 1;
      }
    }
    p.dual += best;
    if (pick) {
      p.pick[j] = &kept[j][pick - 1];
      for (size_t t = 0; t < K; ++t) p.subgradient[t] -= p.pick[j]->gpus[t];
    }
  }
}

// Each job's home at prices lambda: the type of its best one-type option at those prices (its
// current type when it runs there and must keep running); -1: none. False when a job that must
// run has none.
bool homes(const std::vector<TypedJob>& jobs, const std::vector<std::vector<Kept>>& kept,
           const std::vector<double>& lambda, std::vector<int>& home) {
  const size_t J = jobs.size();
  home.assign(J, -1);
  for (size_t j = 0; j < J; ++j) {
    double best = kNegInf;
    for (const Kept& k : kept[j]) {
      const int t = type_of(k);
      if (t < 0) continue;
      const double r = k.value - lambda[static_cast<size_t>(t)] * k.gpus[static_cast<size_t>(t)] +
                       (k.current && !jobs[j].may_wait ? 1e300 : 0.0);
      if (r > best) {
        best = r;
        home[j] = t;
      }
    }
    if (home[j] < 0 && !jobs[j].may_wait) return false;
  }
  return true;
}

// A feasible plan from homes: each type is solved exactly over the jobs at home there, then jobs
// left waiting take what is left of any type, best value first. pick: each job's option (nullptr:
// it waits); value: the plan's. Returns false when the jobs that must run do not fit this way.
bool primal(const std::vector<TypedJob>& jobs, const std::vector<std::vector<Kept>>& kept,
            const std::vector<int>& capacity, const std::vector<int>& home, std::vector<const Kept*>& pick,
            double& value) {
  const size_t K = capacity.size(), J = jobs.size();
  pick.assign(J, nullptr);
  value = 0;
  std::vector<int> left = capacity;
  thread_local std::vector<std::vector<DpJob>> pools;  // per type, reused: no allocation per call
  thread_local std::vector<size_t> who;
  pools.resize(K);
  for (size_t t = 0; t < K; ++t) {
    std::vector<DpJob>& dp = pools[t];
    who.clear();
    for (size_t j = 0; j < J; ++j)
      if (home[j] == static_cast<int>(t)) who.push_back(j);
    if (who.empty()) continue;
    dp.resize(who.size());
    for (size_t x = 0; x < who.size(); ++x) {
      const size_t j = who[x];
      DpJob& d = dp[x];
      d.options.clear();
      d.may_wait = jobs[j].may_wait;
      d.current_gpus = d.current_batch = 0;
      for (size_t i = 0; i < kept[j].size(); ++i) {
        const Kept& k = kept[j][i];
        if (k.type != static_cast<int>(t)) continue;
        d.options.push_back(Option{k.total, k.batch, k.value, static_cast<int>(i)});
        if (k.current) {
          d.current_gpus = k.total;
          d.current_batch = k.batch;
        }
      }
    }
    Solution one;
    try {
      one = solve(dp, capacity[t]);
    } catch (const Error&) {
      return false;  // this type's must-run jobs do not fit it
    }
    for (size_t x = 0; x < who.size(); ++x)
      if (one.choices[x].gpus > 0) {
        pick[who[x]] = &kept[who[x]][static_cast<size_t>(one.choices[x].tag)];
        left[t] -= one.choices[x].gpus;
      }
  }
  // Jobs still waiting, by their best value: any option that fits what is left.
  std::vector<std::pair<double, size_t>> waiting;
  for (size_t j = 0; j < J; ++j)
    if (!pick[j] && !kept[j].empty()) {
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
    pick[j] = best;
    for (size_t t = 0; t < K; ++t) left[t] -= best->gpus[t];
  }
  for (size_t j = 0; j < J; ++j)
    if (pick[j]) value += pick[j]->value;
  return true;
}

// The dual descended: the best prices found, the bound they give, the best feasible plan found.
struct Dual {
  std::vector<double> lambda;
  double bound = std::numeric_limits<double>::infinity();
  std::vector<const Kept*> plan;  // each job's option (nullptr: it waits)
  double value = 0;               // the plan's
  bool have = false;              // a feasible plan was found
  int64_t cells = 0;              // options priced
};

// Subgradient descent on the dual from zero prices, with Polyak's step toward the best feasible
// value so far (a plan from prices every primal_every rounds and at the end, from the best ones);
// the step's scale halves after `patience` rounds without a better bound. Stops early when the
// bound meets the plan.
Dual descend(const std::vector<TypedJob>& jobs, const std::vector<std::vector<Kept>>& kept,
             const std::vector<int>& capacity, int rounds, int primal_every, int patience) {
  const size_t K = capacity.size();
  std::vector<double> lambda(K, 0.0);
  Dual d;
  d.lambda = lambda;
  std::vector<int> home, tried;  // the homes of the last plan tried: the same homes, the same plan
  std::vector<const Kept*> pick;
  auto try_primal = [&](const std::vector<double>& l) {
    if (!homes(jobs, kept, l, home) || home == tried) return;
    tried = home;
    double value = 0;
    if (primal(jobs, kept, capacity, home, pick, value) && (!d.have || value > d.value)) {
      d.plan.swap(pick);
      d.value = value;
      d.have = true;
    }
  };
  double scale = 1.0;
  int stale = 0;
  const Menu menu(kept);
  Priced p;
  for (int round = 0; round < rounds; ++round) {
    price(jobs, kept, menu, capacity, lambda, p);
    for (const auto& ks : kept) d.cells += static_cast<int64_t>(ks.size());
    if (round == 0 || p.dual < d.bound - 1e-12 * std::max(1.0, std::fabs(d.bound))) {
      d.bound = p.dual;
      d.lambda = lambda;
      stale = 0;
    } else if (++stale >= patience) {
      scale /= 2;
      stale = 0;
    }
    if (round % primal_every == 0) try_primal(lambda);
    if (d.have && d.bound - d.value <= 1e-9 * std::max(1.0, std::fabs(d.value))) break;
    double norm = 0;
    for (double g : p.subgradient) norm += g * g;
    if (norm == 0) break;  // every type exactly full at these prices: the bound is reached
    const double target = d.have ? d.value : 0.0;
    const double step = scale * std::max(p.dual - target, 1e-9 * std::max(1.0, std::fabs(p.dual))) / norm;
    for (size_t t = 0; t < K; ++t) lambda[t] = std::max(0.0, lambda[t] - step * p.subgradient[t]);
  }
  try_primal(d.lambda);
  return d;
}

TypedSolution solve_decomposed(const std::vector<TypedJob>& jobs, const std::vector<std::vector<Kept>>& kept,
                               const std::vector<int>& capacity) {
  Dual d = descend(jobs, kept, capacity, 300, 50, 20);
  if (!d.have) infeasible(jobs, capacity);
  const size_t K = capacity.size();
  TypedSolution best;
  for (const Kept* k : d.plan) best.choices.push_back(choice_of(k, K));
  finish(best, K);
  best.cells += d.cells;
  best.bound = std::max(d.bound, best.objective);
  best.exact = best.bound - best.objective <= 1e-9 * std::max(1.0, std::fabs(best.objective));
  best.method = "decomposed";
  return best;
}

// The prices and the floor for pruning the exact DP (Prune): a short descent of the dual gives
// the prices of the types but the last and a plan, whose value less the rounding tolerance is the
// floor (no plan: no pruning); H_j is computed backward over the jobs. The descent's length was
// chosen on the benchmark's instances (docs/performance.md): longer costs more than it prunes.
constexpr int kPruneRounds = 40, kPruneEvery = 6, kPrunePatience = 3;

Prune pruning(const std::vector<TypedJob>& jobs, const std::vector<std::vector<Kept>>& kept,
              const std::vector<int>& capacity) {
  const size_t K = capacity.size(), J = jobs.size();
  const Dual d = descend(jobs, kept, capacity, kPruneRounds, kPruneEvery, kPrunePatience);
  Prune p;
  p.lambda = d.lambda;
  p.tail.resize(K);
  double scale = 0;  // the size of the sums compared
  for (size_t j = 0; j < J; ++j) {
    double most = 0;
    for (const Kept& k : kept[j]) most = std::max(most, std::fabs(k.value));
    scale += most;
  }
  for (size_t t = 0; t < K; ++t) scale += p.lambda[t] * capacity[t];
  for (size_t e = 0; e < K; ++e) {
    const auto n = static_cast<size_t>(capacity[e]) + 1;
    std::vector<double>& tail = p.tail[e];
    tail.assign((J + 1) * n, 0.0);  // H^e_J = 0
    for (size_t j = J; j-- > 0;) {
      const double* h = tail.data() + (j + 1) * n;
      double* out = tail.data() + j * n;
      // An option's value less the price of its GPUs of the other types.
      auto priced = [&](const Kept& k) {
        double v = k.value;
        for (size_t t = 0; t < K; ++t)
          if (t != e) v -= p.lambda[t] * k.gpus[t];
        return v;
      };
      // The options without GPUs of type e move no cell: only the best of them (or waiting) counts.
      double flat = jobs[j].may_wait ? 0.0 : kNegInf;
      for (const Kept& k : kept[j])
        if (k.gpus[e] == 0) flat = std::max(flat, priced(k));
      for (size_t r = 0; r < n; ++r) out[r] = h[r] + flat;
      for (const Kept& k : kept[j]) {
        const auto g = static_cast<size_t>(k.gpus[e]);
        if (g == 0) continue;
        const double v = priced(k);
        for (size_t r = g; r < n; ++r) out[r] = std::max(out[r], h[r - g] + v);
      }
    }
  }
  if (d.have) p.floor = d.value - 1e-9 * (1 + scale);  // sums of the same terms in other orders
  return p;
}

}  // namespace

TypedSolution solve_typed(const std::vector<TypedJob>& jobs, const std::vector<int>& capacity,
                          const std::string& force) {
  check(jobs, capacity);
  EDP_CHECK(force.empty() || force == "exact" || force == "exact-dense" || force == "decomposed",
            "solve_typed: method '", force, "' (known: exact, exact-dense, decomposed)");
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
  if (force == "exact" || force == "exact-dense" || (force.empty() && small)) {
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
        k.type = type_of(k.gpus);
      }
    const std::vector<int> cap = permute(capacity);
    std::optional<TypedSolution> exact;
    // Pruned by the bound and a plan's value (Prune) when the descent found a plan: the pass then
    // finds the optimum, which is worth at least the plan; else, or should rounding defeat it, the
    // DP without pruning.
    if (force != "exact-dense") {
      const Prune prune = pruning(jobs, kept, cap);
      if (prune.floor > kNegInf) exact = solve_exact(jobs, kept, cap, &prune);
    }
    if (!exact) exact = solve_exact(jobs, kept, cap, nullptr);
    TypedSolution sol = std::move(*exact);
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
