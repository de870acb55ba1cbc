// edprun end to end on a CPU machine: the --dry-run output (golden files), the MPS lifecycle
// against a fake nvidia-cuda-mps-control and a fake nvidia-smi (tests/launch/fake/, which record
// their calls), CPU mode running real MPI programs, exit codes, and a SIGTERM to edprun.
// Each test gets its own TMPDIR and checks that nothing is left in it.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "launch/mps.h"
#include "launch/system.h"

using namespace edp::launch;

namespace {

const std::string kSrc = EDP_SOURCE_DIR "/tests/launch";

std::string read_file(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> list_dir(const std::string& d) {
  std::vector<std::string> out;
  if (DIR* dir = opendir(d.c_str())) {
    while (dirent* e = readdir(dir))
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") out.push_back(e->d_name);
    closedir(dir);
  }
  return out;
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// A private scratch area: TMPDIR for edprun's job directory, the fakes' log, the probes' output.
class Scratch {
 public:
  Scratch() {
    // Short on purpose: MPS pipe directories must fit a Unix socket path.
    std::string t = "/tmp/edp-launch-test.XXXXXX";
    root = mkdtemp(t.data());
    tmp = root + "/tmp";
    out = root + "/out";
    log = root + "/fake.log";
    mkdir(tmp.c_str(), 0700);
    mkdir(out.c_str(), 0700);
  }
  ~Scratch() { remove_tree(root); }
  std::vector<std::pair<std::string, std::string>> env(bool fakes = true) const {
    std::vector<std::pair<std::string, std::string>> e = {
        {"TMPDIR", tmp}, {"EDP_FAKE_LOG", log}, {"EDP_HOSTNAME", "testhost"}, {"PROBE_OUT", out}, {"CUDA_VISIBLE_DEVICES", ""},
        // Root is allowed by the explicit flag in each command line, not by Open MPI's variables.
        {"OMPI_ALLOW_RUN_AS_ROOT", ""}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", ""}};
    if (fakes) e.emplace_back("PATH", kSrc + "/fake:" + std::getenv("PATH"));
    return e;
  }
  std::string root, tmp, out, log;
};

std::vector<std::string> edprun(std::vector<std::string> args) {
  args.insert(args.begin(), {EDPRUN_EXE, "--allow-run-as-root"});
  return args;
}

// Replaces what differs between machines and runs with placeholders.
std::string normalize(std::string s, const Scratch& sc) {
  auto replace_all = [&](const std::string& from, const std::string& to) {
    for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  };
  replace_all(sc.tmp, "<TMPDIR>");
  replace_all(EDPRUN_EXE, "<EDPRUN>");
  return s;
}

void expect_golden(const std::string& actual, const std::string& name) {
  const std::string path = kSrc + "/golden/" + name;
  if (std::getenv("EDP_UPDATE_GOLDEN")) {
    std::ofstream(path) << actual;
    GTEST_SKIP() << "wrote " << path;
  }
  const std::string expected = read_file(path);
  EXPECT_EQ(actual, expected) << "dry-run output differs from " << path
                              << " (rerun with EDP_UPDATE_GOLDEN=1 to accept a deliberate change)";
}

// The start/quit lines of the fake MPS program: every daemon started was told to quit, with the
// same pipe directory, and the directories are inside this test's TMPDIR.
void expect_daemons_started_and_stopped(const Scratch& sc, int gpus) {
  const std::string log = read_file(sc.log);
  std::regex start_re("start gpu=(GPU-\\S+) pipe=(\\S+) log=(\\S+)");
  int starts = 0;
  for (std::sregex_iterator it(log.begin(), log.end(), start_re), end; it != end; ++it, ++starts) {
    const std::string pipe = (*it)[2];
    EXPECT_EQ(pipe.rfind(sc.tmp + "/edprun.", 0), 0u) << pipe;
    EXPECT_NE(pipe.find("/mps/" + std::to_string(starts) + "/pipe"), std::string::npos) << pipe;
    EXPECT_EQ((*it)[1], "GPU-fake0000-0000-0000-0000-00000000000" + std::to_string(starts));
    EXPECT_EQ(count(log, "cmd quit pipe=" + pipe + "\n"), 1) << "no quit for " << pipe << "\n" << log;
  }
  EXPECT_EQ(starts, gpus) << log;
  EXPECT_TRUE(list_dir(sc.tmp).empty()) << "left behind in TMPDIR: " << list_dir(sc.tmp).front();
}

}  // namespace

TEST(EdprunDryRun, GpuPlanGolden) {
  Scratch sc;
  const RunResult r = run_capture(edprun({"--dry-run", "-np", "7", "--ranks-per-gpu", "4", "--cores-per-host", "16",
                                          "--gpu-discovery", "nvidia-smi", "--mps-mem-limit", "8G", "--", "./train",
                                          "--epochs", "1", "--name", "a b"}),
                                  sc.env());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(list_dir(sc.tmp).empty()) << "a dry run creates nothing";
  expect_golden(normalize(r.out, sc), "dryrun_gpu.txt");
}

TEST(EdprunDryRun, CpuPlanGoldenAndHostfile) {
  Scratch sc;
  std::ofstream(sc.root + "/hosts") << "# two hosts\nnodeA slots=3\nnodeB slots=3\n";
  const RunResult r = run_capture(edprun({"--dry-run", "--np", "5", "--hostfile", sc.root + "/hosts", "--cores-per-host",
                                          "6", "--gpus", "none", "--", "./train"}),
                                  sc.env());
  ASSERT_EQ(r.status, 0) << r.err;
  expect_golden(normalize(r.out, sc), "dryrun_cpu_hostfile.txt");
}

TEST(EdprunDryRun, EveryOptionHasAnEnvironmentVariable) {
  Scratch sc;
  auto env = sc.env();
  env.emplace_back("EDP_NP", "3");
  env.emplace_back("EDP_RANKS_PER_GPU", "2");
  env.emplace_back("EDP_GPU_DISCOVERY", "nvidia-smi");
  env.emplace_back("EDP_DRY_RUN", "1");
  env.emplace_back("EDP_OVERSUBSCRIBE", "1");
  env.emplace_back("EDP_MPS", "off");
  const RunResult r = run_capture(edprun({"--", "./train"}), env);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("ranks     3 (2 per GPU)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mps       off (--mps off)"), std::string::npos) << r.out;
}

TEST(EdprunErrors, ExitCodeTwo) {
  Scratch sc;
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--bogus", "--", "x"}, "unknown option --bogus"},
      {{"-np", "2"}, "nothing to run"},
      {{"-np", "9", "--ranks-per-gpu", "4", "--gpu-discovery", "nvidia-smi", "--oversubscribe", "--", "x"},
       "needs more GPU slots than there are"},
      {{"--mps", "on", "--gpus", "none", "--", "x"}, "no GPU to share"},
      {{"--hostfile", "/nonexistent/hosts", "--", "x"}, "cannot open"},
      {{"--mps", "sometimes", "--", "x"}, "expected auto, on or off"},
  };
  for (const auto& c : cases) {
    const RunResult r = run_capture(edprun(c.args), sc.env());
    EXPECT_EQ(r.status, 2) << c.message << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
  if (geteuid() == 0) {  // root needs the explicit flag
    const RunResult r = run_capture({EDPRUN_EXE, "--", "true"}, sc.env());
    EXPECT_EQ(r.status, 2);
    EXPECT_NE(r.err.find("--allow-run-as-root"), std::string::npos) << r.err;
  }
  EXPECT_TRUE(list_dir(sc.tmp).empty());
}

TEST(EdprunMps, DaemonPerGpuStartedAndStoppedOnSuccess) {
  Scratch sc;
  const RunResult r = run_capture(edprun({"-np", "4", "--ranks-per-gpu", "2", "--mps", "on", "--gpu-discovery",
                                          "nvidia-smi", "--oversubscribe", "--", RANK_PROBE_EXE, "ok"}),
                                  sc.env());
  ASSERT_EQ(r.status, 0) << r.err;
  expect_daemons_started_and_stopped(sc, 2);
  // Each rank was told its GPU, its position on it, and its daemon's pipe.
  for (int rank = 0; rank < 4; ++rank) {
    const std::string line = read_file(sc.out + "/rank." + std::to_string(rank));
    const int gpu = rank / 2;
    EXPECT_NE(line.find("gpu " + std::to_string(gpu) + " (GPU-fake0000-0000-0000-0000-00000000000" + std::to_string(gpu) +
                        ") shared by 2 [" + std::to_string(rank % 2) + "] mps"),
              std::string::npos)
        << line;
    EXPECT_NE(line.find("/mps/" + std::to_string(gpu) + "/pipe"), std::string::npos) << line;
    EXPECT_NE(line.find("pct=100"), std::string::npos) << line;  // K=2: ceil(200/2)
  }
}

TEST(EdprunMps, StoppedWhenARankFails) {
  Scratch sc;
  const RunResult r = run_capture(edprun({"-np", "4", "--ranks-per-gpu", "4", "--gpu-discovery", "nvidia-smi",
                                          "--oversubscribe", "--", RANK_PROBE_EXE, "fail", "2", "3"}),
                                  sc.env());
  EXPECT_EQ(r.status, 3) << "the failing rank's exit code is passed through\n" << r.err;
  expect_daemons_started_and_stopped(sc, 1);
}

TEST(EdprunMps, StoppedOnSigterm) {
  Scratch sc;
  const auto args = edprun({"-np", "4", "--ranks-per-gpu", "2", "--gpu-discovery", "nvidia-smi", "--oversubscribe",
                            "--kill-grace", "20", "--", RANK_PROBE_EXE, "sleep"});
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    for (const auto& [k, v] : sc.env()) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> a;
    for (const auto& s : args) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  // Wait until every rank runs (each writes ready.<rank> with its pid).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (count(" " + [&] {
           std::string s;
           for (const auto& f : list_dir(sc.out)) s += f + " ";
           return s;
         }(), " ready.") < 4) {
    ASSERT_LT(std::chrono::steady_clock::now(), until) << "the ranks did not start";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::vector<pid_t> ranks;
  for (int i = 0; i < 4; ++i) ranks.push_back(std::atoi(read_file(sc.out + "/ready." + std::to_string(i)).c_str()));
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 128 + SIGTERM);
  expect_daemons_started_and_stopped(sc, 2);
  // No rank survives edprun (a zombie awaiting its reaper counts as gone).
  for (pid_t rp : ranks) {
    const std::string stat = read_file("/proc/" + std::to_string(rp) + "/stat");
    const bool gone = stat.empty() || stat.find(") Z") != std::string::npos;
    EXPECT_TRUE(gone) << "rank pid " << rp << " still running: " << stat;
  }
}

