// The elastic control file under a real mpirun (1-3 ranks): parsing and its errors, and
// ElasticControl::poll giving every rank the same decision at the same step — nothing while the
// file is absent, asks for the current size or does not parse (with a warning), the request once
// it asks for another size. And the job's gradient clipping under data parallelism.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "edp/comm/communicator.h"
#include "edp/core/error.h"
#include "edp/edp.h"
#include "edp/elastic/elastic.h"
#include "shared_path.h"

using namespace edp;
namespace fs = std::filesystem;

namespace {

// Atomic replace, as a controller should write it; the sleep makes the modification time move
// even on file systems with coarse timestamps.
void write_file(const std::string& path, const std::string& text) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  {
    std::ofstream(path + ".tmp") << text;
  }
  fs::rename(path + ".tmp", path);
}

}  // namespace

TEST(Elastic, ControlFileParsesAndNamesBadFields) {
  comm::Communicator& world = comm::world();
  const std::string p = shared_path(world, "parse.json") + std::to_string(world.rank());
  write_file(p, R"({"workers": 4, "global_batch": 512})");
  EXPECT_EQ(elastic::read_control_file(p), (elastic::RescaleRequest{4, 512}));
  write_file(p, R"({"workers": 3})");
  EXPECT_EQ(elastic::read_control_file(p), (elastic::RescaleRequest{3, 0}));
  // A stop needs no size; with one, the size is read (and checked) but the stop is what counts.
  write_file(p, R"({"stop": true})");
  EXPECT_TRUE(elastic::read_control_file(p).stop);
  write_file(p, R"({"workers": 2, "global_batch": 128, "stop": true})");
  EXPECT_TRUE(elastic::read_control_file(p).stop);
  EXPECT_EQ(elastic::read_control_file(p), (elastic::RescaleRequest{5, 7, true}));  // stops compare equal
  write_file(p, R"({"workers": 2, "stop": false})");
  EXPECT_EQ(elastic::read_control_file(p), (elastic::RescaleRequest{2, 0}));
  auto expect = [&](const std::string& text, const std::string& what) {
    write_file(p, text);
    try {
      elastic::read_control_file(p);
      ADD_FAILURE() << "no error for " << text;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect(R"({"workers": 2,)", "not valid JSON");
  expect(R"([2])", "JSON object");
  expect(R"({"global_batch": 64})", "'workers' is missing");
  expect(R"({"workers": 0})", "'workers' must be >= 1");
  expect(R"({"workers": 2.5})", "'workers' must be an integer");
  expect(R"({"workers": 2, "batch": 64})", "unknown field 'batch'");
  expect(R"({"workers": 3, "global_batch": 100})", "not divisible by 'workers' 3");
  expect(R"({"workers": 2, "global_batch": -64})", "'global_batch' must be >= 1");
  expect(R"({"stop": 1})", "'stop' must be true or false");
  expect(R"({"stop": false})", "'workers' is missing");
  expect(R"({"stop": true, "workers": 0})", "'workers' must be >= 1");
  fs::remove(p);
  EXPECT_THROW(elastic::read_control_file(p), DataError);
}

TEST(Elastic, PollGivesEveryRankTheSameDecision) {
  comm::Communicator& world = comm::world();
  const int W = world.size();
  const std::string p = shared_path(world, "control.json");
  if (world.rank() == 0) fs::remove(p);
  world.barrier();
  elastic::ElasticControl c(p, W, 64 * W);
  // Rank 0 changes the file between polls; every rank must see the same answer at each poll.
  auto poll_all = [&](const char* what) {
    const auto r = c.poll(world);
    int64_t mine[3] = {r ? 1 : 0, r ? r->workers : 0, r ? r->global_batch : 0}, lo[3], hi[3];
    world.allreduce(mine, lo, 3, DType::I64, comm::ReduceOp::Min);
    world.allreduce(mine, hi, 3, DType::I64, comm::ReduceOp::Max);
    for (int k = 0; k < 3; ++k) EXPECT_EQ(lo[k], hi[k]) << what << ": ranks disagree";
    return r;
  };
  EXPECT_FALSE(poll_all("no file").has_value());
  if (world.rank() == 0) write_file(p, "{\"workers\": " + std::to_string(W) + "}");  // the current size
  EXPECT_FALSE(poll_all("same size").has_value());
  if (world.rank() == 0) write_file(p, "{\"workers\": ");  // a controller's mistake
  testing::internal::CaptureStderr();
  EXPECT_FALSE(poll_all("malformed").has_value());
  const std::string err = testing::internal::GetCapturedStderr();
  if (world.rank() == 0) {
    EXPECT_NE(err.find("ignoring the control file"), std::string::npos) << err;
  }
  if (world.rank() == 0) write_file(p, "{\"workers\": " + std::to_string(W + 1) + "}");
  auto r = poll_all("grow");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->workers, W + 1);
  EXPECT_EQ(r->global_batch, 64 * (W + 1));  // the per-worker batch stays
  // The file is read only when it changes, but a standing request keeps answering.
  r = poll_all("unchanged file");
  ASSERT_TRUE(r.has_value());
  if (world.rank() == 0) write_file(p, R"({"workers": 1, "global_batch": 32})");
  r = poll_all("shrink with a batch");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, (elastic::RescaleRequest{1, 32}));
  // A stop reaches every rank, whatever size the file names; it is never refused.
  if (world.rank() == 0) write_file(p, "{\"workers\": " + std::to_string(W + 100) + ", \"stop\": true}");
  r = poll_all("stop");
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->stop);
  const int64_t stop_flag = r->stop ? 1 : 0;
  EXPECT_EQ(world.allreduce_value<int64_t>(stop_flag, comm::ReduceOp::Min), 1) << "a rank missed the stop";
  world.barrier();
  if (world.rank() == 0) fs::remove(p);
}

