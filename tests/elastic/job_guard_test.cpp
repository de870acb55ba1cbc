// elastic::Job's guarantees under a real mpirun (1-2 ranks), driven with a tiny model whose loss
// the test chooses (Job::step takes the loss the program computed, so a scripted loss exercises the
// guard exactly): the divergence guard and the checkpoints it sets aside, the checkpoint
// directory's lock, the job's identity in its checkpoints, the global-batch range of requests, a
// finished job resumed, and the compute threads following the ranks.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>

#include <filesystem>
#include <fstream>
#include <functional>
#include <utility>
#include <vector>
#include <nlohmann/json.hpp>

#include "edp/comm/communicator.h"
#include "edp/comm/layout.h"
#include "edp/core/error.h"
#include "edp/core/process.h"
#include "edp/nn/init.h"
#include "edp/core/threads.h"
#include "edp/data/dataset.h"
#include "edp/elastic/job.h"
#include "edp/nn/layers.h"
#include "edp/optim/optimizer.h"
#include "edp/train/checkpoint.h"
#include "shared_path.h"

using namespace edp;
namespace fs = std::filesystem;

namespace {

// A directory every rank agrees on (rank 0's pid, broadcast), emptied.
std::string shared_dir(comm::Communicator& world, const std::string& name) {
  const std::string d = shared_path(world, "jobguard_" + name);
  world.barrier();
  if (world.rank() == 0) {
    fs::remove_all(d);
    fs::create_directories(d);
  }
  world.barrier();
  return d;
}

std::shared_ptr<data::TensorDataset> dataset(int64_t n) {
  Tensor x = Tensor::empty({n, 4}, DType::F32);
  std::vector<int32_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < 4; ++j) x.data<float>()[i * 4 + j] = static_cast<float>((i * 7 + j * 3) % 11) / 11.0f;
    y[static_cast<size_t>(i)] = static_cast<int32_t>(i % 2);
  }
  return std::make_shared<data::TensorDataset>(x, y, 2);
}

struct Fixture {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::SGD> opt;
  Fixture() {
    manual_seed(3);
    model = nn::make<nn::Sequential>();
    model->add(nn::make<nn::Linear>(4, 2), "fc");
    opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.01});
  }
};

// Trains until `loss_at(step)` (1-based) has been fed for every step, or the job ends.
void run_steps(elastic::Job& job, const std::function<double(int64_t)>& loss_at) {
  nn::SoftmaxCrossEntropy ce;
  data::Batch b;
  while (job.next_epoch())
    while (job.next_batch(b)) {
      ce.forward(job.forward(b.x), b.y);
      job.backward(ce.backward());
      job.step(loss_at(job.steps() + 1));
    }
}

elastic::JobOptions options(comm::Communicator& world, const std::string& dir) {
  elastic::JobOptions o;
  o.name = "guard";
  o.epochs = 40;
  o.global_batch = 8 * world.size();
  o.lr = 0.01;
  o.lr_base_batch = o.global_batch;
  o.checkpoint_dir = dir;
  o.checkpoint_every = 5;
  o.progress = false;
  return o;
}

}  // namespace

// A loss that jumps to 100x its level stays there: the guard stops the job after 3 windows of 10
// steps (steps 41-70), naming the steps and the level; the checkpoints committed after the last
// good window (step 40) are set aside — and while the loss was in doubt the rotation (keep 2)
// kept the step-40 one —
// so that the job, started again, resumes at step 40.
TEST(JobGuard, DivergenceStopsAtTheLastGoodCheckpoint) {
  comm::Communicator& world = comm::world();
  const std::string dir = shared_dir(world, "diverge");
  Fixture f;
  elastic::Job job(world, f.model, *f.opt, dataset(4000), options(world, dir));
  try {
    run_steps(job, [](int64_t step) { return step <= 40 ? 1.0 : 100.0; });
    FAIL() << "the guard did not stop the job";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the loss diverged: its mean over steps 61-70 was 100, more than 4 times its running level 1"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("(since step 41)"), std::string::npos) << m;
    EXPECT_NE(m.find("The last change of size: none since the job started"), std::string::npos) << m;
    if (world.rank() == 0) {
      EXPECT_NE(m.find("resumes from " + dir + "/ckpt-000000000040.edp"), std::string::npos) << m;
    }
  }
  world.barrier();
  train::CheckpointDir cd(dir);
  const auto left = cd.list();
  ASSERT_FALSE(left.empty());
  EXPECT_EQ(train::CheckpointDir::step_of(left.front()), 40);
  // Kept by the rotation (keep 2) at the stop: 60 and 65; the stop came before step 70's commit.
  EXPECT_TRUE(fs::exists(dir + "/ckpt-000000000060.edp.diverged"));
  EXPECT_TRUE(fs::exists(dir + "/ckpt-000000000065.edp.diverged"));
  EXPECT_FALSE(fs::exists(dir + "/ckpt-000000000070.edp"));
}

