// edp_bench_allreduce: measures edp::comm's allreduce and raw MPI_Allreduce side by side in one
// run, on the same communicator and buffers, in the format of nccl-tests (size sweep -b/-e/-f,
// warm-up -w, iterations -n; algbw = bytes/time, busbw = algbw * 2(n-1)/n; #wrong from a
// separate check pass with integer-valued inputs, so the exact result is known).
//
// Timing: per size, R rounds (-r) of n iterations; edp and MPI calls alternate one by one
// (which goes first alternates too); each call is timed, a call's time is the slowest rank's,
// and the table shows the median over all R*n calls (robust to descheduling on a loaded host).
// With more ranks than cores (oversubscribed), expect noise: compare the ratio column, measured
// in the same run.
//
//   mpirun -np 4 build/bench/allreduce/edp_bench_allreduce -b 8 -e 32M -f 2 -w 5 -n 20
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "edp/comm/communicator.h"
#include "edp/config.h"

using edp::DType;
using edp::comm::ReduceOp;

namespace {

struct Options {
  int64_t min_bytes = 8;
  int64_t max_bytes = 32 << 20;
  double factor = 2;
  int warmup = 5;
  int iters = 20;
  int rounds = 5;
  DType dtype = DType::F32;
  ReduceOp op = ReduceOp::Sum;
  bool in_place = false;
  bool check = true;
};

int64_t parse_bytes(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  const std::string unit = end ? end : "";
  if (unit == "K" || unit == "k") v *= 1024;
  else if (unit == "M" || unit == "m") v *= 1024 * 1024;
  else if (unit == "G" || unit == "g") v *= 1024.0 * 1024 * 1024;
  else if (!unit.empty()) throw edp::Error(std::string("bad size '") + s + "': use e.g. 8, 64K, 32M, 1G");
  return static_cast<int64_t>(v);
}

DType parse_dtype(const std::string& s) {
  if (s == "float" || s == "float32") return DType::F32;
  if (s == "double" || s == "float64") return DType::F64;
  if (s == "int32") return DType::I32;
  if (s == "int64") return DType::I64;
  throw edp::Error("bad type '" + s + "': float, double, int32 or int64");
}

ReduceOp parse_op(const std::string& s) {
  if (s == "sum") return ReduceOp::Sum;
  if (s == "avg") return ReduceOp::Avg;
  if (s == "max") return ReduceOp::Max;
  if (s == "min") return ReduceOp::Min;
  throw edp::Error("bad op '" + s + "': sum, avg, max or min");
}

void usage() {
  std::printf(
      "usage: edp_bench_allreduce [-b minbytes] [-e maxbytes] [-f factor] [-w warmup] [-n iters]\n"
      "                           [-r rounds] [-d float|double|int32|int64] [-o sum|avg|max|min]\n"
      "                           [-p 0|1 in place] [-c 0|1 check]\n");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      usage();
      std::exit(0);
    }
    EDP_CHECK(i + 1 < argc, "option ", a, " needs a value");
    const char* v = argv[++i];
    if (a == "-b") o.min_bytes = parse_bytes(v);
    else if (a == "-e") o.max_bytes = parse_bytes(v);
    else if (a == "-f") o.factor = std::atof(v);
    else if (a == "-w") o.warmup = std::atoi(v);
    else if (a == "-n") o.iters = std::atoi(v);
    else if (a == "-r") o.rounds = std::atoi(v);
    else if (a == "-d") o.dtype = parse_dtype(v);
    else if (a == "-o") o.op = parse_op(v);
    else if (a == "-p") o.in_place = std::atoi(v) != 0;
    else if (a == "-c") o.check = std::atoi(v) != 0;
    else throw edp::Error("unknown option " + a + " (-h for help)");
  }
  EDP_CHECK(o.factor > 1 && o.iters > 0 && o.rounds > 0 && o.min_bytes > 0 && o.max_bytes >= o.min_bytes,
            "need -f > 1, -n > 0, -r > 0 and 0 < -b <= -e");
  return o;
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_op(ReduceOp op) {
  // MPI has no average: the raw column runs MPI_SUM (edp's avg is that plus a division).
  return op == ReduceOp::Max ? MPI_MAX : op == ReduceOp::Min ? MPI_MIN : MPI_SUM;
}

int64_t value(int rank, int64_t i) { return (i * 7 + rank * 13) % 61 - 30; }

template <typename T>
void fill(void* p, int64_t n, int rank) {
  T* t = static_cast<T*>(p);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<T>(value(rank, i));
}

// Elements of `got` that differ from the exact reduction of every rank's value(r, i).
template <typename T>
int64_t count_wrong(const void* got, int64_t n, int size, ReduceOp op, bool avg) {
  const T* g = static_cast<const T*>(got);
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t acc = value(0, i);
    for (int r = 1; r < size; ++r) {
      const int64_t x = value(r, i);
      acc = op == ReduceOp::Max ? std::max(acc, x) : op == ReduceOp::Min ? std::min(acc, x) : acc + x;
    }
    T e = static_cast<T>(acc);
    if (avg) e = static_cast<T>(e / static_cast<T>(size));
    if (std::memcmp(&e, &g[i], sizeof(T)) != 0) ++wrong;
  }
  return wrong;
}

