// edprun end to end on a CPU machine: the --dry-run output (golden files), the MPS lifecycle
// against a fake nvidia-cuda-mps-control and a fake nvidia-smi (tests/launch/fake/, which record
// their calls), CPU mode running real MPI programs, exit codes, and a SIGTERM to edprun; the
// elastic restarts (exit 75 at the size the job committed, exit 76 after a stall) and what a
// SIGKILL of mpirun or of edprun may leave behind.
// Each test gets its own TMPDIR and checks that nothing is left in it.
// EDPRUN_TEST_EXE=/path/to/edprun runs the tests against another edprun (an installed one, or
// an older build to show that a test fails without the change it covers).
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
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
  ~Scratch() { remove_tree(root, "/tmp"); }
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

std::string edprun_exe() {
  const char* e = std::getenv("EDPRUN_TEST_EXE");
  return e && *e ? e : EDPRUN_EXE;
}

std::vector<std::string> edprun(std::vector<std::string> args) {
  args.insert(args.begin(), {edprun_exe(), "--allow-run-as-root"});
  return args;
}

// edprun in the background, its stdout and stderr into files of the scratch root.
pid_t start_edprun(const std::vector<std::string>& args, const std::vector<std::pair<std::string, std::string>>& env,
                   const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> a;
    for (const auto& x : args) a.push_back(const_cast<char*>(x.c_str()));
    a.push_back(nullptr);
    execv(a[0], a.data());
    _exit(127);
  }
  return pid;
}

// A process that still runs (a zombie awaiting its reaper counts as gone).
bool alive(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  return !stat.empty() && stat.find(") Z") == std::string::npos;
}

// Polls cond every 50 ms for up to `seconds` (generous: the machine may be busy).
template <class F>
bool eventually(F cond, double seconds = 60) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

