// The launch planner over fake inventories (1-8 GPUs, K = 1-8, hostfiles of 1-3 hosts, uneven
// -np), its parsers, the per-rank environment and placement_from_env; EDP_ALLOWED_WORKERS, the
// rescale record and the stale-job-directory rule. No process is started here.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

#include "edp/core/error.h"
#include "edp/core/knobs.h"
#include "edp/elastic/allowed.h"
#include "edp/launch/placement.h"
#include "launch/jobdir.h"
#include "launch/mps.h"
#include "launch/launch_plan.h"
#include "launch/system.h"
#include "support/no_hang.h"

using namespace edp::launch;

namespace {

std::vector<GpuInfo> fake_gpus(int n, int cc_major = 9, const std::string& mode = "Default") {
  std::vector<GpuInfo> g;
  for (int i = 0; i < n; ++i)
    g.push_back({i, "GPU-" + std::to_string(1000 + i), "Fake", cc_major, 0, 81920, mode, "", -1});
  return g;
}

LaunchRequest base(int np, int k) {
  LaunchRequest r;
  r.np = np;
  r.ranks_per_gpu = k;
  r.local_host = "h0";
  r.local_cores = 64;
  r.gpu_source = "test";
  r.job_dir = "/tmp/edprun.test";
  r.self_exe = "/opt/edp/bin/edprun";
  r.program = {"./train", "--epochs", "1"};
  return r;
}

std::string env_of(const Plan& p, const std::string& k) {
  for (const auto& [kk, v] : p.env)
    if (kk == k) return v;
  return "<unset>";
}

bool has_arg(const Plan& p, const std::string& a) {
  return std::find(p.mpirun_argv.begin(), p.mpirun_argv.end(), a) != p.mpirun_argv.end();
}

// Invariants every valid plan keeps, whatever the inputs.
void check_invariants(const Plan& p, int K) {
  ASSERT_EQ(static_cast<int>(p.ranks.size()), p.np);
  std::map<std::pair<int, int>, std::vector<int>> per_gpu;  // (host, gpu) -> ranks
  int sum = 0;
  for (const auto& h : p.hosts) sum += h.ranks;
  EXPECT_EQ(sum, p.np);
  for (size_t i = 0; i < p.ranks.size(); ++i) {
    const RankPlan& r = p.ranks[i];
    EXPECT_EQ(r.rank, static_cast<int>(i));
    EXPECT_EQ(r.local_size, p.hosts[r.host].ranks);
    EXPECT_GE(r.threads, 1);
    if (p.gpu_mode) {
      EXPECT_GE(r.gpu, 0);
      EXPECT_LE(r.gpu_ranks, K);
      per_gpu[{r.host, r.gpu}].push_back(r.rank);
    } else {
      EXPECT_EQ(r.gpu, -1);
    }
  }
  for (const auto& [key, ranks] : per_gpu) {
    EXPECT_LE(static_cast<int>(ranks.size()), K);
    for (size_t j = 0; j < ranks.size(); ++j) {
      EXPECT_EQ(p.ranks[ranks[j]].gpu_rank, static_cast<int>(j));
      EXPECT_EQ(p.ranks[ranks[j]].gpu_ranks, static_cast<int>(ranks.size()));
      if (j) {
        EXPECT_EQ(ranks[j], ranks[j - 1] + 1) << "ranks of one GPU are contiguous";
      }
    }
  }
  // Balanced: on each host, the GPU groups differ by at most one rank.
  std::map<int, std::pair<int, int>> minmax;
  for (const auto& [key, ranks] : per_gpu) {
    auto& mm = minmax.try_emplace(key.first, 1 << 30, 0).first->second;
    mm.first = std::min(mm.first, static_cast<int>(ranks.size()));
    mm.second = std::max(mm.second, static_cast<int>(ranks.size()));
  }
  for (const auto& [h, mm] : minmax) EXPECT_LE(mm.second - mm.first, 1) << "host " << h;
}

}  // namespace

TEST(AssignLocal, ContiguousBalancedBlocks) {
  // L=7, K=4: two GPUs with 4 and 3 ranks.
  std::vector<int> gpu;
  for (int l = 0; l < 7; ++l) gpu.push_back(assign_local(l, 7, 4).gpu_slot);
  EXPECT_EQ(gpu, (std::vector<int>{0, 0, 0, 0, 1, 1, 1}));
  // L=6, K=4: 3+3, not 4+2.
  EXPECT_EQ(assign_local(3, 6, 4).gpu_slot, 1);
  EXPECT_EQ(assign_local(3, 6, 4).gpu_rank, 0);
  EXPECT_EQ(assign_local(3, 6, 4).gpu_ranks, 3);
  // L=5, K=2: 2+2+1.
  EXPECT_EQ(assign_local(4, 5, 2).gpu_slot, 2);
  EXPECT_EQ(assign_local(4, 5, 2).gpu_ranks, 1);
  EXPECT_EQ(gpus_needed(5, 2), 3);
  EXPECT_EQ(gpus_needed(8, 8), 1);
}

TEST(Planner, SweepOverInventoriesAndK) {
  // Every (GPUs, K, np) on one host: valid plans keep the invariants; np above G*K is refused.
  for (int G = 1; G <= 8; ++G)
    for (int K = 1; K <= 8; ++K)
      for (int np : {1, 2, 3, G * K - 1, G * K, G * K + 1}) {
        if (np < 1) continue;
        LaunchRequest r = base(np, K);
        r.oversubscribe = true;
        SCOPED_TRACE(testing::Message() << "G=" << G << " K=" << K << " np=" << np);
        if (np > G * K) {
          try {
            make_plan(r, fake_gpus(G));
            ADD_FAILURE() << "expected an error";
          } catch (const edp::Error& e) {
            EXPECT_NE(std::string(e.what()).find("more GPU slots than there are"), std::string::npos) << e.what();
          }
          continue;
        }
        const Plan p = make_plan(r, fake_gpus(G));
        EXPECT_TRUE(p.gpu_mode);
        check_invariants(p, K);
        EXPECT_EQ(p.hosts[0].gpus_used, gpus_needed(np, K));
      }
}