// Noise, a lasting rise below the factor (3x), a blow-up that comes back to within
// kGuardRecovered of the level (then forgotten), and a milder rise (5x, under factor² = 16x)
// that recovers slowly never stop a job.
TEST(JobGuard, NoiseModestRisesAndSpikesThatComeBackDoNotStop) {
  comm::Communicator& world = comm::world();
  const std::vector<std::pair<std::string, std::function<double(int64_t)>>> losses = {
      {"noise and a 3x rise", [](int64_t step) { return (step % 2 ? 1.0 : 2.5) * (step > 40 ? 3.0 : 1.0); }},
      {"a blow-up that comes back", [](int64_t step) { return step <= 40 ? 1.0 : step <= 60 ? 100.0 : 1.15; }},
      {"a 5x rise that recovers slowly",
       [](int64_t step) { return step <= 40 ? 1.0 : step <= 50 ? 5.0 : step <= 100 ? 1.5 : 1.0; }}};
  for (const auto& [what, loss_at] : losses) {
    SCOPED_TRACE(what);
    Fixture f;
    elastic::JobOptions o = options(world, "");
    o.epochs = 2;
    elastic::Job job(world, f.model, *f.opt, dataset(1000), o);
    EXPECT_NO_THROW(run_steps(job, loss_at));
    EXPECT_EQ(job.steps(), 2 * ((1000 + o.global_batch - 1) / o.global_batch));
  }
}

// A blow-up that comes down but settles above its old level (a network it broke: stuck at
// chance) stops the job: two windows at 100x (above factor² = 16x), then 1.5x the level of 1
// (above kGuardRecovered) makes the third window in doubt. The message names the peak, the level
// and where it settled.
TEST(JobGuard, ASpikeThatDoesNotComeBackStops) {
  comm::Communicator& world = comm::world();
  Fixture f;
  elastic::JobOptions o = options(world, "");
  o.epochs = 2;
  o.lr_base_batch = 4;  // the message explains the learning rate's scaling
  elastic::Job job(world, f.model, *f.opt, dataset(1000), o);
  try {
    run_steps(job, [](int64_t step) { return step <= 40 ? 1.0 : step <= 60 ? 100.0 : 1.5; });
    FAIL() << "the guard did not stop the job";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the loss diverged: it rose to 100, more than 4 times its running level 1 (since step 41), and "
                     "did not come back: its mean over steps 61-70 was 1.5, still more than 1.2 times that level"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("The peak learning rate is " + detail::concat(0.01 * o.global_batch / 4) + " at global batch " +
                     std::to_string(o.global_batch) + " (linear scaling of 0.01 at global batch 4;"),
              std::string::npos)
        << m;
  }
  EXPECT_EQ(job.steps(), 70);

  // Up, down but not back, up again: the account is still the one of a loss that did not come back.
  Fixture g;
  elastic::Job again(world, g.model, *g.opt, dataset(1000), o);
  try {
    run_steps(again, [](int64_t step) { return step <= 40 ? 1.0 : step <= 50 ? 100.0 : step <= 60 ? 1.5 : 50.0; });
    FAIL() << "the guard did not stop the job";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("it rose to 100, more than 4 times its running level 1 (since step 41), and "
                                         "did not come back: its mean over steps 61-70 was 50"),
              std::string::npos)
        << e.what();
  }
}

