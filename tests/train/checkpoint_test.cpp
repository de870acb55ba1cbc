// Checkpoints: the file round-trips every dtype bit for bit; damage of every kind (a flipped
// byte, truncation, a foreign file, another format version) is detected and named; a leftover
// temporary file is never taken for a checkpoint; CheckpointDir keeps the newest `keep` and
// falls back past a damaged newest one; and commit -> N steps equals restore -> N steps
// bitwise (the design's determinism contract), including Dropout's mask counter, BatchNorm
// statistics, SGD momentum and AdamW moments, and the sampler's position mid-epoch.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "edp/config.h"
#include "edp/core/error.h"
#include "edp/core/files.h"
#include "edp/core/process.h"
#include "edp/core/random.h"
#include "edp/data/dataset.h"
#include "edp/data/distributed_sampler.h"
#include "edp/nn/init.h"
#include "edp/nn/layers.h"
#include "edp/optim/optimizer.h"
#include "edp/train/checkpoint.h"
#include "support/no_hang.h"

using namespace edp;
namespace fs = std::filesystem;

namespace {

fs::path tmpdir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("edp_ckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<char> slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
void spit(const fs::path& p, const std::vector<char>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

train::Checkpoint sample_checkpoint() {
  train::Checkpoint c;
  Rng r(3);
  Tensor f({3, 5}, DType::F32), d({7}, DType::F64), i({2, 2}, DType::I32), l({4}, DType::I64), u({0, 3}, DType::U8);
  for (int64_t k = 0; k < f.numel(); ++k) f.data<float>()[k] = static_cast<float>(r.normal());
  for (int64_t k = 0; k < d.numel(); ++k) d.data<double>()[k] = r.normal();
  for (int64_t k = 0; k < i.numel(); ++k) i.data<int32_t>()[k] = static_cast<int32_t>(r.below(1000)) - 500;
  for (int64_t k = 0; k < l.numel(); ++k) l.data<int64_t>()[k] = int64_t{1} << (10 * k);
  c.tensors = {{"f", f}, {"d", d}, {"i", i}, {"l", l}, {"empty", u}, {"unused", Tensor()}};
  c.meta = {{"step", "42"}, {"note", "a value with spaces, commas and \"quotes\""}};
  return c;
}

// A small model with every kind of state: parameters, BatchNorm buffers, a Dropout counter.
std::shared_ptr<nn::Sequential> model() {
  manual_seed(17);
  auto m = nn::make<nn::Sequential>();
  m->add(nn::make<nn::Conv2d>(1, 4, 3, 1, 1), "conv");
  m->add(nn::make<nn::BatchNorm2d>(4), "bn");
  m->add(nn::make<nn::ReLU>(), "relu");
  m->add(nn::make<nn::Flatten>(), "flat");
  m->add(nn::make<nn::Dropout>(0.3, 5), "drop");
  m->add(nn::make<nn::Linear>(4 * 6 * 6, 5), "fc");
  return m;
}

std::shared_ptr<data::TensorDataset> dataset() {
  Tensor x({60, 1, 6, 6}, DType::F32);
  std::vector<int32_t> y(60);
  Rng r(9);
  for (int64_t k = 0; k < x.numel(); ++k) x.data<float>()[k] = static_cast<float>(r.normal());
  for (auto& v : y) v = static_cast<int32_t>(r.below(5));
  return std::make_shared<data::TensorDataset>(x, y, 5);
}

// One training step on the sampler's next global batch (world size 1).
void step(nn::Sequential& m, optim::Optimizer& opt, data::DistributedSampler& s, const data::TensorDataset& ds) {
  if (s.epoch_done()) s.set_epoch(s.epoch() + 1);
  const std::vector<int64_t> idx = s.step_indices(0);
  const int64_t n = static_cast<int64_t>(idx.size()), per = ds.sample_shape().numel();
  Tensor x({n, 1, 6, 6}, DType::F32), y({n}, DType::I32);
  for (int64_t k = 0; k < n; ++k) y.data<int32_t>()[k] = ds.get(idx[static_cast<size_t>(k)], x.data<float>() + k * per);
  opt.zero_grad();
  nn::SoftmaxCrossEntropy ce;
  ce.forward(m.forward(x), y);
  m.backward(ce.backward());
  opt.step();
  s.advance();
}

}  // namespace

TEST(Checkpoint, FileRoundTripsEveryDtypeBitForBit) {
  const fs::path d = tmpdir("roundtrip");
  const train::Checkpoint c = sample_checkpoint();
  train::write_checkpoint((d / "a.edp").string(), c);
  const train::Checkpoint r = train::read_checkpoint((d / "a.edp").string());
  EXPECT_EQ(r.meta, c.meta);
  ASSERT_EQ(r.tensors.size(), c.tensors.size());
  for (size_t k = 0; k < c.tensors.size(); ++k) {
    EXPECT_EQ(r.tensors[k].first, c.tensors[k].first);
    ASSERT_EQ(r.tensors[k].second.defined(), c.tensors[k].second.defined()) << c.tensors[k].first;
    if (c.tensors[k].second.defined()) {
      EXPECT_TRUE(same_bits(r.tensors[k].second, c.tensors[k].second)) << c.tensors[k].first;
    }
  }
  EXPECT_EQ(r.int_at("step"), 42);
  EXPECT_THROW(r.int_at("note"), DataError);
  EXPECT_THROW(r.at("missing"), DataError);
  // No temporary file is left behind.
  int files = 0;
  for (const auto& e : fs::directory_iterator(d)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  fs::remove_all(d);
}

TEST(Checkpoint, DamageIsDetectedAndNamed) {
  const fs::path d = tmpdir("damage");
  const fs::path p = d / "a.edp";
  train::write_checkpoint(p.string(), sample_checkpoint());
  const std::vector<char> good = slurp(p);
  auto expect = [&](const std::vector<char>& bytes, const std::string& what) {
    spit(p, bytes);
    try {
      train::read_checkpoint(p.string());
      ADD_FAILURE() << "no error for " << what;
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  // Every single flipped bit in the body changes the crc32.
  for (size_t at : {size_t{9}, size_t{40}, good.size() / 2, good.size() - 13}) {
    std::vector<char> b = good;
    b[at] ^= 0x10;
    expect(b, "checksum mismatch");
  }
  expect(std::vector<char>(good.begin(), good.end() - 5), "truncated");
  expect(std::vector<char>(good.begin(), good.begin() + good.size() / 2), "truncated");
  expect(std::vector<char>{'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0}, "not an edp checkpoint");
  expect({}, "not an edp checkpoint");
  {
    // Another format version (with a valid checksum, so that the version check is what fires).
    train::write_checkpoint(p.string(), sample_checkpoint());
    std::vector<char> b = slurp(p);
    b[8] = 2;
    const size_t body = b.size() - 12;
    uLong c = crc32(0L, Z_NULL, 0);
    c = crc32(c, reinterpret_cast<const Bytef*>(b.data()), static_cast<uInt>(body));
    const uint32_t c32 = static_cast<uint32_t>(c);
    std::memcpy(b.data() + body, &c32, 4);
    expect(b, "format version 2");
  }
  EXPECT_THROW(train::read_checkpoint((d / "missing.edp").string()), DataError);
  fs::remove_all(d);
}

// A tensor whose shape asks for more bytes than the file holds (2^60 here, a fuzzer's find): an
// error naming what is missing, before anything is allocated.
TEST(Checkpoint, ATensorLargerThanTheFileIsRefusedBeforeItIsAllocated) {
  static const char body[] =
      "\x45\x44\x50\x43\x4b\x50\x54\x31\x01\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x04\x00\x00\x00"
      "\x73\x74\x65\x70\x01\x00\x00\x00\x38\x0a\x00\x00\x00\x77\x6f\x72\x6c\x64\x5f\x73\x69\x7a\x65\x01"
      "\x00\x00\x00\x32\x0b\x00\x00\x00\x63\x6f\x6e\x66\x69\x67\x2e\x2d\x2d\x6c\x72\x03\x00\x00\x00\x30"
      "\x2e\x31\x03\x00\x00\x00\x0f\x00\x00\x00\x6d\x6f\x64\x65\x6c\x2e\x66\x63\x2e\x77\x65\x69\x67\x68"
      "\x74\x00\x02\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00"
      "\x00\x00\x18\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00"
      "\x40\x40\x00\x00\x80\x40\x00\x00\xa0\x40\x07\x00\x00\x00\x6f\x70\x74\x69\x6d\x2e\x30\xff\x0e\x00"
      "\x00\x00\x62\x75\x30\x66\x66\x65\x72\x2e\x62\x6e\x2e\x6d\x73\x61\x6e\x00\x01\x03\x00\x00\x00\x00"
      "\x00\x00\x00\x0c\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40";
  std::vector<char> bytes(body, body + sizeof body - 1);
  const uint32_t crc = edp::files::crc32(bytes.data(), bytes.size());
  bytes.insert(bytes.end(), reinterpret_cast<const char*>(&crc), reinterpret_cast<const char*>(&crc) + 4);
  for (char c : std::string("EDPCKEND")) bytes.push_back(c);
  try {
    (void)edp::train::decode_checkpoint(bytes, "crafted");
    FAIL() << "expected an error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated: tensor data needs"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, DirKeepsTheNewestAndSkipsDamagedOnes) {
  const fs::path d = tmpdir("dir");
  train::CheckpointDir dir(d.string(), 2);
  EXPECT_FALSE(dir.latest().has_value());
  for (int64_t s : {10, 20, 30}) {
    train::Checkpoint c;
    c.meta["step"] = std::to_string(s);
    dir.commit(s, c);
  }
  std::vector<std::string> all = dir.list();
  ASSERT_EQ(all.size(), 2u);  // step 10 was removed once 30 was whole
  EXPECT_NE(all[0].find("ckpt-000000000030.edp"), std::string::npos);
  // A half-written temporary file (a crash during write) is not a checkpoint.
  spit(d / "ckpt-000000000040.edp.tmp.12345", {'E', 'D', 'P'});
  std::string which;
  auto c = dir.latest(&which);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->int_at("step"), 30);
  // The newest one damaged: latest() falls back to the previous one.
  std::vector<char> b = slurp(all[0]);
  b[b.size() / 2] ^= 1;
  spit(all[0], b);
  testing::internal::CaptureStderr();
  c = dir.latest(&which);
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->int_at("step"), 20);
  EXPECT_EQ(which, all[1]);
  EXPECT_NE(err.find("skipping damaged checkpoint"), std::string::npos) << err;
  EXPECT_NE(err.find("ckpt-000000000030.edp"), std::string::npos) << err;
  fs::remove_all(d);
}

// A sharded checkpoint's parts (edp/train/shards.h) live and go with it: removed with it, parts of
// no checkpoint removed at the next commit, set aside with it; a checkpoint with a part missing
// is skipped for the one before it; a sharded checkpoint is refused by a plain restore().
TEST(CheckpointDir, KeepsAndRemovesTheParts) {
  const fs::path d = tmpdir("parts");
  train::CheckpointDir dir(d.string(), 2);
  auto commit = [&](int64_t s) {
    const std::string path = dir.path_of(s);
    train::Checkpoint c;
    c.meta["step"] = std::to_string(s);
    c.meta["optim.state"] = "sharded";
    c.meta["optim.shards"] = "2";
    for (int r = 0; r < 2; ++r) {
      spit(train::shard_path(path, r, 2), {'p', static_cast<char>('0' + r)});
      c.meta["optim.shard." + std::to_string(r) + ".bytes"] = "2";
    }
    dir.commit(s, c);
  };
  commit(10);
  commit(20);
  spit(train::shard_path(dir.path_of(25), 0, 2), {'x'});  // a commit that never finished
  commit(30);
  EXPECT_FALSE(fs::exists(train::shard_path(dir.path_of(10), 0, 2))) << "removed with its checkpoint";
  EXPECT_FALSE(fs::exists(train::shard_path(dir.path_of(25), 0, 2))) << "a part of no checkpoint";
  EXPECT_TRUE(fs::exists(train::shard_path(dir.path_of(20), 1, 2)));
  EXPECT_TRUE(fs::exists(train::shard_path(dir.path_of(30), 1, 2)));
  std::string which;
  ASSERT_EQ(dir.latest(&which)->int_at("step"), 30);
  fs::remove(train::shard_path(dir.path_of(30), 1, 2));
  testing::internal::CaptureStderr();
  auto c = dir.latest(&which);
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->int_at("step"), 20) << "the checkpoint with a part missing is skipped";
  EXPECT_NE(err.find("shard-1-of-2 is missing"), std::string::npos) << err;
  // A plain restore() cannot take the optimizer state of a sharded checkpoint: it says so.
  auto model = std::make_shared<nn::Linear>(2, 2);
  optim::SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  try {
    train::restore(*c, *model, &opt, nullptr);
    ADD_FAILURE() << "restored a sharded checkpoint's optimizer state from nothing";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("keeps its optimizer state in parts"), std::string::npos) << e.what();
  }
  const std::vector<std::string> moved = dir.set_aside_after(10, "aside");
  EXPECT_TRUE(fs::exists(train::shard_path(dir.path_of(20), 0, 2) + ".aside")) << "set aside with its checkpoint";
  EXPECT_EQ(moved.size(), 5u);  // 20 with its two parts, 30 with the one left
  fs::remove_all(d);
}

// The design's contract: commit -> N steps equals restore -> N steps, bitwise.
TEST(Checkpoint, RestoreThenStepsEqualsUninterruptedStepsBitwise) {
  const auto ds = dataset();
  for (const char* which : {"sgd", "adamw"}) {
    auto make_opt = [&](nn::Module& m) -> std::unique_ptr<optim::Optimizer> {
      if (std::string(which) == "sgd")
        return std::make_unique<optim::SGD>(m.parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .nesterov = true});
      return std::make_unique<optim::AdamW>(m.parameters(), optim::AdamWOptions{.lr = 1e-3});
    };
    const fs::path d = tmpdir(std::string("determinism_") + which);
    // Run A: 7 steps (into the second epoch of 60 samples at batch 16), commit, 6 more steps.
    auto a = model();
    auto opt_a = make_opt(*a);
    data::DistributedSampler sa(ds->size(), 123, 1, 0, {.batch_size = 16});
    sa.set_epoch(0);
    for (int i = 0; i < 7; ++i) step(*a, *opt_a, sa, *ds);
    train::CheckpointDir dir(d.string());
    dir.commit(7, train::capture(*a, opt_a.get(), &sa));
    for (int i = 0; i < 6; ++i) step(*a, *opt_a, sa, *ds);

    // Run B: a fresh process's objects (other initial weights), restored from the file.
    manual_seed(999);
    auto b = model();
    auto opt_b = make_opt(*b);
    data::DistributedSampler sb(ds->size(), 123, 1, 0, {.batch_size = 16});
    auto c = dir.latest();
    ASSERT_TRUE(c.has_value());
    train::restore(*c, *b, opt_b.get(), &sb);
    EXPECT_EQ(opt_b->steps(), 7);
    for (int i = 0; i < 6; ++i) step(*b, *opt_b, sb, *ds);

    const auto pa = a->parameters(), pb = b->parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t k = 0; k < pa.size(); ++k) EXPECT_TRUE(same_bits(pa[k]->value, pb[k]->value)) << which << " " << pa[k]->name;
    const auto ba = a->buffers(), bb = b->buffers();
    for (size_t k = 0; k < ba.size(); ++k) EXPECT_TRUE(same_bits(ba[k]->value, bb[k]->value)) << which << " " << ba[k]->name;
    EXPECT_EQ(sa.state().position, sb.state().position);
    EXPECT_EQ(sa.state().epoch, sb.state().epoch);
    fs::remove_all(d);
  }
}

TEST(Checkpoint, RestoreRefusesAnotherModelAndChangesNothing) {
  auto a = model();
  optim::SGD opt(a->parameters(), {.lr = 0.1, .momentum = 0.9});
  const train::Checkpoint c = train::capture(*a, &opt, nullptr);
  // A model with a different layer width.
  manual_seed(17);
  auto other = nn::make<nn::Sequential>();
  other->add(nn::make<nn::Conv2d>(1, 8, 3, 1, 1), "conv");
  const Tensor before = other->parameters()[0]->value.clone();
  try {
    train::restore(c, *other, nullptr, nullptr);
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("model.conv.weight"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(same_bits(other->parameters()[0]->value, before));
  // The right model but another optimizer type: refused as well.
  auto b = model();
  optim::AdamW adam(b->parameters(), {.lr = 1e-3});
  EXPECT_THROW(train::restore(c, *b, &adam, nullptr), DataError);
}

// An optimizer before its first step has no state: its capture makes none (an elastic job's
// start would otherwise hold the whole state, and copies of it, at once), and restoring it leaves
// the live optimizer without state too, at the saved step count — the same zeros at the next step.
TEST(Checkpoint, AnOptimizerWithoutStateIsCapturedAsFresh) {
  auto a = model();
  optim::AdamW fresh(a->parameters(), {.lr = 1e-3});
  const train::Checkpoint c = train::capture(*a, &fresh, nullptr);
  EXPECT_FALSE(fresh.has_state()) << "the capture made the state";
  EXPECT_EQ(c.at("optim.state"), "fresh");
  EXPECT_EQ(c.int_at("optim.state_tensors"), static_cast<int64_t>(2 * a->parameters().size()));
  for (const auto& [name, t] : c.tensors) EXPECT_NE(name.rfind("optim.", 0), 0u) << name;
  // Through the bytes, into an optimizer that has stepped: its state goes, its step count is the saved one.
  const train::Checkpoint d = train::decode_checkpoint(train::encode_checkpoint(c), "test");
  auto b = model();
  optim::AdamW stepped(b->parameters(), {.lr = 1e-3});
  for (nn::Parameter* p : b->parameters()) p->grad = Tensor::full(p->value.shape(), 1.0);
  stepped.step();
  ASSERT_TRUE(stepped.has_state());
  train::restore(d, *b, &stepped, nullptr);
  EXPECT_FALSE(stepped.has_state());
  EXPECT_EQ(stepped.steps(), 0);
  // Another optimizer (SGD with momentum keeps one tensor per parameter, AdamW two): refused.
  optim::SGD sgd(b->parameters(), {.lr = 0.1, .momentum = 0.9});
  EXPECT_THROW(train::restore(d, *b, &sgd, nullptr), DataError);
}

TEST(Checkpoint, RecordsTheBuildAndNamesADifferentOne) {
  auto a = model();
  train::Checkpoint c = train::capture(*a, nullptr, nullptr);
  EXPECT_EQ(c.at("build.cpu_arch"), EDP_CPU_ARCH);
  EXPECT_EQ(c.at("build.compiler"), EDP_COMPILER);
  EXPECT_EQ(c.at("build.cpu_flags"), EDP_CPU_FLAGS);
  EXPECT_EQ(train::build_difference(c), "");
  c.meta["build.cpu_arch"] = "x86-64-v4 [avx512f]";
  const std::string d = train::build_difference(c);
  EXPECT_NE(d.find("build.cpu_arch 'x86-64-v4 [avx512f]' here '" EDP_CPU_ARCH "'"), std::string::npos) << d;
  // A checkpoint of an older edp has no build record: nothing to compare, no difference.
  c.meta.erase("build.cpu_arch");
  c.meta.erase("build.cpu_flags");
  c.meta.erase("build.compiler");
  EXPECT_EQ(train::build_difference(c), "");
}

namespace {
std::string lock_error(const std::string& dir) {
  try {
    train::CheckpointLock lock(dir, "second", "");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
void write_lock(const fs::path& path, long pid, const std::string& pid_ns) {
  const ProcessId me = ProcessId::self();
  std::ofstream(path) << nlohmann::json{{"pid", pid},    {"start_time", 12345}, {"host", me.host}, {"pid_ns", pid_ns},
                                        {"job", "other"}, {"launch", ""},        {"since", "yesterday"}}
                             .dump();
}
}  // namespace

// The lock a job finds in its checkpoint directory is read as a record edp wrote: a FIFO there is
// refused at once (it blocked a job forever), a link to /dev/zero is refused (it was read until
// memory ran out), each naming the lock and what to do.
TEST(CheckpointLock, AForeignLockFileIsRefusedNotReadForever) {
  const fs::path d = tmpdir("lockkind");
  ASSERT_EQ(::mkfifo((d / "lock").c_str(), 0600), 0);
  const edp_test::ChildResult r = edp_test::run_in_child([&] { return lock_error(d.string()); });
  ASSERT_TRUE(r.finished) << "a FIFO as the lock blocked the job";
  EXPECT_NE(r.output.find("its lock " + (d / "lock").string() + " cannot be read"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("a FIFO, not a regular file"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("remove the file and start again"), std::string::npos) << r.output;
  fs::remove(d / "lock");
  fs::create_symlink("/dev/zero", d / "lock");
  const edp_test::ChildResult z = edp_test::run_in_child([&] { return lock_error(d.string()); });
  ASSERT_TRUE(z.finished);
  EXPECT_NE(z.output.find("a symbolic link"), std::string::npos) << z.output;
  fs::remove_all(d);
}

// A lock of this host left by a job in another pid namespace (a container): its pid means nothing
// here, but the flock the holder keeps does. Not held: taken over; held: the directory is in use.
TEST(CheckpointLock, ALockOfAnotherPidNamespaceIsJudgedByItsFlock) {
  const fs::path d = tmpdir("lockns");
  write_lock(d / "lock", 12345, "pid:[1]");
  testing::internal::CaptureStderr();
  {
    train::CheckpointLock taken(d.string(), "mine", "");
  }
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("taking over the lock of job 'other'"), std::string::npos) << said;
  EXPECT_NE(said.find("another pid namespace of this host"), std::string::npos) << said;
  EXPECT_FALSE(fs::exists(d / "lock")) << "released when the job ended";
  // Held: a process keeps the flock, as a live job does.
  write_lock(d / "lock", 12345, "pid:[1]");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t holder = ::fork();
  if (holder == 0) {
    const int fd = ::open((d / "lock").c_str(), O_RDONLY);
    ::flock(fd, LOCK_EX);
    (void)!::write(ready[1], "x", 1);
    ::pause();
    ::_exit(0);
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  const std::string m = lock_error(d.string());
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  EXPECT_NE(m.find("is in use by job 'other'"), std::string::npos) << m;
  EXPECT_NO_THROW(train::CheckpointLock after(d.string(), "mine", "")) << "free once the holder is gone";
  fs::remove_all(d);
}

// A checkpoint directory that other users may write to is refused (they could plant files or
// replace checkpoints); a FIFO among the checkpoints is skipped with a message, not read.
TEST(CheckpointDir, RefusesOpenDirectoriesAndSkipsFifos) {
  const fs::path d = tmpdir("open");
  ASSERT_EQ(::chmod(d.c_str(), 0777), 0);
  try {
    train::CheckpointDir dir(d.string());
    FAIL() << "a directory anybody may write to was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint directory " + d.string() + ": refused:"), std::string::npos)
        << e.what();
  }
  ASSERT_EQ(::chmod(d.c_str(), 0700), 0);
  train::CheckpointDir dir(d.string());
  train::Checkpoint c;
  c.meta["step"] = "10";
  dir.commit(10, c);
  ASSERT_EQ(::mkfifo((d / "ckpt-000000000020.edp").c_str(), 0600), 0);
  const edp_test::ChildResult r = edp_test::run_in_child([&] {
    std::string which;
    const auto got = dir.latest(&which);
    return got ? which : std::string("none");
  });
  ASSERT_TRUE(r.finished) << "a FIFO among the checkpoints blocked the job";
  EXPECT_EQ(r.output, (d / "ckpt-000000000010.edp").string());
  fs::remove_all(d);
}