TEST(Planner, DefaultNpFillsEveryGpuSlot) {
  LaunchRequest r = base(0, 4);
  const Plan p = make_plan(r, fake_gpus(2));
  EXPECT_EQ(p.np, 8);
  EXPECT_EQ(p.ranks[7].gpu, 1);
  EXPECT_EQ(p.ranks[7].gpu_rank, 3);
}

TEST(Planner, HostfilesOfOneToThreeHosts) {
  for (int H = 1; H <= 3; ++H)
    for (int K : {1, 2, 4})
      for (int np = 1; np <= H * 2 * K; ++np) {
        LaunchRequest r = base(np, K);
        r.host_source = HostSource::Hostfile;
        for (int h = 0; h < H; ++h) r.hosts.push_back({"node" + std::to_string(h), 0, 0});
        SCOPED_TRACE(testing::Message() << "H=" << H << " K=" << K << " np=" << np);
        const Plan p = make_plan(r, fake_gpus(2));
        check_invariants(p, K);
        // Hosts fill in order (Open MPI's by-slot), each to 2 GPUs x K.
        int left = np;
        for (int h = 0; h < H; ++h) {
          EXPECT_EQ(p.hosts[h].ranks, std::min(left, 2 * K));
          left -= p.hosts[h].ranks;
        }
        // The host list handed to mpirun carries exactly these counts.
        auto it = std::find(p.mpirun_argv.begin(), p.mpirun_argv.end(), "--host");
        ASSERT_NE(it, p.mpirun_argv.end());
        std::string expect;
        for (int h = 0; h < H; ++h)
          if (p.hosts[h].ranks > 0)
            expect += (expect.empty() ? "" : ",") + p.hosts[h].name + ":" + std::to_string(p.hosts[h].ranks);
        EXPECT_EQ(*(it + 1), expect);
      }
}

TEST(Planner, HostfileSlotsLimitAndErrors) {
  LaunchRequest r = base(7, 4);
  r.host_source = HostSource::Hostfile;
  r.hosts = {{"a", 2, 0}, {"b", 8, 0}};
  Plan p = make_plan(r, fake_gpus(2));
  EXPECT_EQ(p.hosts[0].ranks, 2);  // slots=2 bound host a
  EXPECT_EQ(p.hosts[1].ranks, 5);
  r.np = 11;  // a: 2, b: min(8, 2*4) = 8 -> 10 slots
  try {
    make_plan(r, fake_gpus(2));
    FAIL();
  } catch (const edp::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("= 10"), std::string::npos) << m;
    EXPECT_NE(m.find("limited by hostfile slots"), std::string::npos) << m;
    EXPECT_NE(m.find("raise --ranks-per-gpu"), std::string::npos) << m;
  }
}

TEST(Planner, CpuModeSharesCores) {
  LaunchRequest r = base(4, 1);
  r.local_cores = 8;
  Plan p = make_plan(r, {});
  EXPECT_FALSE(p.gpu_mode);
  check_invariants(p, 1);
  EXPECT_EQ(p.bind, BindMode::Core);
  EXPECT_EQ(p.pe, 2);
  for (const auto& rk : p.ranks) EXPECT_EQ(rk.threads, 2);
  EXPECT_TRUE(has_arg(p, "slot:PE=2"));
  EXPECT_FALSE(has_arg(p, "--oversubscribe"));
  // More ranks than cores: refused unless --oversubscribe, which also turns binding off.
  r.np = 12;
  EXPECT_THROW(make_plan(r, {}), edp::Error);
  r.oversubscribe = true;
  p = make_plan(r, {});
  EXPECT_EQ(p.bind, BindMode::None);
  EXPECT_TRUE(has_arg(p, "--oversubscribe"));
  for (const auto& rk : p.ranks) EXPECT_EQ(rk.threads, 1);
  r.bind = BindMode::Core;
  EXPECT_THROW(make_plan(r, {}), edp::Error);
  // Default -np in CPU mode on one host: 1.
  LaunchRequest d = base(0, 1);
  EXPECT_EQ(make_plan(d, {}).np, 1);
  // --gpus none forces CPU mode even with GPUs present.
  d.gpus = {"none"};
  EXPECT_FALSE(make_plan(d, fake_gpus(4)).gpu_mode);
}

// An elastic job on one host gets mpirun --oversubscribe (room for the ranks an in-place grow
// spawns, while the ranks of a shrink stay parked in their slots) and nothing else changes: the
// ranks keep their cores and binding, the allowed sizes stay those of the cores. Several hosts
// keep exact slot counts (a spawn fails there; the library then rescales by restart).
TEST(Planner, ElasticJobsLeaveRoomToSpawnOnOneHost) {
  LaunchRequest r = base(2, 1);
  r.local_cores = 4;
  const Plan fixed = make_plan(r, {});
  r.elastic = true;
  const Plan elastic = make_plan(r, {});
  EXPECT_FALSE(has_arg(fixed, "--oversubscribe"));
  EXPECT_TRUE(has_arg(elastic, "--oversubscribe"));
  EXPECT_EQ(elastic.bind, BindMode::Core);
  EXPECT_TRUE(has_arg(elastic, "slot:PE=2"));
  EXPECT_EQ(allowed_worker_counts(r, {}), (std::vector<int>{1, 2, 3, 4}));
  r.np = 6;
  EXPECT_THROW(make_plan(r, {}), edp::Error) << "elastic is no --oversubscribe for the planner";
  // GPU mode on one host: the same room, and an MPS daemon on every selected GPU (2 ranks use one
  // GPU; a grow in place may spawn onto the other).
  LaunchRequest g = base(2, 2);
  EXPECT_EQ(make_plan(g, fake_gpus(2)).daemons.size(), 1u);
  g.elastic = true;
  const Plan gp = make_plan(g, fake_gpus(2));
  EXPECT_TRUE(has_arg(gp, "--oversubscribe"));
  ASSERT_EQ(gp.daemons.size(), 2u);
  EXPECT_EQ(gp.daemons[1].gpu_uuid, "GPU-1001");
  // A hostfile of one host: exact slots (several hosts: Planner.ElasticOnSeveralHosts).
  LaunchRequest h = base(4, 1);
  h.host_source = HostSource::Hostfile;
  h.hosts = {{"a", 4, 0}};
  h.elastic = true;
  EXPECT_FALSE(has_arg(make_plan(h, {}), "--oversubscribe"));
}