void fill_any(DType t, void* p, int64_t n, int rank) {
  switch (t) {
    case DType::F32: fill<float>(p, n, rank); break;
    case DType::F64: fill<double>(p, n, rank); break;
    case DType::I32: fill<int32_t>(p, n, rank); break;
    case DType::I64: fill<int64_t>(p, n, rank); break;
    default: break;
  }
}

int64_t wrong_any(DType t, const void* p, int64_t n, int size, ReduceOp op, bool avg) {
  switch (t) {
    case DType::F32: return count_wrong<float>(p, n, size, op, avg);
    case DType::F64: return count_wrong<double>(p, n, size, op, avg);
    case DType::I32: return count_wrong<int32_t>(p, n, size, op, avg);
    case DType::I64: return count_wrong<int64_t>(p, n, size, op, avg);
    default: return n;
  }
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

struct Row {
  int64_t bytes, count;
  double edp_us, mpi_us;
  int64_t edp_wrong, mpi_wrong;
};

}  // namespace

int main(int argc, char** argv) {
  return edp::comm::run_main(argc, argv, [&](edp::comm::Communicator& world) {
    const Options o = parse(argc, argv);
    const int rank = world.rank(), size = world.size();
    const size_t es = edp::dtype_size(o.dtype);
    const double bus_factor = size > 1 ? 2.0 * (size - 1) / size : 0.0;

    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
    int len = 0;
    MPI_Get_library_version(lib, &len);
    std::string mpi_version(lib);
    mpi_version = mpi_version.substr(0, mpi_version.find_first_of(",\n"));
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);

    if (rank == 0) {
      std::printf("# edp_bench_allreduce: edp::comm allreduce vs raw MPI_Allreduce (same run, same communicator)\n");
      std::printf("# host %s, %s, %ld cores; %d ranks%s\n", host, cpu_model().c_str(), cores, size,
                  size > cores ? " (oversubscribed)" : "");
      std::printf("# %s; %s granted; edp %s\n", mpi_version.c_str(),
                  edp::comm::thread_level_name(world.thread_level()), EDP_VERSION);
      std::printf("# type %s, op %s%s, %s, warmup %d, iters %d, rounds %d (median call; time = slowest rank)\n",
                  edp::dtype_name(o.dtype), edp::comm::reduce_op_name(o.op),
                  o.op == ReduceOp::Avg ? " (raw MPI runs MPI_SUM: it has no avg)" : "",
                  o.in_place ? "in place" : "out of place", o.warmup, o.iters, o.rounds);
      std::printf("#\n# %46s %-34s %-34s\n", "", "edp::comm", "raw MPI_Allreduce");
      std::printf("# %10s %11s %7s %4s   %9s %7s %7s %6s   %9s %7s %7s %6s   %6s\n", "size(B)", "count",
                  "type", "op", "time(us)", "algbw", "busbw", "#wrong", "time(us)", "algbw", "busbw",
                  "#wrong", "ratio");
      std::printf("# %10s %11s %7s %4s   %9s %7s %7s %6s   %9s %7s %7s %6s   %6s\n", "", "", "", "", "",
                  "(GB/s)", "(GB/s)", "", "", "(GB/s)", "(GB/s)", "", "busbw");
      std::fflush(stdout);
    }

    std::vector<Row> rows;
    for (double b = static_cast<double>(o.min_bytes); b <= static_cast<double>(o.max_bytes) * 1.0000001;
         b *= o.factor) {
      const int64_t count = static_cast<int64_t>(b) / static_cast<int64_t>(es);
      if (count == 0) continue;
      if (!rows.empty() && rows.back().count == count) continue;
      const int64_t bytes = count * static_cast<int64_t>(es);
      std::vector<char> send(static_cast<size_t>(bytes)), recv(static_cast<size_t>(bytes));
      fill_any(o.dtype, send.data(), count, rank);
      void* out = o.in_place ? send.data() : recv.data();
      auto run_edp = [&] { world.allreduce(send.data(), out, count, o.dtype, o.op); };
      auto run_mpi = [&] {
        MPI_Allreduce(o.in_place ? MPI_IN_PLACE : send.data(), out, static_cast<int>(count),
                      mpi_type(o.dtype), mpi_op(o.op), MPI_COMM_WORLD);
      };

      Row row{bytes, count, 0, 0, 0, 0};
      if (o.check) {
        // Separate pass on fresh integer inputs: the exact answer is known.
        fill_any(o.dtype, send.data(), count, rank);
        run_edp();
        int64_t w = wrong_any(o.dtype, out, count, size, o.op, o.op == ReduceOp::Avg);
        MPI_Allreduce(&w, &row.edp_wrong, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        fill_any(o.dtype, send.data(), count, rank);
        run_mpi();
        w = wrong_any(o.dtype, out, count, size, o.op, false);
        MPI_Allreduce(&w, &row.mpi_wrong, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        fill_any(o.dtype, send.data(), count, rank);
      }

      for (int i = 0; i < o.warmup; ++i) {
        run_edp();
        run_mpi();
      }
      // Calls alternate edp/MPI one by one (which goes first alternates too), so that both see
      // the same machine load. Every call is timed; a call's time is that of the slowest rank;
      // the table shows the median call. On a shared, oversubscribed machine the median resists
      // the descheduling spikes that dominate a mean.
      const size_t calls = static_cast<size_t>(o.rounds) * static_cast<size_t>(o.iters);
      std::vector<double> t_edp(calls), t_mpi(calls);
      size_t c = 0;
      for (int r = 0; r < o.rounds; ++r) {
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < o.iters; ++i, ++c) {
          const bool edp_first = (i + r) % 2 == 0;
          const double t0 = MPI_Wtime();
          edp_first ? run_edp() : run_mpi();
          const double t1 = MPI_Wtime();
          edp_first ? run_mpi() : run_edp();
          const double t2 = MPI_Wtime();
          t_edp[c] = edp_first ? t1 - t0 : t2 - t1;
          t_mpi[c] = edp_first ? t2 - t1 : t1 - t0;
        }
      }
      MPI_Allreduce(MPI_IN_PLACE, t_edp.data(), static_cast<int>(calls), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, t_mpi.data(), static_cast<int>(calls), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
      };
      row.edp_us = median(t_edp) * 1e6;
      row.mpi_us = median(t_mpi) * 1e6;
      rows.push_back(row);
      if (rank == 0) {
        const double ea = bytes / row.edp_us / 1e3, ma = bytes / row.mpi_us / 1e3;
        std::printf("  %10" PRId64 " %11" PRId64 " %7s %4s   %9.1f %7.3f %7.3f %6" PRId64
                    "   %9.1f %7.3f %7.3f %6" PRId64 "   %6.3f\n",
                    bytes, count, edp::dtype_name(o.dtype), edp::comm::reduce_op_name(o.op), row.edp_us,
                    ea, ea * bus_factor, row.edp_wrong, row.mpi_us, ma, ma * bus_factor, row.mpi_wrong,
                    row.mpi_us / row.edp_us);
        std::fflush(stdout);
      }
    }

    if (rank == 0) {
      double sum_e = 0, sum_m = 0, big_e = 0, big_m = 0;
      int nbig = 0;
      double log_ratio_big = 0;  // geometric mean of per-size ratios: robust to one noisy size
      int64_t wrong = 0;
      nlohmann::json jr = nlohmann::json::array();
      for (const Row& r : rows) {
        const double eb = r.bytes / r.edp_us / 1e3 * bus_factor, mb = r.bytes / r.mpi_us / 1e3 * bus_factor;
        sum_e += eb;
        sum_m += mb;
        wrong += r.edp_wrong + r.mpi_wrong;
        if (r.bytes >= (1 << 20)) {
          big_e += eb;
          big_m += mb;
          log_ratio_big += std::log(r.mpi_us / r.edp_us);
          ++nbig;
        }
        jr.push_back({{"bytes", r.bytes}, {"count", r.count}, {"edp_time_us", r.edp_us},
                      {"edp_busbw_gbps", eb}, {"edp_wrong", r.edp_wrong}, {"mpi_time_us", r.mpi_us},
                      {"mpi_busbw_gbps", mb}, {"mpi_wrong", r.mpi_wrong}});
      }
      const double n = rows.empty() ? 1 : static_cast<double>(rows.size());
      std::printf("# Out of bounds values : %" PRId64 " %s\n", wrong, wrong ? "FAILED" : "OK");
      std::printf("# Avg bus bandwidth    : edp %.4f GB/s, raw MPI %.4f GB/s\n", sum_e / n, sum_m / n);
      const double ratio_big = nbig ? big_e / big_m : 0;
      const double geo_big = nbig ? std::exp(log_ratio_big / nbig) : 0;
      if (nbig)
        std::printf("# Avg bus bandwidth >= 1 MiB: edp %.4f GB/s, raw MPI %.4f GB/s, edp/MPI %.3f "
                    "(geometric mean of the per-size ratios: %.3f)\n",
                    big_e / nbig, big_m / nbig, ratio_big, geo_big);
      nlohmann::json j = {{"bench", "edp_bench_allreduce"},
                          {"host", host},
                          {"cpu", cpu_model()},
                          {"cores", cores},
                          {"ranks", size},
                          {"mpi", mpi_version},
                          {"thread_level", edp::comm::thread_level_name(world.thread_level())},
                          {"type", edp::dtype_name(o.dtype)},
                          {"op", edp::comm::reduce_op_name(o.op)},
                          {"in_place", o.in_place},
                          {"warmup", o.warmup},
                          {"iters", o.iters},
                          {"rounds", o.rounds},
                          {"avg_busbw_edp_gbps", sum_e / n},
                          {"avg_busbw_mpi_gbps", sum_m / n},
                          {"busbw_ratio_ge_1MiB", ratio_big},
                          {"busbw_ratio_geomean_ge_1MiB", geo_big},
                          {"wrong", wrong},
                          {"rows", jr}};
      std::printf("%s\n", j.dump().c_str());
    }
    return 0;
  });
}