TEST(Elastic, RefusalNamesTheRule) {
  elastic::ControlLimits l;
  l.allowed_workers = {1, 2, 4};
  l.max_global_batch = 1000;
  l.max_worker_batch = 300;
  EXPECT_EQ(elastic::refusal_reason({4, 256}, l), "");
  EXPECT_NE(elastic::refusal_reason({3, 192}, l).find("cannot run 3 worker(s) (it can run 1,2,4)"), std::string::npos);
  EXPECT_NE(elastic::refusal_reason({4, 250}, l).find("does not split evenly over 4"), std::string::npos);
  EXPECT_NE(elastic::refusal_reason({2, 2000}, l).find("larger than the job accepts (1000)"), std::string::npos);
  EXPECT_NE(elastic::refusal_reason({1, 400}, l).find("per-worker batch of 400"), std::string::npos);
  EXPECT_EQ(elastic::refusal_reason({7, 7}, elastic::ControlLimits{}), "");  // no limits: any even split
}

// The request the launcher cannot run is refused on rank 0 before any rank acts, and every rank
// keeps the current size; a later acceptable request still goes through.
TEST(Elastic, RefusedRequestKeepsTheJobRunning) {
  comm::Communicator& world = comm::world();
  const int W = world.size();
  const std::string p = shared_path(world, "refuse.json");
  if (world.rank() == 0) write_file(p, "{\"workers\": " + std::to_string(W + 5) + "}");
  world.barrier();
  elastic::ControlLimits l;
  for (int w = 1; w <= W + 1; ++w) l.allowed_workers.push_back(w);
  elastic::ElasticControl c(p, W, 64 * W, l);
  testing::internal::CaptureStderr();
  EXPECT_FALSE(c.poll(world).has_value());
  EXPECT_FALSE(c.poll(world).has_value());  // the same file: not refused (nor logged) again
  const std::string err = testing::internal::GetCapturedStderr();
  if (world.rank() == 0) {
    EXPECT_NE(err.find("refusing the rescale request"), std::string::npos) << err;
    EXPECT_NE(err.find("the launcher cannot run " + std::to_string(W + 5)), std::string::npos) << err;
    EXPECT_EQ(err.find("refusing", err.find("refusing") + 1), std::string::npos) << "logged twice: " << err;
  }
  if (world.rank() == 0) write_file(p, "{\"workers\": " + std::to_string(W + 1) + "}");
  const auto r = c.poll(world);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->workers, W + 1);
  world.barrier();
  if (world.rank() == 0) fs::remove(p);
}