TEST(Planner, MpsDecisions) {
  // auto + K>1 + control available: MPS on, one daemon per used GPU.
  LaunchRequest r = base(6, 4);
  Plan p = make_plan(r, fake_gpus(4));
  EXPECT_TRUE(p.mps);
  ASSERT_EQ(p.daemons.size(), 2u);  // 6 ranks / K=4 -> 2 GPUs (3+3)
  EXPECT_EQ(p.daemons[1].pipe_dir, "/tmp/edprun.test/mps/1/pipe");
  EXPECT_EQ(p.mps_thread_percentage, 50);
  EXPECT_EQ(env_of(p, "EDP_LAUNCH_MPS"), "1");
  // auto with one rank per GPU: no MPS.
  p = make_plan(base(4, 1), fake_gpus(4));
  EXPECT_FALSE(p.mps);
  EXPECT_TRUE(p.daemons.empty());
  // auto without the control program: time-sliced with a warning note.
  r.mps_control_available = false;
  p = make_plan(r, fake_gpus(4));
  EXPECT_FALSE(p.mps);
  EXPECT_NE(p.notes.back().find("warning"), std::string::npos);
  // on without it: an error naming the program.
  r.mps = MpsMode::On;
  try {
    make_plan(r, fake_gpus(4));
    FAIL();
  } catch (const edp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("nvidia-cuda-mps-control"), std::string::npos);
  }
  // Reusing a user's daemon: MPS on, nothing started.
  r.mps_pipe_directory = "/var/run/mps";
  p = make_plan(r, fake_gpus(4));
  EXPECT_TRUE(p.mps);
  EXPECT_FALSE(p.mps_started_by_edprun);
  EXPECT_TRUE(p.daemons.empty());
  EXPECT_EQ(p.ranks[0].mps_pipe_dir, "/var/run/mps");
  // off: time-sliced, but refused on Exclusive_Process GPUs.
  r = base(4, 2);
  r.mps = MpsMode::Off;
  EXPECT_FALSE(make_plan(r, fake_gpus(2)).mps);
  EXPECT_THROW(make_plan(r, fake_gpus(2, 9, "Exclusive_Process")), edp::Error);
  EXPECT_THROW(make_plan(base(1, 1), fake_gpus(1, 9, "Prohibited")), edp::Error);
}

TEST(Planner, ClientLimit) {
  EXPECT_EQ(mps_client_limit(7), 48);
  EXPECT_EQ(mps_client_limit(9), 48);
  EXPECT_EQ(mps_client_limit(6), 16);
  // K=20 on a Pascal GPU (limit 16): on -> error naming the limit; auto -> time-sliced.
  LaunchRequest r = base(20, 20);
  r.oversubscribe = true;
  r.mps = MpsMode::On;
  try {
    make_plan(r, fake_gpus(1, 6));
    FAIL();
  } catch (const edp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("client limit of 16"), std::string::npos) << e.what();
  }
  r.mps = MpsMode::Auto;
  EXPECT_FALSE(make_plan(r, fake_gpus(1, 6)).mps);
  EXPECT_TRUE(make_plan(r, fake_gpus(1, 8)).mps);  // 20 <= 48 on Ampere
}

TEST(Planner, ThreadPercentageAndMemLimit) {
  EXPECT_EQ(default_thread_percentage(1), 100);
  EXPECT_EQ(default_thread_percentage(2), 100);
  EXPECT_EQ(default_thread_percentage(3), 67);
  EXPECT_EQ(default_thread_percentage(4), 50);
  EXPECT_EQ(default_thread_percentage(8), 25);
  LaunchRequest r = base(4, 4);
  r.mps_thread_percentage = 101;
  EXPECT_THROW(make_plan(r, fake_gpus(1)), edp::Error);
  r.mps_thread_percentage = 30;
  r.mps_mem_limit = "8G";
  Plan p = make_plan(r, fake_gpus(1));
  EXPECT_EQ(env_of(p, "EDP_LAUNCH_MPS_THREAD_PERCENTAGE"), "30");
  EXPECT_EQ(env_of(p, "EDP_LAUNCH_MPS_MEM_LIMIT"), "8G");
  for (const char* ok : {"8G", "512M", "4096MB", "1T", "100"}) EXPECT_EQ(check_mps_size(ok), ok);
  for (const char* bad : {"", "8X", "-1G", "0", "1.5G"}) EXPECT_THROW(check_mps_size(bad), edp::Error) << bad;
}

TEST(Planner, GpuSelection) {
  const auto g = fake_gpus(4);
  EXPECT_EQ(select_gpus(g, {"2", "0"}).at(0).index, 2);
  EXPECT_EQ(select_gpus(g, {"GPU-1003"}).at(0).index, 3);
  EXPECT_EQ(select_gpus(g, {"all"}).size(), 4u);
  EXPECT_TRUE(select_gpus(g, {"none"}).empty());
  EXPECT_THROW(select_gpus(g, {"7"}), edp::Error);
  EXPECT_THROW(select_gpus(g, {"1", "GPU-1001"}), edp::Error);  // the same GPU twice
  LaunchRequest r = base(2, 1);
  r.gpus = {"0"};
  EXPECT_THROW(make_plan(r, {}), edp::Error);  // asked for a GPU, none found
  r.gpus = {"3", "1"};
  const Plan p = make_plan(r, g);
  EXPECT_EQ(p.ranks[0].gpu, 3);
  EXPECT_EQ(p.ranks[1].gpu, 1);
  EXPECT_EQ(env_of(p, "EDP_LAUNCH_GPUS"), "3,1");
}