// Where the guard's windows cannot fill, the last steps are still judged: a job shorter than one
// window whose loss blows up (no level yet: its first step's loss is the reference), and a job
// whose loss blows up in the steps after its last full window, stop with the error when the
// training ends instead of reporting a ruined model as trained; their checkpoints after the last
// good state are set aside. A short job whose loss falls ends normally.
TEST(JobGuard, TheLastStepsAreJudgedWhenTheTrainingEnds) {
  comm::Communicator& world = comm::world();
  {
    const std::string dir = shared_dir(world, "short");
    Fixture f;
    elastic::JobOptions o = options(world, dir);
    o.epochs = 1;  // 8 steps: fewer than one window of 10
    elastic::Job job(world, f.model, *f.opt, dataset(8 * o.global_batch), o);
    try {
      run_steps(job, [](int64_t step) { return step == 1 ? 2.3 : 3.4e22; });
      FAIL() << "a job ruined before its first window ended with success";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("the loss diverged: its mean over steps 1-8, the last before the end of the training, was"),
                std::string::npos)
          << m;
      EXPECT_NE(m.find("more than 4 times the loss of the job's first step, 2.3"), std::string::npos) << m;
    }
    world.barrier();
    EXPECT_TRUE(train::CheckpointDir(dir).list().empty()) << "the ruined checkpoints were not set aside";
    EXPECT_TRUE(fs::exists(dir + "/ckpt-000000000005.edp.diverged"));
  }
  {
    const std::string dir = shared_dir(world, "tail");
    Fixture f;
    elastic::JobOptions o = options(world, dir);
    o.epochs = 1;  // 45 steps: the last 5 after the window that ends at step 40
    elastic::Job job(world, f.model, *f.opt, dataset(45 * o.global_batch), o);
    try {
      run_steps(job, [](int64_t step) { return step <= 40 ? 1.0 : 100.0; });
      FAIL() << "a job ruined after its last full window ended with success";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("its mean over steps 41-45, the last before the end of the training, was "
                                           "100, more than 4 times its running level 1"),
                std::string::npos)
          << e.what();
    }
    world.barrier();
    train::CheckpointDir cd(dir);
    ASSERT_FALSE(cd.list().empty());
    EXPECT_EQ(train::CheckpointDir::step_of(cd.list().front()), 40) << "started again, it resumes from step 40";
  }
  Fixture f;
  elastic::JobOptions o = options(world, "");
  o.epochs = 1;
  elastic::Job job(world, f.model, *f.opt, dataset(8 * o.global_batch), o);
  EXPECT_NO_THROW(run_steps(job, [](int64_t step) { return 2.3 / static_cast<double>(step); }));
  EXPECT_EQ(job.steps(), 8);
}

// The same before a stop the control file asks for (the checkpoint of the stop would hold the
// ruined model) and before a change of size (the job would carry it to the new size, where the
// guard starts over): a job blown up in the steps since its last full window is stopped there.
TEST(JobGuard, TheLastStepsAreJudgedBeforeAStopOrAChangeOfSize) {
  comm::Communicator& world = comm::world();
  for (const bool shrink : {false, true}) {
    if (shrink && world.size() < 2) continue;  // a change of size needs two ranks
    SCOPED_TRACE(shrink ? "shrink" : "stop");
    const std::string dir = shared_dir(world, shrink ? "shrink" : "stop");
    if (world.rank() == 0)
      std::ofstream(dir + "/control.json") << (shrink ? R"({"workers": 1})" : R"({"stop": true})");
    world.barrier();
    Fixture f;
    elastic::JobOptions o = options(world, dir);
    o.control_file = dir + "/control.json";
    o.control_every = 44;  // read at step 44 only
    o.rescale_mode = "in-place";
    elastic::Job job(world, f.model, *f.opt, dataset(4000), o);
    try {
      run_steps(job, [](int64_t step) { return step <= 40 ? 1.0 : 100.0; });
      FAIL() << "the job went on with a ruined model";
    } catch (const Error& e) {
      const std::string when = shrink ? "the change of size" : "the stop";
      EXPECT_NE(std::string(e.what()).find("its mean over steps 41-44, the last before " + when + ", was 100"),
                std::string::npos)
          << e.what();
    }
    EXPECT_EQ(job.steps(), 44);
  }
}

// A factor at or below kGuardRecovered would stop a job whose loss merely stays level: refused.
TEST(JobGuard, AFactorThatStopsAFlatLossIsRefused) {
  comm::Communicator& world = comm::world();
  for (double factor : {-1.0, 0.5, 1.2, std::nan("")}) {
    Fixture f;
    elastic::JobOptions o = options(world, "");
    o.divergence_factor = factor;
    try {
      elastic::Job job(world, f.model, *f.opt, dataset(100), o);
      ADD_FAILURE() << "divergence factor " << factor << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("the divergence factor must be 0 (no guard) or above 1.2"),
                std::string::npos)
          << e.what();
    }
  }
}

// One job per checkpoint directory: a second job on it is refused, naming the holder; after the
// first one ends, the directory is free again.
TEST(JobGuard, CheckpointDirectoryLock) {
  comm::Communicator& world = comm::world();
  const std::string dir = shared_dir(world, "lock");
  Fixture a, b;
  int64_t holder = ::getpid();  // rank 0 takes the lock; every rank reports its refusal
  world.broadcast(&holder, 1, DType::I64, 0);
  auto first = std::make_unique<elastic::Job>(world, a.model, *a.opt, dataset(100), options(world, dir));
  try {
    elastic::Job second(world, b.model, *b.opt, dataset(100), options(world, dir));
    FAIL() << "a second job on " << dir << " was not refused";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("checkpoint directory " + dir + " is in use by job 'guard' (pid " +
                     std::to_string(holder)),
              std::string::npos)
        << m;
  }
  first.reset();
  world.barrier();
  EXPECT_FALSE(fs::exists(dir + "/lock")) << "rank " << world.rank() << ", holder pid " << holder << ": "
                                           << [&] { std::ifstream f(dir + "/lock"); std::stringstream ss; ss << f.rdbuf(); return ss.str(); }();
  // Every rank has looked before rank 0 takes the lock again: the new lock names the same pid and
  // job and, within a second, the same time, so a late rank would take it for the old one.
  world.barrier();
  EXPECT_NO_THROW(elastic::Job again(world, b.model, *b.opt, dataset(100), options(world, dir)));
}