// waitpid with a deadline; the exit status as status_code() in edprun, -1 if it did not end.
int wait_exit(pid_t pid, double seconds = 120) {
  int st = 0;
  if (!eventually([&] { return waitpid(pid, &st, WNOHANG) == pid; }, seconds)) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// What each rank of a `rank_probe sleep|mpi-sleep` job wrote once it ran.
struct ReadyRank {
  pid_t pid = 0, parent = 0;
  std::string session_dir, shm_dir;  // Open MPI's, as the rank's environment names them ("-": unset)
};
std::vector<ReadyRank> wait_ready(const Scratch& sc, int ranks) {
  std::vector<ReadyRank> out;
  const bool all = eventually([&] {
    for (int i = 0; i < ranks; ++i)
      if (read_file(sc.out + "/ready." + std::to_string(i)).find('\n') == std::string::npos) return false;
    return true;
  });
  if (!all) return out;
  for (int i = 0; i < ranks; ++i) {
    std::istringstream is(read_file(sc.out + "/ready." + std::to_string(i)));
    ReadyRank r;
    is >> r.pid >> r.parent >> r.session_dir >> r.shm_dir;
    out.push_back(r);
  }
  return out;
}

bool exists(const std::string& path) {
  struct stat st{};
  return !path.empty() && stat(path.c_str(), &st) == 0;
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
      // Durations and counts are refused below their range, from the flag or the environment.
      {{"--restart-backoff", "-1", "--", "x"}, "--restart-backoff (flag) must be a number in [0, 86400], got '-1'"},
      {{"--kill-grace=-5", "--", "x"}, "--kill-grace (flag) must be an integer in [0, 86400]"},
      {{"--max-restarts", "-1", "--", "x"}, "--max-restarts (flag) must be an integer in [0, 1000000]"},
  };
  for (const auto& c : cases) {
    const RunResult r = run_capture(edprun(c.args), sc.env());
    EXPECT_EQ(r.status, 2) << c.message << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
  if (geteuid() == 0) {  // root needs the explicit flag
    const RunResult r = run_capture({edprun_exe(), "--", "true"}, sc.env());
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

// --mig: MIG instances are the devices (the fake nvidia-smi lists 2 GPUs x 3 instances in MIG
// mode): one rank per instance, each seeing only its instance; --gpus picks instances; MPS inside
// instances and a host without instances are refused.
TEST(EdprunMig, OneRankPerInstance) {
  Scratch sc;
  auto env = sc.env();
  env.emplace_back("EDP_FAKE_MIG", "1g.10gb 1g.10gb 2g.20gb");
  const std::string show = "echo \"$EDP_RANK $CUDA_VISIBLE_DEVICES $EDP_LOCAL_GPU\" > " + sc.out + "/mig.$EDP_RANK";
  RunResult r = run_capture(edprun({"--mig", "--oversubscribe", "-np", "3", "--gpus", "1,2,4", "--", "/bin/sh", "-c", show}), env);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(read_file(sc.out + "/mig.0"), "0 MIG-fake0000-0000-0000-0000-000000000001 1\n");
  EXPECT_EQ(read_file(sc.out + "/mig.1"), "1 MIG-fake0000-0000-0000-0000-000000000002 2\n");
  EXPECT_EQ(read_file(sc.out + "/mig.2"), "2 MIG-fake0001-0000-0000-0000-000000000001 4\n");
  r = run_capture(edprun({"--mig", "--dry-run", "-np", "2", "--ranks-per-gpu", "2", "--", "/bin/true"}), env);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--mig: one rank per MIG instance"), std::string::npos) << r.err;
  r = run_capture(edprun({"--mig", "--dry-run", "-np", "1", "--", "/bin/true"}), sc.env());
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--mig: nvidia-smi -L: no MIG instance"), std::string::npos) << r.err;
  EXPECT_TRUE(list_dir(sc.tmp).empty());
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

// ---- elastic restarts -------------------------------------------------------------------------

// After exit 75 the job restarts at the size it committed (EDP_RESCALE_FILE), whatever happened to
// the control file in between: deleted, garbled, changed to a size the batch does not divide.
// Without --control-file too: the ranks may have been told the size another way.
TEST(EdprunElastic, RestartsAtTheCommittedSizeWhateverTheControlFileSays) {
  for (const std::string how : {"delete", "garble", "indivisible", "no-control-file"}) {
    SCOPED_TRACE(how);
    Scratch sc;
    const std::string ctl = sc.root + "/control.json";
    std::ofstream(ctl) << "{\"workers\": 1, \"global_batch\": 8}";
    std::vector<std::string> args = {"-np", "2", "--oversubscribe", "--gpu-discovery", "none"};
    if (how != "no-control-file") args.insert(args.end(), {"--control-file", ctl});
    args.insert(args.end(), {"--", RANK_PROBE_EXE, "rescale", "1", ctl, how});
    const RunResult r = run_capture(edprun(args), sc.env(false));
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("edprun: rescale 1: 2 -> 1 rank(s) (global batch 8, committed at step 5: "
                         "ckpt/ckpt-000000000005.edp)"),
              std::string::npos)
        << r.err;
    // The second start ran one rank, which was told where to record a size.
    const std::string line = read_file(sc.out + "/rank.0");
    EXPECT_NE(line.find("rank 0/1 "), std::string::npos) << line;
    EXPECT_NE(line.find("rescale_file=" + sc.tmp + "/edprun."), std::string::npos) << line;
    EXPECT_TRUE(list_dir(sc.tmp).empty()) << "left behind in TMPDIR: " << list_dir(sc.tmp).front();
  }
}

// Exit 75 without a rescale file is the job's bug: edprun says so, names the file, and treats it
// as a crash (a restart at the current size when --max-restarts allows, else exit 75).
TEST(EdprunElastic, Exit75WithoutRescaleFileIsAJobBug) {
  Scratch sc;
  RunResult r = run_capture(edprun({"-np", "2", "--oversubscribe", "--gpu-discovery", "none", "--", RANK_PROBE_EXE,
                                    "exit75"}),
                            sc.env(false));
  EXPECT_EQ(r.status, 75) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex("edprun: error: the job exited with 75 \\(stopped for a rescale\\) but "
                                                  "cannot be restarted at the size it committed: rescale file " +
                                                  sc.tmp + "/edprun\\.\\w+/rescale\\.json is missing")))
      << r.err;
  EXPECT_NE(r.err.find("bug of the job"), std::string::npos) << r.err;
  r = run_capture(edprun({"-np", "2", "--oversubscribe", "--gpu-discovery", "none", "--max-restarts", "1",
                          "--restart-backoff", "0", "--", RANK_PROBE_EXE, "exit75"}),
                  sc.env(false));
  EXPECT_EQ(r.status, 75) << r.err;
  EXPECT_NE(r.err.find("without a usable rescale file (exit 75); restart 1 of 1 at 2 rank(s)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("no restart left (--max-restarts 1)"), std::string::npos) << r.err;
  EXPECT_TRUE(list_dir(sc.tmp).empty());
}

// Exit 76 (a collective timed out) is restarted like a crash, and said to be a stall.
TEST(EdprunElastic, StallExit76IsRestarted) {
  Scratch sc;
  RunResult r = run_capture(edprun({"-np", "2", "--oversubscribe", "--gpu-discovery", "none", "--max-restarts", "2",
                                    "--restart-backoff", "0", "--", RANK_PROBE_EXE, "fail-once", "1", "76"}),
                            sc.env(false));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("edprun: the job stalled (a collective timed out, exit 76); restart 1 of 2 at 2 rank(s)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("edprun: the job ended with exit code 0 after 0 rescale(s) and 1 restart(s) (1 after a stall)"),
            std::string::npos)
      << r.err;
  r = run_capture(edprun({"-np", "2", "--oversubscribe", "--gpu-discovery", "none", "--", RANK_PROBE_EXE, "fail", "1",
                          "76"}),
                  sc.env(false));
  EXPECT_EQ(r.status, 76) << r.err;
  EXPECT_NE(r.err.find("the job stalled (a collective timed out, exit 76); no restart left (--max-restarts 0)"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(list_dir(sc.tmp).empty());
}

// Every rank is told the sizes the launch can run (what make_plan accepts), ranges shortened.
TEST(EdprunElastic, AllowedWorkersAreTheSizesThePlanAccepts) {
  Scratch sc;
  // (4 cores planned on a machine that may have fewer: no binding, which mpirun would refuse.)
  RunResult r = run_capture(edprun({"-np", "2", "--cores-per-host", "4", "--bind-to", "none", "--gpu-discovery", "none",
                                    "--", RANK_PROBE_EXE, "ok"}),
                            sc.env(false));
  ASSERT_EQ(r.status, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_NE(read_file(sc.out + "/rank." + std::to_string(rank)).find("allowed=1-4 "), std::string::npos)
        << read_file(sc.out + "/rank." + std::to_string(rank));
  // Two (fake) GPUs x 2 ranks per GPU: 1..4.
  r = run_capture(edprun({"-np", "3", "--ranks-per-gpu", "2", "--mps", "off", "--gpu-discovery", "nvidia-smi",
                          "--oversubscribe", "--", RANK_PROBE_EXE, "ok"}),
                  sc.env());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(read_file(sc.out + "/rank.2").find("allowed=1-4 "), std::string::npos) << read_file(sc.out + "/rank.2");
  // Two hosts of 3 slots: 1..6, shown by the dry run.
  std::ofstream(sc.root + "/hosts") << "nodeA slots=3\nnodeB slots=3\n";
  r = run_capture(edprun({"--dry-run", "--np", "2", "--hostfile", sc.root + "/hosts", "--cores-per-host", "6", "--gpus",
                          "none", "--", "./train"}),
                  sc.env());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("  EDP_ALLOWED_WORKERS=1-6\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("elastic: the job can run at 1-6 worker(s)"), std::string::npos) << r.out;
  EXPECT_TRUE(list_dir(sc.tmp).empty());
}

// An elastic job (--control-file) gets the events file, the shim as the spawn wrapper and, on one
// host, mpirun --oversubscribe; a job without a control file gets the events file only.
TEST(EdprunElastic, ElasticJobsGetTheEventsFileTheSpawnWrapperAndRoomToSpawn) {
  Scratch sc;
  const std::string ctl = sc.root + "/control.json";
  std::ofstream(ctl) << "{\"workers\": 2, \"global_batch\": 16}";
  RunResult r = run_capture(edprun({"--dry-run", "-np", "2", "--cores-per-host", "2", "--gpus", "none", "--control-file",
                                    ctl, "--", "./train"}),
                            sc.env());
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string out = normalize(r.out, sc);
  EXPECT_NE(out.find("  EDP_EVENTS_FILE=<TMPDIR>/edprun.XXXXXX/events.jsonl\n"), std::string::npos) << out;
  EXPECT_NE(out.find("  EDP_SPAWN_WRAPPER=<EDPRUN> --rank-exec --\n"), std::string::npos) << out;
  EXPECT_NE(out.find("mpirun --allow-run-as-root --oversubscribe -np 2 "), std::string::npos) << out;
  EXPECT_NE(out.find("--map-by slot:PE=1 --bind-to core"), std::string::npos) << "the ranks keep their cores\n" << out;
  r = run_capture(edprun({"--dry-run", "-np", "2", "--cores-per-host", "2", "--gpus", "none", "--", "./train"}), sc.env());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("EDP_EVENTS_FILE="), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("EDP_SPAWN_WRAPPER="), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("--oversubscribe"), std::string::npos) << r.out;
}

// edprun follows the job's size through its events: after an in-place shrink (2 -> 1, an event
// of rank 0) a crash restarts the job at 1 rank, not at the 2 edprun started; the summary lists
// the rescale with its pause and the restart.
TEST(EdprunElastic, CrashAfterAnInPlaceRescaleRestartsAtTheCurrentSize) {
  Scratch sc;
  const std::string ctl = sc.root + "/control.json";
  std::ofstream(ctl) << "{\"workers\": 1, \"global_batch\": 8}";
  const RunResult r = run_capture(edprun({"-np", "2", "--oversubscribe", "--gpu-discovery", "none", "--control-file", ctl,
                                          "--max-restarts", "1", "--restart-backoff", "0", "--", RANK_PROBE_EXE,
                                          "events"}),
                                  sc.env(false));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("edprun: the job failed (exit code 3); restart 1 of 1 at 1 rank(s) in 0 s\n"), std::string::npos)
      << r.err;
  const std::string line = read_file(sc.out + "/rank.0");
  EXPECT_NE(line.find("rank 0/1 "), std::string::npos) << "the second start ran one rank\n" << line;
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex("edprun: the job ended with exit code 0 after 1 rescale\\(s\\) \\(1 in place, 0 by restart; "
                        "paused 0\\.25 s in all\\) and 1 restart\\(s\\) \\(0 after a stall; down [0-9.]+ s in all\\); "
                        "last size 1 worker\\(s\\), global batch 8:\n"
                        "edprun:   rescale 1 in place:   2 -> 1 worker\\(s\\), global batch 16 -> 8, step 7, pause "
                        "0\\.25 s\n"
                        "edprun:   restart 1 \\(a crash, exit 3\\): at 1 worker\\(s\\), global batch 8, running again "
                        "after [0-9.]+ s\n$")))
      << r.err;
  EXPECT_TRUE(list_dir(sc.tmp).empty()) << "left behind in TMPDIR: " << list_dir(sc.tmp).front();
}

#ifdef SPAWN_PROBE_EXE
// What an in-place grow needs from the launcher: the job's ranks spawn 2 more through
// $EDP_SPAWN_WRAPPER (edprun's shim) with EDP_SPAWN_RANK_BASE, and merge. Fails without the room
// edprun gives mpirun (-np 2 on a 2-core machine has no free slot: MPI_ERR_SPAWN) and without the
// shim's offset (the spawned ranks would call themselves 0 and 1 of 2).
TEST(EdprunElastic, InPlaceGrowSpawnsRanksThroughTheShim) {
  Scratch sc;
  const std::string ctl = sc.root + "/control.json";
  std::ofstream(ctl) << "{\"workers\": 4, \"global_batch\": 32}";
  // As many ranks as cores: the spawn needs slots mpirun would not have without --oversubscribe.
  const std::string np = std::to_string(std::max(2, physical_cores()));
  const int n = std::stoi(np);
  const RunResult r = run_capture(edprun({"-np", np, "--gpu-discovery", "none", "--control-file", ctl, "--",
                                          SPAWN_PROBE_EXE, "2"}),
                                  sc.env(false));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  for (int rank = 0; rank < n + 2; ++rank) {
    SCOPED_TRACE(rank);
    const std::string line = read_file(sc.out + "/spawn." + std::to_string(rank));
    const bool spawned = rank >= n;
    const std::string size = std::to_string(spawned ? n + 2 : n), rk = std::to_string(rank);
    EXPECT_NE(line.find("merged " + rk + "/" + std::to_string(n + 2) + " edp " + rk + "/" + size + " local " + rk + "/" +
                        size + " "),
              std::string::npos)
        << line;
    EXPECT_NE(line.find(std::string(" spawned ") + (spawned ? "1" : "0") + " sum " + std::to_string(n + 2) +
                        " placement rank " + rk + "/" + size + " local " + rk + "/" + size + " cpu"),
              std::string::npos)
        << line;
    if (spawned) {
      // Unbound (mpirun did not bind them): the host's cores over the ranks on it.
      EXPECT_NE(line.find(" threads " + std::to_string(std::max(1, physical_cores() / (n + 2))) + " "),
                std::string::npos)
          << line;
    }
  }
  EXPECT_TRUE(list_dir(sc.tmp).empty()) << "left behind in TMPDIR: " << list_dir(sc.tmp).front();
}
#endif

// ---- SIGKILL: nothing of the job may outlive it -----------------------------------------------

// mpirun killed: edprun ends, and no rank, job directory, Open MPI session directory or
// shared-memory segment is left.
TEST(EdprunCleanup, SigkillOfMpirunLeavesNothing) {
  Scratch sc;
  const pid_t pid = start_edprun(edprun({"-np", "2", "--oversubscribe", "--gpu-discovery", "none", "--", RANK_PROBE_EXE,
                                         "mpi-sleep"}),
                                 sc.env(false), sc.root + "/edprun.log");
  const std::vector<ReadyRank> ranks = wait_ready(sc, 2);
  ASSERT_EQ(ranks.size(), 2u) << "the ranks did not start\n" << read_file(sc.root + "/edprun.log");
  const pid_t mpirun = ranks[0].parent;
  EXPECT_EQ(ranks[1].parent, mpirun);
  // Open MPI's files are the job's own: its session directory and a private shared-memory one.
  EXPECT_EQ(ranks[0].session_dir.rfind(sc.tmp + "/edprun.", 0), 0u) << ranks[0].session_dir;
  EXPECT_EQ(ranks[0].shm_dir.rfind("/dev/shm/edprun.", 0), 0u) << ranks[0].shm_dir;
  const auto segments = list_dir(ranks[0].shm_dir);
  EXPECT_TRUE(std::any_of(segments.begin(), segments.end(),
                          [](const std::string& f) { return f.rfind("vader_segment.", 0) == 0; }))
      << "no shared-memory segment in " << ranks[0].shm_dir;
  ASSERT_EQ(kill(mpirun, SIGKILL), 0);
  EXPECT_EQ(wait_exit(pid), 128 + SIGKILL) << read_file(sc.root + "/edprun.log");
  for (const auto& r : ranks) {
    EXPECT_TRUE(eventually([&] { return !alive(r.pid); }, 30)) << "rank pid " << r.pid << " still runs";
    if (alive(r.pid)) kill(r.pid, SIGKILL);
  }
  EXPECT_TRUE(list_dir(sc.tmp).empty()) << "left behind in TMPDIR: " << list_dir(sc.tmp).front();
  EXPECT_FALSE(exists(ranks[0].session_dir)) << ranks[0].session_dir;
  if (ranks[0].shm_dir != "-") {
    EXPECT_FALSE(exists(ranks[0].shm_dir)) << ranks[0].shm_dir;
  }
  EXPECT_NE(read_file(sc.root + "/edprun.log").find("edprun: mpirun was killed by signal 9 (Killed); removing what it left behind"), std::string::npos)
      << read_file(sc.root + "/edprun.log");
}

// edprun killed: its mpirun and ranks die with it (no rank runs on), and the next edprun removes
// the dead job's directory and stops its MPS daemons.
TEST(EdprunCleanup, SigkillOfEdprunStopsTheJobAndTheNextEdprunCleansUp) {
  Scratch sc;
  const pid_t pid = start_edprun(edprun({"-np", "2", "--ranks-per-gpu", "2", "--gpu-discovery", "nvidia-smi",
                                         "--oversubscribe", "--", RANK_PROBE_EXE, "sleep"}),
                                 sc.env(), sc.root + "/edprun.log");
  const std::vector<ReadyRank> ranks = wait_ready(sc, 2);
  ASSERT_EQ(ranks.size(), 2u) << "the ranks did not start\n" << read_file(sc.root + "/edprun.log");
  const pid_t mpirun = ranks[0].parent;
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  EXPECT_EQ(wait_exit(pid), 128 + SIGKILL);
  EXPECT_TRUE(eventually([&] { return !alive(mpirun); }, 30)) << "mpirun pid " << mpirun << " still runs";
  for (const auto& r : ranks) {
    EXPECT_TRUE(eventually([&] { return !alive(r.pid); }, 30)) << "rank pid " << r.pid << " still runs";
    if (alive(r.pid)) kill(r.pid, SIGKILL);
  }
  if (alive(mpirun)) kill(mpirun, SIGKILL);
  const auto stale = list_dir(sc.tmp);
  ASSERT_EQ(stale.size(), 1u) << "expected the dead edprun's job directory";
  const std::string owner = read_file(sc.tmp + "/" + stale[0] + "/owner.json");
  std::smatch m;
  const bool has_shm = std::regex_search(owner, m, std::regex("\"shm_dir\":\"([^\"]*)\""));
  EXPECT_TRUE(has_shm) << owner;
  const std::string shm = has_shm ? m[1].str() : "";

  // The next edprun (CPU mode: it starts no daemon of its own) removes it and quits its daemon.
  const RunResult r = run_capture(edprun({"-np", "1", "--gpus", "none", "--", RANK_PROBE_EXE, "ok"}), sc.env());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("edprun: removed the job directory of a dead edprun (pid " + std::to_string(pid) + "): " + sc.tmp +
                       "/" + stale[0] + " (killed 0 rank(s) it left running, stopped 1 MPS daemon(s))"),
            std::string::npos)
      << r.err;
  expect_daemons_started_and_stopped(sc, 1);
  if (!shm.empty()) {
    EXPECT_FALSE(exists(shm)) << shm;
  }
}