TEST(Planner, ErrorsSayWhatIsImpossible) {
  EXPECT_THROW(make_plan(base(2, 0), fake_gpus(1)), edp::Error);
  LaunchRequest r = base(2, 1);
  r.program.clear();
  try {
    make_plan(r, {});
    FAIL();
  } catch (const edp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("nothing to run"), std::string::npos);
  }
  r = base(3, 1);
  r.local_cores = 2;
  try {
    make_plan(r, {});
    FAIL();
  } catch (const edp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--oversubscribe"), std::string::npos) << e.what();
  }
}

TEST(Planner, RootFlagAndCommandShape) {
  LaunchRequest r = base(2, 2);
  r.allow_run_as_root = true;
  r.mpirun_extra = {"--mca", "btl", "^openib"};
  const Plan p = make_plan(r, fake_gpus(1));
  const auto& a = p.mpirun_argv;
  EXPECT_EQ(a[0], "mpirun");
  EXPECT_EQ(a[1], "--allow-run-as-root");
  const auto shim = std::find(a.begin(), a.end(), "/opt/edp/bin/edprun");
  ASSERT_NE(shim, a.end());
  EXPECT_EQ(*(shim + 1), "--rank-exec");
  EXPECT_EQ(*(shim + 2), "--");
  EXPECT_EQ(std::vector<std::string>(shim + 3, a.end()), r.program);
  EXPECT_NE(std::find(a.begin(), shim, "^openib"), shim);
}

TEST(Planner, MultiHostMpsGoesThroughMpirun) {
  LaunchRequest r = base(8, 4);
  r.host_source = HostSource::Hostfile;
  r.hosts = {{"a", 0, 0}, {"b", 0, 0}};
  const Plan p = make_plan(r, fake_gpus(1));
  ASSERT_EQ(p.daemons.size(), 2u);
  EXPECT_EQ(p.daemons[1].host, 1);
  const std::string start = shell_join(p.mps_host_start_argv);
  EXPECT_NE(start.find("--host a:1,b:1 --map-by ppr:1:node"), std::string::npos) << start;
  EXPECT_NE(start.find("--mps-host start /tmp/edprun.test 0"), std::string::npos) << start;
  EXPECT_FALSE(make_plan(base(8, 4), fake_gpus(2)).mps_host_start_argv.size());
  // The hosts the daemons run on, for a rescale that adds or removes hosts: those with ranks.
  r.hosts.push_back({"c", 0, 0});
  r.np = 6;  // 4 on a, 2 on b, none on c
  const Plan q = make_plan(r, fake_gpus(1));
  EXPECT_EQ(q.mps_hosts, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(q.mps_gpus, "0");
  EXPECT_EQ(shell_join(mps_host_argv(r, {"c"}, "start", "0")),
            "mpirun -np 1 --host c:1 --map-by ppr:1:node --bind-to none /opt/edp/bin/edprun --mps-host start "
            "/tmp/edprun.test 0");
  EXPECT_EQ(shell_join(mps_host_argv(r, {"b", "c"}, "stop", "")),
            "mpirun -np 2 --host b:1,c:1 --map-by ppr:1:node --bind-to none /opt/edp/bin/edprun --mps-host stop "
            "/tmp/edprun.test");
}

// An elastic job on several hosts: mpirun learns every host with its capacity (room for an
// in-place grow onto a host without ranks yet), may oversubscribe (parked ranks keep their slots),
// and the ranks learn the hosts (EDP_LAUNCH_HOSTS) to place spawned ranks where a restart would.
TEST(Planner, ElasticOnSeveralHosts) {
  LaunchRequest r = base(2, 1);
  r.gpus = {"none"};
  r.host_source = HostSource::Hostfile;
  r.hosts = {{"a", 1, 0}, {"b", 1, 0}, {"c", 1, 0}};
  const Plan fixed = make_plan(r, {});
  EXPECT_NE(shell_join(fixed.mpirun_argv).find("--host a:1,b:1 "), std::string::npos);
  EXPECT_FALSE(has_arg(fixed, "--oversubscribe"));
  EXPECT_EQ(env_of(fixed, "EDP_LAUNCH_HOSTS"), "<unset>");
  r.elastic = true;
  const Plan p = make_plan(r, {});
  EXPECT_NE(shell_join(p.mpirun_argv).find("--oversubscribe -np 2 --mca odls_base_sigkill_timeout 0 --host a:1,b:1,c:1 "), std::string::npos)
      << shell_join(p.mpirun_argv);
  EXPECT_EQ(env_of(p, "EDP_LAUNCH_HOSTS"), "a:1,b:1,c:1");
  // GPU mode with MPS: daemons on every host from the start, unless the job only restarts.
  LaunchRequest g = base(4, 2);
  g.host_source = HostSource::Hostfile;
  g.hosts = {{"a", 0, 0}, {"b", 0, 0}, {"c", 0, 0}};
  g.mps = MpsMode::On;
  g.elastic = true;
  EXPECT_EQ(make_plan(g, fake_gpus(1)).mps_hosts, (std::vector<std::string>{"a", "b", "c"}));
  g.elastic_restart_only = true;
  EXPECT_EQ(make_plan(g, fake_gpus(1)).mps_hosts, (std::vector<std::string>{"a", "b"}));
}

// The fill rule the library and the shim place spawned ranks by (knobs::fill_slot).
TEST(Placement, FillSlot) {
  const std::vector<edp::knobs::LaunchHost> h = {{"a", 2}, {"b", 2}, {"c", 1}};
  auto at = [&](int size, int rank) {
    const auto s = edp::knobs::fill_slot(h, size, rank);
    return std::to_string(s.host) + ":" + std::to_string(s.local_rank) + "/" + std::to_string(s.local_size);
  };
  EXPECT_EQ(at(3, 2), "1:0/1");  // a a b
  EXPECT_EQ(at(5, 2), "1:0/2");  // a a b b c
  EXPECT_EQ(at(5, 4), "2:0/1");
  EXPECT_EQ(at(6, 0), "-1:0/0");  // more than the hosts take
  setenv("EDP_LAUNCH_HOSTS", "edp-h1:2,edp-h2:1", 1);
  const auto parsed = edp::knobs::launch_hosts();
  ASSERT_EQ(parsed.size(), 2u);
  EXPECT_EQ(parsed[1].name, "edp-h2");
  EXPECT_EQ(parsed[1].capacity, 1);
  setenv("EDP_LAUNCH_HOSTS", "edp-h1:2,edp-h2", 1);
  EXPECT_THROW(edp::knobs::launch_hosts(), edp::Error);
  unsetenv("EDP_LAUNCH_HOSTS");
  EXPECT_TRUE(edp::knobs::launch_hosts().empty());
}

TEST(RankEnvironment, GpuAndCpu) {
  RankContext c;
  c.rank = 5;
  c.size = 8;
  c.local_rank = 5;
  c.local_size = 8;
  c.ranks_per_gpu = 4;
  c.gpu_mode = true;
  c.gpus = fake_gpus(2);
  c.mps = true;
  c.job_dir = "/j";
  c.mps_thread_percentage = 50;
  c.mps_mem_limit = "4G";
  c.cores = 16;
  std::map<std::string, std::string> env;
  for (const auto& [k, v] : rank_environment(c)) env[k] = v;
  EXPECT_EQ(env["EDP_LOCAL_GPU"], "1");
  EXPECT_EQ(env["EDP_GPU_UUID"], "GPU-1001");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "GPU-1001");
  EXPECT_EQ(env["EDP_GPU_RANK"], "1");
  EXPECT_EQ(env["EDP_GPU_RANKS"], "4");
  EXPECT_EQ(env["EDP_NUM_THREADS"], "2");  // 16 cores / 8 local ranks
  EXPECT_EQ(env["CUDA_MPS_PIPE_DIRECTORY"], "/j/mps/1/pipe");
  EXPECT_EQ(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "50");
  EXPECT_EQ(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=4G");
  c.local_size = 9;  // more local ranks than 2 GPUs x 4
  c.local_rank = 0;
  EXPECT_THROW(rank_environment(c), edp::Error);
  RankContext cpu;
  cpu.local_size = 3;
  cpu.cores = 8;
  env.clear();
  for (const auto& [k, v] : rank_environment(cpu)) env[k] = v;
  EXPECT_EQ(env["EDP_NUM_THREADS"], "2");
  EXPECT_EQ(env["EDP_LOCAL_GPU"], "-1");
  EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u);
  cpu.bound = true;  // bound: the binding is the rank's share
  cpu.cores = 3;
  for (const auto& [k, v] : rank_environment(cpu)) {
    if (k == "EDP_NUM_THREADS") {
      EXPECT_EQ(v, "3");
    }
  }
}