// A lock left by a process that is gone (a SIGKILLed job) is taken over.
TEST(JobGuard, StaleLockIsTakenOver) {
  comm::Communicator& world = comm::world();
  const std::string dir = shared_dir(world, "stale");
  if (world.rank() == 0) {
    const pid_t child = fork();
    if (child == 0) _exit(0);
    int status = 0;
    waitpid(child, &status, 0);  // its pid now names no process
    const ProcessId me = ProcessId::self();
    std::ofstream(dir + "/lock") << nlohmann::json{{"pid", child},         {"start_time", 12345},
                                                   {"host", me.host},      {"pid_ns", me.pid_ns},
                                                   {"job", "killed"},      {"launch", ""},
                                                   {"since", "yesterday"}}
                                        .dump();
  }
  world.barrier();
  Fixture f;
  EXPECT_NO_THROW(elastic::Job job(world, f.model, *f.opt, dataset(100), options(world, dir)));
}

// Each checkpoint records the job's identity; a resume with another one is refused naming the
// difference, unless the change is deliberate or the setting may change on resume.
TEST(JobGuard, ResumeWithAnotherConfigurationIsRefused) {
  comm::Communicator& world = comm::world();
  const std::string dir = shared_dir(world, "identity");
  auto run = [&](const std::string& lr_flag, bool accept, bool may_change) {
    Fixture f;
    elastic::JobOptions o = options(world, dir);
    o.epochs = 1;
    o.settings = {{"--lr", lr_flag}, {"--checkpoint-every", "5"}};
    o.accept_config_change = accept;
    if (may_change) o.resume_may_change = {"--lr"};
    elastic::Job job(world, f.model, *f.opt, dataset(80), o);
    run_steps(job, [](int64_t) { return 1.0; });
  };
  run("0.1", false, false);
  try {
    run("0.2", false, false);
    FAIL() << "a resume with another --lr was not refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("written by a job with another configuration:\n  --lr: '0.1' in the "
                                         "checkpoint, '0.2' now"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(run("0.2", true, false));
  EXPECT_NO_THROW(run("0.3", false, true));
}

// A job resumed from the checkpoint of its finished training has nothing to train and says so.
TEST(JobGuard, FinishedJobResumesComplete) {
  comm::Communicator& world = comm::world();
  const std::string dir = shared_dir(world, "complete");
  elastic::JobOptions o = options(world, dir);
  o.epochs = 1;
  o.checkpoint_every = 0;
  {
    Fixture f;
    elastic::Job job(world, f.model, *f.opt, dataset(80), o);
    EXPECT_FALSE(job.complete_at_start());
    run_steps(job, [](int64_t) { return 1.0; });
  }
  Fixture g;
  elastic::Job again(world, g.model, *g.opt, dataset(80), o);
  EXPECT_TRUE(again.complete_at_start());
  EXPECT_FALSE(again.next_epoch());
  EXPECT_EQ(again.steps(), 80 / o.global_batch);
}

// The compute threads follow the ranks on the host: the ranks of one host never run more threads
// than they have cores (each rank's share), at least one each.
TEST(JobGuard, ThreadsAreTheRanksShareOfTheCores) {
  comm::Communicator& world = comm::world();
  const std::string fixed_by_env = std::getenv("EDP_NUM_THREADS") ? std::getenv("EDP_NUM_THREADS") : "";
  unsetenv("EDP_NUM_THREADS");  // the test environment fixes 1; here the layout decides
  Fixture f;
  elastic::JobOptions o = options(world, "");
  o.epochs = 1;
  elastic::Job job(world, f.model, *f.opt, dataset(80), o);
  const int mine = num_threads();
  const comm::CpuMask cores = comm::host_cores(world);
  const int sum = world.allreduce_value<int>(mine);  // every rank of this test runs on one host
  EXPECT_GE(mine, 1);
  if (cores.count() >= world.size()) {
    EXPECT_LE(sum, cores.count());
  }
  // A count the user fixes wins.
  elastic::JobOptions fixed = o;
  fixed.threads = 1;
  Fixture g;
  elastic::Job one(world, g.model, *g.opt, dataset(80), fixed);
  EXPECT_EQ(num_threads(), 1);
  if (!fixed_by_env.empty()) setenv("EDP_NUM_THREADS", fixed_by_env.c_str(), 1);
}