TEST(EdprunMps, StartFailureOnFailsAutoFallsBack) {
  Scratch sc;
  auto env = sc.env();
  env.emplace_back("EDP_FAKE_MPS_FAIL", "1");
  RunResult r = run_capture(edprun({"-np", "2", "--ranks-per-gpu", "2", "--mps", "on", "--gpu-discovery", "nvidia-smi",
                                    "--", RANK_PROBE_EXE, "ok"}),
                            env);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("cannot start"), std::string::npos) << r.err;
  EXPECT_TRUE(list_dir(sc.tmp).empty());
  EXPECT_TRUE(list_dir(sc.out).empty()) << "--mps on must not run the program time-sliced";
  r = run_capture(edprun({"-np", "2", "--ranks-per-gpu", "2", "--gpu-discovery", "nvidia-smi", "--", RANK_PROBE_EXE, "ok"}),
                  env);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("warning: MPS could not be started"), std::string::npos) << r.err;
  EXPECT_NE(read_file(sc.out + "/rank.1").find("time-sliced"), std::string::npos);
  EXPECT_TRUE(list_dir(sc.tmp).empty());
}

TEST(EdprunMps, ReusedDaemonIsNeitherStartedNorStopped) {
  Scratch sc;
  const RunResult r = run_capture(edprun({"-np", "2", "--ranks-per-gpu", "2", "--mps-pipe-directory", sc.root + "/mine",
                                          "--gpu-discovery", "nvidia-smi", "--", RANK_PROBE_EXE, "ok"}),
                                  sc.env());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_file(sc.log).find("start"), std::string::npos);
  EXPECT_EQ(read_file(sc.log).find("quit"), std::string::npos);
  EXPECT_NE(read_file(sc.out + "/rank.0").find("pipe=" + sc.root + "/mine"), std::string::npos);
}