TEST(Parsers, Hostfile) {
  const auto h = parse_hostfile_text("# cluster\nnode1 slots=4\n\nnode2 slots=2 max_slots=8  # gpu box\nnode1 slots=2\nnode3\n",
                                     "hf");
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0].name, "node1");
  EXPECT_EQ(h[0].slots, 6);  // repeated lines add up
  EXPECT_EQ(h[1].max_slots, 8);
  EXPECT_EQ(h[2].slots, 0);
  try {
    parse_hostfile_text("node1 gpus=4\n", "hf");
    FAIL();
  } catch (const edp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("hf:1"), std::string::npos);
  }
  EXPECT_THROW(parse_hostfile_text("# nothing\n", "hf"), edp::Error);
  EXPECT_THROW(parse_hostfile_text("n slots=4 max_slots=2\n", "hf"), edp::Error);
}

TEST(Parsers, Slurm) {
  EXPECT_EQ(expand_slurm_nodelist("node[01-03,07],gpu5"),
            (std::vector<std::string>{"node01", "node02", "node03", "node07", "gpu5"}));
  EXPECT_EQ(expand_slurm_nodelist("a[8-10]"), (std::vector<std::string>{"a8", "a9", "a10"}));
  EXPECT_EQ(expand_slurm_tasks_per_node("4(x2),3"), (std::vector<int>{4, 4, 3}));
  EXPECT_THROW(expand_slurm_nodelist("n[3-1]"), edp::Error);
  // A range that would name ten million hosts (a fuzzer's find: 2 GB) or run to INT_MAX: refused.
  try {
    (void)expand_slurm_nodelist("e[8-10101029]");
    ADD_FAILURE() << "expected an error";
  } catch (const edp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than 1048576 hosts"), std::string::npos) << e.what();
  }
  EXPECT_THROW(expand_slurm_nodelist("n[0-2147483647]"), edp::Error);
  EXPECT_THROW(expand_slurm_nodelist("n[1-100000]" + std::string(1000, 'x')), edp::Error);  // 100 MB of names
  EXPECT_EQ(expand_slurm_nodelist("n[1-100000]").size(), 100000u);
  setenv("SLURM_JOB_ID", "77", 1);
  setenv("SLURM_JOB_NODELIST", "g[1-2]", 1);
  setenv("SLURM_TASKS_PER_NODE", "8(x2)", 1);
  const auto hosts = slurm_hosts_from_env();
  ASSERT_TRUE(hosts.has_value());
  ASSERT_EQ(hosts->size(), 2u);
  EXPECT_EQ((*hosts)[1].name, "g2");
  EXPECT_EQ((*hosts)[1].slots, 8);
  // Inside Slurm mpirun gets no host list: Open MPI reads the allocation itself.
  LaunchRequest r = base(0, 4);
  r.host_source = HostSource::Slurm;
  r.hosts = *hosts;
  const Plan p = make_plan(r, fake_gpus(2));
  EXPECT_EQ(p.np, 16);
  EXPECT_FALSE(has_arg(p, "--host"));
  EXPECT_FALSE(has_arg(p, "--hostfile"));
  // An allocation smaller than -np: an error naming both numbers and the allocation.
  EXPECT_EQ(slurm_allocation_from_env(), "job 77: g[1-2], SLURM_TASKS_PER_NODE=8(x2)");
  LaunchRequest c = base(20, 1);
  c.gpus = {"none"};
  c.host_source = HostSource::Slurm;
  c.hosts = *hosts;
  c.slurm_allocation = slurm_allocation_from_env();
  try {
    make_plan(c, {});
    FAIL() << "-np 20 in 16 task slots was accepted";
  } catch (const edp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("-np 20 is more ranks than the Slurm allocation has task slots: 16 on 2 node(s) "
                                         "(job 77: g[1-2], SLURM_TASKS_PER_NODE=8(x2))"),
              std::string::npos)
        << e.what();
  }
  for (const char* v : {"SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_TASKS_PER_NODE"}) unsetenv(v);
  EXPECT_FALSE(slurm_hosts_from_env().has_value());
}