TEST(Elastic, RescaleRecordIsWrittenWhole) {
  comm::Communicator& world = comm::world();
  const std::string p = shared_path(world, "rescale.json") + std::to_string(world.rank());
  ::unsetenv("EDP_RESCALE_FILE");
  EXPECT_EQ(elastic::record_rescale({3, 96}, 17, "ck/ckpt-17.edp"), "");
  ::setenv("EDP_RESCALE_FILE", p.c_str(), 1);
  EXPECT_EQ(elastic::record_rescale({3, 96}, 17, "ck/ckpt-17.edp"), p);
  ::unsetenv("EDP_RESCALE_FILE");
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(ss.str(), "{\"checkpoint\":\"ck/ckpt-17.edp\",\"global_batch\":96,\"step\":17,\"workers\":3}\n");
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  fs::remove(p);
}

// Gradient clipping under data parallelism (JobOptions::max_grad_norm): the norm is that of the
// averaged gradient, taken after the allreduce, so every rank applies the same scale and the
// update is the single-process one. Each rank trains one step of a tiny GPT on its share of a
// 4·W-window data set (one global batch: the whole set), with SGD at lr 1 and no momentum, so the
// parameter change is minus the clipped gradient; each rank then computes the reference on its
// own — the whole set's mean gradient on one process, clipped — and compares. The ranks' local
// norms differ (different windows), so clipping before the allreduce would fail this check.
// Tolerance 1e-4 relative to the largest change: sums over 1 vs W ranks round differently.
TEST(ElasticJob, ClipsTheAveragedGradientOnEveryRank) {
  auto& world = edp::comm::world();
  const int W = world.size();
  constexpr int64_t T = 8, kWindows = 4;
  const std::string path = shared_path(world, "clip.tok");
  if (world.rank() == 0) {
    std::vector<int32_t> ids;
    Rng rng(5);
    for (int64_t i = 0; i < kWindows * W * T + 1; ++i) ids.push_back(static_cast<int32_t>(rng.next_u64() % 32));
    data::write_token_file(path, ids, 32);
  }
  world.barrier();
  auto windows = std::make_shared<data::TokenWindows>(std::make_shared<data::TokenFile>(path), T);
  const nn::GPTConfig cfg{.vocab = 32, .context = T, .layers = 1, .dim = 8, .heads = 2, .mlp_ratio = 2};
  constexpr double kMaxNorm = 0.05;
  manual_seed(3);
  auto model = std::make_shared<nn::GPT>(cfg);
  std::vector<Tensor> before;
  for (auto* p : model->parameters()) before.push_back(p->value.clone());
  optim::SGD sgd(model->parameters(), {.lr = 1.0});
  elastic::JobOptions jo;
  jo.name = "clip_test";
  jo.global_batch = kWindows * W;
  jo.lr = 1.0;
  jo.lr_base_batch = kWindows * W;
  jo.lr_scaling = "none";
  jo.max_grad_norm = kMaxNorm;
  jo.progress = false;
  {
    elastic::Job job(world, model, sgd, windows, jo);
    nn::SequenceCrossEntropy ce;
    data::Batch b;
    while (job.next_epoch())
      while (job.next_batch(b)) {
        const double loss = ce.forward(job.forward(b.x), b.y);
        job.backward(ce.backward());
        job.step(loss);
      }
  }
  // The reference: the whole set in one batch, on this process alone.
  manual_seed(3);
  nn::GPT ref(cfg);
  Tensor x({kWindows * W, T}, DType::I32), y({kWindows * W, T}, DType::I32);
  for (int64_t i = 0; i < kWindows * W; ++i) windows->get_sample(i, x.data<int32_t>() + i * T, y.data<int32_t>() + i * T);
  nn::SequenceCrossEntropy ce;
  ce.forward(ref.forward(x), y);
  ref.zero_grad();
  ref.backward(ce.backward());
  const double norm = optim::clip_grad_norm(ref.parameters(), kMaxNorm);
  ASSERT_GT(norm, 4 * kMaxNorm) << "the test needs a gradient that is clipped";
  const auto params = model->parameters(), rparams = ref.parameters();
  double scale = 0, err = 0;
  for (size_t k = 0; k < params.size(); ++k)
    for (int64_t i = 0; i < params[k]->value.numel(); ++i) {
      const double change = params[k]->value.item(i) - before[k].item(i);
      const double want = -rparams[k]->grad.item(i);
      scale = std::max(scale, std::abs(want));
      err = std::max(err, std::abs(change - want));
    }
  EXPECT_LE(err, 1e-4 * scale) << "rank " << world.rank() << " of " << W << ": largest change " << scale;
  world.barrier();
  if (world.rank() == 0) std::remove(path.c_str());
}