TEST(EdprunCpu, ProbePlacementAndExitCodes) {
  Scratch sc;
  RunResult r = run_capture(edprun({"-np", "3", "--oversubscribe", "--gpu-discovery", "none", "--", RANK_PROBE_EXE, "ok"}),
                            sc.env(false));
  ASSERT_EQ(r.status, 0) << r.err;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string line = read_file(sc.out + "/rank." + std::to_string(rank));
    EXPECT_NE(line.find("rank " + std::to_string(rank) + "/3 local " + std::to_string(rank) + "/3 cpu"), std::string::npos)
        << line;
    EXPECT_NE(line.find("threads=" + std::to_string(std::max(1, physical_cores() / 3))), std::string::npos) << line;
  }
  r = run_capture(edprun({"-np", "2", "--gpu-discovery", "none", "--", RANK_PROBE_EXE, "fail", "1", "7"}), sc.env(false));
  EXPECT_EQ(r.status, 7) << r.err;
  r = run_capture(edprun({"-np", "1", "--gpu-discovery", "none", "--", "/nonexistent/program"}), sc.env(false));
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(list_dir(sc.tmp).empty());
}

#ifdef COLLECTIVES_EXE
TEST(EdprunCpu, MpiCollectivesFourRanks) {
  Scratch sc;
  const RunResult r = run_capture(
      edprun({"-np", "4", "--oversubscribe", "--gpu-discovery", "none", "--", COLLECTIVES_EXE, "--gtest_brief=1",
              // The untyped suite (ranks, splits, dup, tensors); the size sweeps run in tests/comm.
              "--gtest_filter=Comm.*"}),
      sc.env(false));
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_TRUE(list_dir(sc.tmp).empty());
}
#endif

#ifdef CNN_EXE
TEST(EdprunCpu, CnnExampleTwoRanks) {
  Scratch sc;
  const RunResult r = run_capture(edprun({"-np", "2", "--gpu-discovery", "none", "--", CNN_EXE, "--epochs", "1", "--limit",
                                          "256", "--batch", "32"}),
                                  sc.env(false));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"world_size\": 2"), std::string::npos) << r.out;
  EXPECT_TRUE(list_dir(sc.tmp).empty());
}
#endif