TEST(Parsers, NvidiaSmiCsv) {
  const auto g = parse_nvidia_smi_csv(
      "0, GPU-aaaa, NVIDIA H100 80GB HBM3, 81559, 9.0, Default\n"
      "1, GPU-bbbb, NVIDIA A100-SXM4-40GB, 40960, 8.0, Exclusive_Process\n");
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].uuid, "GPU-aaaa");
  EXPECT_EQ(g[0].cc_major, 9);
  EXPECT_EQ(g[1].memory_mib, 40960);
  EXPECT_EQ(g[1].compute_mode, "Exclusive_Process");
  const auto old = parse_nvidia_smi_csv("0, GPU-x, Tesla P100, 16280, Default\n", false);
  EXPECT_EQ(old[0].cc_major, 0);
  EXPECT_THROW(parse_nvidia_smi_csv("0, GPU-x\n"), edp::Error);
}

// nvidia-smi -L on a host with MIG instances (the listing in NVIDIA's MIG user guide): the
// instances in order, indexed across GPUs, with their UUIDs, profiles and memory; a GPU with MIG
// off has none; a MIG line that does not read is an error, never skipped.
TEST(Parsers, NvidiaSmiListMig) {
  const auto m = parse_nvidia_smi_list_mig(
      "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n"
      "  MIG 1g.5gb      Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)\n"
      "  MIG 1c.3g.20gb  Device  1: (UUID: MIG-cba663e8-9bed-5b7e-8f6f-ac2a7e4bdf03)\n"
      "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-0e2d1a3b-0000-0000-0000-000000000001)\n"
      "GPU 2: NVIDIA H100 80GB HBM3 (UUID: GPU-0e2d1a3b-0000-0000-0000-000000000002)\n"
      "  MIG 3g.40gb     Device  0: (UUID: MIG-11111111-2222-3333-4444-555555555555)\n");
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].index, 0);
  EXPECT_EQ(m[0].uuid, "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f");
  EXPECT_EQ(m[0].mig_profile, "1g.5gb");
  EXPECT_EQ(m[0].memory_mib, 5 * 1024);
  EXPECT_EQ(m[1].mig_profile, "1c.3g.20gb");
  EXPECT_EQ(m[1].memory_mib, 20 * 1024);
  EXPECT_EQ(m[2].index, 2);
  EXPECT_EQ(m[2].parent, 2);
  EXPECT_EQ(m[2].name, "NVIDIA H100 80GB HBM3 MIG 3g.40gb");
  EXPECT_TRUE(parse_nvidia_smi_list_mig("GPU 0: NVIDIA H100 (UUID: GPU-x)\n").empty());
  EXPECT_THROW(parse_nvidia_smi_list_mig("GPU 0: X (UUID: GPU-x)\n  MIG 1g.10gb Device ?: (UUID: MIG-y)\n"),
               edp::Error);
}

TEST(Format, ShellQuote) {
  EXPECT_EQ(shell_quote("plain-arg_1.txt"), "plain-arg_1.txt");
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
}

TEST(Placement, FromEnvironment) {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                        "OMPI_COMM_WORLD_LOCAL_SIZE", "EDP_LAUNCHER", "EDP_RANK", "EDP_WORLD_SIZE", "EDP_LOCAL_GPU"})
    unsetenv(v);
  Placement p = placement_from_env();  // plain run: rank 0 of 1, CPU
  EXPECT_FALSE(p.from_edprun);
  EXPECT_EQ(p.world_size, 1);
  EXPECT_FALSE(p.gpu_mode);
  // Plain mpirun: Open MPI's variables.
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  p = placement_from_env();
  EXPECT_EQ(p.rank, 3);
  EXPECT_EQ(p.local_size, 2);
  // edprun's variables, K=2 without MPS: the check warns.
  setenv("EDP_LAUNCHER", "edprun", 1);
  setenv("EDP_RANK", "3", 1);
  setenv("EDP_WORLD_SIZE", "4", 1);
  setenv("EDP_LOCAL_GPU", "1", 1);
  setenv("EDP_GPU_UUID", "GPU-1001", 1);
  setenv("EDP_GPU_RANK", "1", 1);
  setenv("EDP_GPU_RANKS", "2", 1);
  setenv("EDP_MPS_ACTIVE", "0", 1);
  p = placement_from_env();
  EXPECT_TRUE(p.from_edprun);
  EXPECT_TRUE(p.gpu_mode);
  EXPECT_EQ(p.gpu_ranks, 2);
  EXPECT_NE(check_placement(p).find("without MPS"), std::string::npos);
  setenv("EDP_MPS_ACTIVE", "1", 1);
  p = placement_from_env();
  EXPECT_EQ(check_placement(p).find("without MPS"), std::string::npos);
  // A rank spawned by an in-place grow: Open MPI numbers it from 0 in the spawned group, the grown
  // job's numbering starts at EDP_SPAWN_RANK_BASE (what edprun's shim told it, checked against that).
  setenv("EDP_SPAWN_RANK_BASE", "4", 1);
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  setenv("EDP_RANK", "5", 1);
  setenv("EDP_WORLD_SIZE", "6", 1);
  unsetenv("EDP_LOCAL_GPU");
  p = placement_from_env();
  EXPECT_EQ(p.rank, 5);
  EXPECT_EQ(p.world_size, 6);
  EXPECT_EQ(p.local_rank, 5) << "one host: local rank offset as the rank";
  EXPECT_EQ(p.local_size, 6);
  setenv("EDP_RANK", "1", 1);  // Open MPI's number, not the grown job's
  try {
    placement_from_env();
    ADD_FAILURE() << "accepted EDP_RANK=1 for spawned rank 1 + base 4";
  } catch (const edp::Error& e) {
    EXPECT_NE(std::string(e.what()).find("EDP_SPAWN_RANK_BASE=4 included"), std::string::npos) << e.what();
  }
  unsetenv("EDP_SPAWN_RANK_BASE");
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("EDP_WORLD_SIZE", "4", 1);
  setenv("EDP_LOCAL_GPU", "1", 1);
  // Contradictions are errors naming the variables.
  setenv("EDP_RANK", "2", 1);
  EXPECT_THROW(placement_from_env(), edp::Error);
  setenv("EDP_RANK", "3", 1);
  setenv("EDP_GPU_RANK", "2", 1);
  EXPECT_THROW(placement_from_env(), edp::Error);
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                        "OMPI_COMM_WORLD_LOCAL_SIZE", "EDP_LAUNCHER", "EDP_RANK", "EDP_WORLD_SIZE", "EDP_LOCAL_GPU",
                        "EDP_GPU_UUID", "EDP_GPU_RANK", "EDP_GPU_RANKS", "EDP_MPS_ACTIVE"})
    unsetenv(v);
}