// A fresh start (no checkpoint): every rank begins from rank 0's parameters, and the start makes
// no optimizer state (it is made at the first step, or only each rank's part of it when sharded):
// the start sent a checkpoint of the whole model and state before, the job's peak of memory.
TEST(ElasticJob, AFreshStartTakesRankZerosParametersAndMakesNoOptimizerState) {
  auto& world = edp::comm::world();
  const int W = world.size();
  constexpr int64_t T = 8;
  const std::string path = shared_path(world, "fresh.tok");
  if (world.rank() == 0) {
    std::vector<int32_t> ids;
    Rng rng(6);
    for (int64_t i = 0; i < 4 * W * T + 1; ++i) ids.push_back(static_cast<int32_t>(rng.next_u64() % 32));
    data::write_token_file(path, ids, 32);
  }
  world.barrier();
  auto windows = std::make_shared<data::TokenWindows>(std::make_shared<data::TokenFile>(path), T);
  const nn::GPTConfig cfg{.vocab = 32, .context = T, .layers = 1, .dim = 8, .heads = 2, .mlp_ratio = 2};
  for (int zero : {0, 1, 2}) {
    manual_seed(static_cast<uint64_t>(100 + world.rank()));  // every rank its own initial weights
    auto model = std::make_shared<nn::GPT>(cfg);
    optim::AdamW adam(model->parameters(), {.lr = 1e-3});
    elastic::JobOptions jo;
    jo.name = "fresh_test";
    jo.global_batch = 2 * W;
    jo.progress = false;
    jo.zero_stage = zero;
    elastic::Job job(world, model, adam, windows, jo);
    EXPECT_FALSE(adam.has_state()) << "zero " << zero << ": the start made the optimizer state";
    for (nn::Parameter* p : model->parameters()) {
      Tensor mine = p->value.clone(), root = p->value.clone();
      world.broadcast(root, 0);
      EXPECT_EQ(std::memcmp(mine.raw(), root.raw(), mine.nbytes()), 0)
          << "zero " << zero << ", rank " << world.rank() << ": " << p->name;
    }
  }
  world.barrier();
  if (world.rank() == 0) std::remove(path.c_str());
}