// ---- elastic: the sizes a job may be rescaled to, and the size it committed ------------------

TEST(AllowedWorkers, ParseAndFormat) {
  using edp::elastic::format_allowed_workers;
  using edp::elastic::parse_allowed_workers;
  EXPECT_EQ(parse_allowed_workers(""), std::vector<int>{});
  EXPECT_EQ(parse_allowed_workers("1-4,6,8"), (std::vector<int>{1, 2, 3, 4, 6, 8}));
  EXPECT_EQ(parse_allowed_workers(" 8, 2 ,2,3-3"), (std::vector<int>{2, 3, 8}));
  EXPECT_EQ(format_allowed_workers({1, 2, 3, 4, 6, 8}), "1-4,6,8");
  EXPECT_EQ(format_allowed_workers({4, 2, 1, 2}), "1,2,4");
  EXPECT_EQ(format_allowed_workers({}), "");
  for (const std::vector<int>& v : {std::vector<int>{1}, {1, 2}, {1, 2, 3}, {2, 4, 5, 6, 9, 10}})
    EXPECT_EQ(parse_allowed_workers(format_allowed_workers(v)), v);
  for (const char* bad : {"x", "1,,2", "0", "-1", "4-2", "1-", "2.5", "1-99999", "1;2"}) {
    try {
      parse_allowed_workers(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const edp::Error& e) {
      EXPECT_NE(std::string(e.what()).find("EDP_ALLOWED_WORKERS '"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(edp::elastic::workers_allowed({}, 7));
  EXPECT_TRUE(edp::elastic::workers_allowed({1, 2, 4}, 4));
  EXPECT_FALSE(edp::elastic::workers_allowed({1, 2, 4}, 3));
}

TEST(AllowedWorkers, TheCountsMakePlanAccepts) {
  // GPU mode: 2 GPUs x K = 2 on one host.
  EXPECT_EQ(allowed_worker_counts(base(3, 2), fake_gpus(2)), (std::vector<int>{1, 2, 3, 4}));
  // Hostfile slots bound the counts (2 hosts x 2 GPUs x K = 4, but slots=3 on each).
  LaunchRequest r = base(0, 4);
  r.host_source = HostSource::Hostfile;
  r.hosts = {{"a", 3, 0}, {"b", 3, 0}};
  EXPECT_EQ(allowed_worker_counts(r, fake_gpus(2)), (std::vector<int>{1, 2, 3, 4, 5, 6}));
  // CPU mode: the cores; with --oversubscribe also up to the size the job was started at.
  r = base(2, 1);
  r.local_cores = 4;
  EXPECT_EQ(allowed_worker_counts(r, {}), (std::vector<int>{1, 2, 3, 4}));
  r.np = 6;
  r.oversubscribe = true;
  EXPECT_EQ(allowed_worker_counts(r, {}), (std::vector<int>{1, 2, 3, 4, 5, 6}));
  // --bind-to core refuses more ranks than cores.
  r.np = 2;
  r.bind = BindMode::Core;
  r.oversubscribe = false;
  EXPECT_EQ(allowed_worker_counts(r, {}), (std::vector<int>{1, 2, 3, 4}));
}

TEST(RescaleRecord, ReadAndReject) {
  const std::string path = testing::TempDir() + "/edp_rescale_record_test.json";
  auto with = [&](const std::string& text) {
    std::ofstream(path) << text;
    return path;
  };
  const RescaleRecord r =
      read_rescale_record(with(R"({"workers": 2, "global_batch": 64, "step": 5, "checkpoint": "c/ckpt-5.edp", "new": 1})"));
  EXPECT_EQ(r.workers, 2);
  EXPECT_EQ(r.global_batch, 64);
  EXPECT_EQ(r.step, 5);
  EXPECT_EQ(r.checkpoint, "c/ckpt-5.edp");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"workers": 2, "glob)", "malformed JSON"},
      {R"([2])", "expected a JSON object"},
      {R"({"global_batch": 64, "step": 5, "checkpoint": "c"})", "'workers' is missing"},
      {R"({"workers": "2", "global_batch": 64, "step": 5, "checkpoint": "c"})", "'workers' must be an integer"},
      {R"({"workers": 0, "global_batch": 64, "step": 5, "checkpoint": "c"})", "'workers' must be >= 1"},
      {R"({"workers": 3, "global_batch": 64, "step": 5, "checkpoint": "c"})", "is not divisible by 'workers' 3"},
      {R"({"workers": 2, "global_batch": 64, "step": -1, "checkpoint": "c"})", "'step' must be >= 0"},
      {R"({"workers": 2, "global_batch": 64, "step": 5})", "'checkpoint' must be"},
  };
  for (const auto& [text, message] : bad) {
    try {
      read_rescale_record(with(text));
      ADD_FAILURE() << "accepted " << text;
    } catch (const edp::Error& e) {
      EXPECT_NE(std::string(e.what()).find("rescale file " + path + ": " ), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
  std::remove(path.c_str());
  try {
    read_rescale_record(path);
    ADD_FAILURE() << "a missing file was accepted";
  } catch (const edp::Error& e) {
    EXPECT_EQ(std::string(e.what()), "rescale file " + path + " is missing");
  }
}

// A job directory is stale only when its owner is this host's and pid namespace's and that
// very process (pid and start time) is gone; one without owner.json is never touched.
TEST(JobDir, StaleOnlyWhenTheOwnerIsGone) {
  std::string root = testing::TempDir() + "/edp-jobdir-test.XXXXXX";
  ASSERT_NE(mkdtemp(root.data()), nullptr);
  JobOwner me = current_owner("");
  EXPECT_GT(me.start_time, 0u);
  EXPECT_FALSE(owner_is_dead(me));
  JobOwner reused = me;
  reused.start_time += 1;  // the pid now names another process
  EXPECT_TRUE(owner_is_dead(reused));
  JobOwner elsewhere = reused;
  elsewhere.host = me.host + "-other";
  EXPECT_FALSE(owner_is_dead(elsewhere)) << "another host's pids mean nothing here";
  elsewhere = reused;
  elsewhere.pid_ns = "pid:[1]";
  EXPECT_FALSE(owner_is_dead(elsewhere)) << "another pid namespace's pids mean nothing here";

  for (const char* d : {"/edprun.live", "/edprun.dead", "/edprun.noowner", "/other.dead"})
    ASSERT_EQ(mkdir((root + d).c_str(), 0700), 0);
  write_owner(root + "/edprun.live", me);
  write_owner(root + "/edprun.dead", reused);
  write_owner(root + "/other.dead", reused);
  EXPECT_EQ(read_owner(root + "/edprun.dead").start_time, reused.start_time);
  const std::vector<StaleJob> removed = clean_stale_job_dirs(root, "/nonexistent/nvidia-cuda-mps-control");
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].dir, root + "/edprun.dead");
  EXPECT_EQ(removed[0].pid, me.pid);
  struct stat st {};
  EXPECT_NE(stat((root + "/edprun.dead").c_str(), &st), 0);
  EXPECT_EQ(stat((root + "/edprun.live").c_str(), &st), 0);
  EXPECT_EQ(stat((root + "/edprun.noowner").c_str(), &st), 0);
  EXPECT_EQ(stat((root + "/other.dead").c_str(), &st), 0) << "only edprun.* directories";
  remove_tree(root, root.substr(0, root.rfind('/')));
}

// A stale owner record decides nothing outside edprun's own directories: a shm_dir that climbs
// out of /dev/shm ("/dev/shm/edprun.X/../../..<path>" passed the old prefix check and removed
// <path>) is ignored while the job directory goes; a real one (mkdtemp'd in /dev/shm) goes too.
// An owner.json that is a FIFO or a link to /dev/zero is refused at once (one blocked every later
// edprun; the other was read to 2 GB), and that directory is left alone.
TEST(JobDir, AStaleOwnerRecordRemovesOnlyEdprunsDirectories) {
  std::string root = testing::TempDir() + "/edp-jobdir-owner.XXXXXX";
  ASSERT_NE(mkdtemp(root.data()), nullptr);
  const std::string victim = root + "/victim";
  ASSERT_EQ(mkdir(victim.c_str(), 0700), 0);
  std::ofstream(victim + "/precious") << "keep\n";
  // The climb starts in a directory that exists, as it must for the path to resolve.
  std::string base = "/dev/shm/edprun.XXXXXX", shm = base;
  const bool have_shm = mkdtemp(base.data()) != nullptr && mkdtemp(shm.data()) != nullptr;
  if (!have_shm) GTEST_SKIP() << "no writable /dev/shm here";
  JobOwner dead = current_owner(base + "/../../.." + victim);  // resolves to victim
  dead.start_time += 1;  // its pid now names another process: the owner is gone
  ASSERT_EQ(mkdir((root + "/edprun.climb").c_str(), 0700), 0);
  write_owner(root + "/edprun.climb", dead);
  {
    JobOwner real = dead;
    real.shm_dir = shm;
    ASSERT_EQ(mkdir((root + "/edprun.real").c_str(), 0700), 0);
    write_owner(root + "/edprun.real", real);
  }
  ASSERT_EQ(mkdir((root + "/edprun.fifo").c_str(), 0700), 0);
  ASSERT_EQ(mkfifo((root + "/edprun.fifo/owner.json").c_str(), 0600), 0);
  ASSERT_EQ(mkdir((root + "/edprun.zero").c_str(), 0700), 0);
  ASSERT_EQ(symlink("/dev/zero", (root + "/edprun.zero/owner.json").c_str()), 0);
  const edp_test::ChildResult r = edp_test::run_in_child([&] {
    std::string out;
    for (const StaleJob& j : clean_stale_job_dirs(root, "/nonexistent/nvidia-cuda-mps-control")) out += j.dir + "\n";
    return out;
  });
  ASSERT_TRUE(r.finished) << "a FIFO as owner.json blocked edprun";
  struct stat st {};
  EXPECT_EQ(stat((victim + "/precious").c_str(), &st), 0) << "edprun removed a directory outside its own";
  EXPECT_NE(stat((root + "/edprun.climb").c_str(), &st), 0) << r.output;
  EXPECT_NE(stat(shm.c_str(), &st), 0) << "its real shared-memory directory stayed";
  EXPECT_NE(stat((root + "/edprun.real").c_str(), &st), 0);
  rmdir(base.c_str());
  EXPECT_EQ(stat((root + "/edprun.fifo").c_str(), &st), 0);
  EXPECT_EQ(stat((root + "/edprun.zero").c_str(), &st), 0);
  for (const char* d : {"/edprun.fifo", "/edprun.zero"}) {
    try {
      read_owner(root + d);
      ADD_FAILURE() << d << ": accepted";
    } catch (const edp::Error& e) {
      EXPECT_NE(std::string(e.what()).find(root + d + "/owner.json: a "), std::string::npos) << e.what();
    }
  }
  remove_tree(root, root.substr(0, root.rfind('/')));
}