// Nothing trained is lost when a training ends between checkpoints: at a step limit the program
// keeps (Job::end after 5 steps, checkpoints every 4) and at the end of the last epoch (7 steps,
// checkpoints every 4), the newest checkpoint is the last step's and holds the parameters the
// model ended with, bit for bit; a training that ended on a checkpoint is not committed twice.
// Sharded (zero_stage 1) the commit gathers the state on every rank, so the end must reach every
// rank: this test hangs if only rank 0 commits.
TEST(ElasticJob, EndCommitsTheLastStep) {
  auto& world = edp::comm::world();
  const int W = world.size();
  for (int zero : {0, 1, 2}) {
    for (int64_t limit : {5, 8, -1}) {  // 5: between checkpoints; 8: on one; -1: the epoch's end (7)
      SCOPED_TRACE(testing::Message() << "zero " << zero << " limit " << limit);
      const std::string dir = shared_path(world, "end_ck_" + std::to_string(zero) + "_" + std::to_string(limit + 1));
      const int64_t n = 7 * 4 * W;  // 7 steps of 4 samples per rank
      Tensor x({n, 3}, DType::F32);
      std::vector<int32_t> y(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        for (int j = 0; j < 3; ++j) x.data<float>()[i * 3 + j] = static_cast<float>((i * 7 + j * 3) % 11) / 11.0f;
        y[static_cast<size_t>(i)] = static_cast<int32_t>(i % 2);
      }
      auto ds = std::make_shared<data::TensorDataset>(x, y, 2);
      manual_seed(9);
      auto model = nn::make<nn::Sequential>({nn::make<nn::Linear>(3, 4), nn::make<nn::ReLU>(), nn::make<nn::Linear>(4, 2)});
      optim::AdamW opt(model->parameters(), {.lr = 0.01});
      elastic::JobOptions jo;
      jo.name = "end_test";
      jo.epochs = limit == 8 ? 2 : 1;
      jo.global_batch = 4 * W;
      jo.lr = 0.01;
      jo.progress = false;
      jo.checkpoint_dir = dir;
      jo.checkpoint_every = 4;
      jo.zero_stage = zero;
      int64_t steps = 0;
      {
        elastic::Job job(world, model, opt, ds, jo);
        nn::SoftmaxCrossEntropy ce;
        data::Batch b;
        while ((limit < 0 || job.steps() < limit) && job.next_epoch())
          while ((limit < 0 || job.steps() < limit) && job.next_batch(b)) {
            const double loss = ce.forward(job.forward(b.x), b.y);
            job.backward(ce.backward());
            job.step(loss);
          }
        job.end();
        steps = job.steps();
      }
      EXPECT_EQ(steps, limit < 0 ? 7 : limit);
      if (world.rank() == 0) {
        train::CheckpointDir cd(dir, 2);
        const auto have = cd.list();
        ASSERT_FALSE(have.empty());
        EXPECT_EQ(train::CheckpointDir::step_of(have.front()), steps);
        if (limit == 8) {
          EXPECT_EQ(have.size(), 2u) << "steps 4 and 8, each once";
        }
        const train::Checkpoint c = train::read_checkpoint(have.front());
        for (nn::Parameter* p : model->parameters()) {
          const Tensor* t = c.find("model." + p->name);
          ASSERT_NE(t, nullptr) << p->name;
          EXPECT_EQ(0, std::memcmp(t->raw(), p->value.raw(), static_cast<size_t>(p->value.numel()) * 4)) << p->name;
        }
      }
      world.barrier();
      if (world.rank() == 0) fs::remove_all(dir);
    }
  }
}

// Gradient accumulation (JobOptions::max_micro_batch): a step whose per-rank batch (8) is taken
// in micro-batches of at most 3 (3 + 3 + 2) updates the model as the whole batch does. The data
// set ends in an uneven step (5 samples over the ranks), so micro-batches of unequal ranks are
// weighted too. Tolerance: 1e-5 of the largest parameter — the whole batch's gradient is one
// GEMM over 8 rows, the micro-batches' three GEMMs summed, which round differently in float32
// (about 1e-7 relative per step, over 6 steps of SGD); a weight left out (each micro-batch's mean
// taken as the rank's) changes the update by its full size.
TEST(ElasticJob, MicroBatchesUpdateAsTheWholeBatch) {
  auto& world = edp::comm::world();
  const int W = world.size();
  const int64_t n = 5 * 8 * W + 5;
  Tensor x({n, 6}, DType::F32);
  std::vector<int32_t> y(static_cast<size_t>(n));
  Rng rng(21);
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 6; ++j) x.data<float>()[i * 6 + j] = static_cast<float>(rng.normal());
    y[static_cast<size_t>(i)] = static_cast<int32_t>(rng.below(3));
  }
  auto ds = std::make_shared<data::TensorDataset>(x, y, 3);
  auto train = [&](int64_t micro, int zero, double& loss) {
    manual_seed(5);
    auto model = nn::make<nn::Sequential>({nn::make<nn::Linear>(6, 16), nn::make<nn::Tanh>(), nn::make<nn::Linear>(16, 3)});
    optim::SGD opt(model->parameters(), {.lr = 0.2});
    elastic::JobOptions jo;
    jo.name = "micro_test";
    jo.global_batch = 8 * W;
    jo.lr_scaling = "none";
    jo.progress = false;
    jo.max_micro_batch = micro;
    jo.zero_stage = zero;
    elastic::Job job(world, model, opt, ds, jo);
    EXPECT_DOUBLE_EQ(job.peak_lr(), 0.2) << "JobOptions::lr 0: the optimizer's";
    nn::SoftmaxCrossEntropy ce;
    data::Batch b;
    int64_t batches = 0;
    while (job.next_epoch())
      while (job.next_batch(b)) {
        EXPECT_LE(b.size(), micro > 0 ? micro : 8);
        ++batches;
        const double l = ce.forward(job.forward(b.x), b.y);
        job.backward(ce.backward());
        job.step(l);
      }
    EXPECT_EQ(job.steps(), 6);
    if (micro == 3) {
      EXPECT_GE(batches, 5 * 3) << "the full steps come in 3 micro-batches each";
    }
    loss = job.last_epoch().train_loss;
    std::vector<Tensor> ps;
    for (auto* p : model->parameters()) ps.push_back(p->value.clone());
    return ps;
  };
  double whole_loss = 0;
  const auto whole = train(0, 0, whole_loss);
  // Unsharded and with the optimizer state sharded (the micro-batches' gradients accumulate
  // locally; the last one's backward reduce-scatters them).
  for (int zero : {0, 1, 2}) {
    double micro_loss = 0;
    const auto micro = train(3, zero, micro_loss);
    double scale = 0, err = 0;
    for (size_t k = 0; k < whole.size(); ++k)
      for (int64_t i = 0; i < whole[k].numel(); ++i) {
        scale = std::max(scale, std::abs(whole[k].item(i)));
        err = std::max(err, std::abs(whole[k].item(i) - micro[k].item(i)));
      }
    EXPECT_LE(err, 1e-5 * scale) << "rank " << world.rank() << " of " << W << ", zero " << zero;
    EXPECT_NEAR(micro_loss, whole_loss, 1e-5 * std::abs(whole_loss)) << "zero " << zero;
  }
}

// JobOptions::schedule: the user's schedule, built from the peak rate at the global batch; the
// rate before each step is its lr(step), and Job::lr() reports it.
TEST(ElasticJob, TakesTheUsersSchedule) {
  auto& world = edp::comm::world();
  const int W = world.size();
  const int64_t n = 6 * 4 * W;
  Tensor x({n, 2}, DType::F32);
  std::vector<int32_t> y(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < 2 * n; ++i) x.data<float>()[i] = static_cast<float>(i % 5);
  auto ds = std::make_shared<data::TensorDataset>(x, y, 2);
  auto model = nn::make<nn::Sequential>({nn::make<nn::Linear>(2, 2)});
  optim::SGD opt(model->parameters(), {.lr = 0.4});
  elastic::JobOptions jo;
  jo.name = "schedule_test";
  jo.global_batch = 4 * W;
  jo.lr_base_batch = 4 * W;
  jo.progress = false;
  int64_t seen_total = 0;
  jo.schedule = [&](const elastic::LRContext& c) {
    seen_total = c.total_steps;
    return std::make_unique<optim::StepLR>(c.peak_lr, 2, 0.5);
  };
  elastic::Job job(world, model, opt, ds, jo);
  EXPECT_EQ(seen_total, 6);
  nn::SoftmaxCrossEntropy ce;
  data::Batch b;
  std::vector<double> rates;
  while (job.next_epoch())
    while (job.next_batch(b)) {
      rates.push_back(job.lr());
      const double l = ce.forward(job.forward(b.x), b.y);
      job.backward(ce.backward());
      job.step(l);
    }
  EXPECT_EQ(rates, (std::vector<double>{0.4, 0.4, 0.2, 0.2, 0.1, 0.1}));
}
