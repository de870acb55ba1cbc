// Model files and evaluation metrics: save_model / load_model round-trip a model's parameters
// and BatchNorm statistics into a freshly built one by name, bit for bit; every mismatch (a
// missing, mis-shaped or extra tensor) is named and leaves the model unchanged; a training
// checkpoint's model part loads too. evaluate() reports per-class precision/recall for classes
// and MSE/MAE/RMSE for value targets, checked against sums done by hand here (exact: the inputs
// are small integers and halves, so every float operation is exact).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "../data/test_util.h"
#include "edp/core/error.h"
#include "edp/core/random.h"
#include "edp/data/arrays.h"
#include "edp/nn/init.h"
#include "edp/nn/layers.h"
#include "edp/optim/optimizer.h"
#include "edp/train/checkpoint.h"
#include "edp/train/evaluate.h"
#include "edp/train/state_dict.h"

namespace {
using namespace edp;
using edp_test::TempDir;

std::shared_ptr<nn::Sequential> build(int64_t hidden = 8) {
  return nn::make<nn::Sequential>({nn::make<nn::Linear>(3, hidden), nn::make<nn::Tanh>(),
                                   nn::make<nn::Linear>(hidden, 2)});
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.numel()) * dtype_size(a.dtype())) == 0;
}

TEST(ModelFile, RoundTripsIntoAFreshModel) {
  TempDir d;
  manual_seed(1);
  auto a = build();
  manual_seed(2);  // other initial weights: the load must overwrite every one
  auto b = build();
  train::save_model(d.file("m.edp"), *a, {{"note", "test"}});
  const auto meta = train::load_model(d.file("m.edp"), *b);
  EXPECT_EQ(meta.at("note"), "test");
  EXPECT_EQ(meta.at("kind"), "model");
  const auto pa = a->parameters(), pb = b->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(same_bits(pa[i]->value, pb[i]->value)) << pa[i]->name;
  const Tensor x = Tensor::from_vector<float>({1, 3}, {0.5f, -1, 2});
  EXPECT_TRUE(same_bits(a->forward(x), b->forward(x)));
}

TEST(ModelFile, BatchNormStatisticsTravel) {
  TempDir d;
  auto a = nn::make<nn::Sequential>({nn::make<nn::BatchNorm2d>(2)});
  a->forward(Tensor::from_vector<float>({2, 2, 1, 1}, {1, 2, 3, 5}));  // train mode: running stats move
  auto b = nn::make<nn::Sequential>({nn::make<nn::BatchNorm2d>(2)});
  train::save_model(d.file("bn.edp"), *a);
  train::load_model(d.file("bn.edp"), *b);
  const auto ba = a->buffers(), bb = b->buffers();
  ASSERT_FALSE(ba.empty());
  for (size_t i = 0; i < ba.size(); ++i) EXPECT_TRUE(same_bits(ba[i]->value, bb[i]->value)) << ba[i]->name;
}

TEST(ModelFile, MismatchesAreNamedAndChangeNothing) {
  TempDir d;
  manual_seed(3);
  auto saved = build(8);
  train::save_model(d.file("m.edp"), *saved);
  auto check_unchanged = [](nn::Module& m, const std::vector<Tensor>& before) {
    const auto ps = m.parameters();
    for (size_t i = 0; i < ps.size(); ++i) EXPECT_TRUE(same_bits(ps[i]->value, before[i])) << ps[i]->name;
  };
  auto snapshot = [](nn::Module& m) {
    std::vector<Tensor> v;
    for (nn::Parameter* p : m.parameters()) v.push_back(p->value.clone());
    return v;
  };
  // Another width: the first mis-shaped tensor, both shapes shown.
  auto wide = build(16);
  const auto before = snapshot(*wide);
  EXPECT_THROW_WITH(train::load_model(d.file("m.edp"), *wide), DataError, "m.edp", "float32[8, 3]",
                    "float32[16, 3]");
  check_unchanged(*wide, before);
  // A model with one more layer: the file lacks its tensors.
  auto deeper = nn::make<nn::Sequential>({nn::make<nn::Linear>(3, 8), nn::make<nn::Tanh>(),
                                          nn::make<nn::Linear>(8, 2), nn::make<nn::Linear>(2, 2)});
  const auto before2 = snapshot(*deeper);
  EXPECT_THROW_WITH(train::load_model(d.file("m.edp"), *deeper), DataError, "has no tensor", "model.3.");
  check_unchanged(*deeper, before2);
  // A smaller model: strict refuses the extra tensors, non-strict loads what matches.
  auto shallow = nn::make<nn::Sequential>({nn::make<nn::Linear>(3, 8)});
  EXPECT_THROW_WITH(train::load_model(d.file("m.edp"), *shallow), DataError, "which the model lacks",
                    "strict = false");
  train::load_model(d.file("m.edp"), *shallow, /*strict=*/false);
  EXPECT_TRUE(same_bits(shallow->parameters()[0]->value, saved->parameters()[0]->value));
  // Not a checkpoint file at all.
  edp_test::write_plain(d.file("junk.edp"), {'n', 'o', 't', ' ', 'a', ' ', 'f', 'i', 'l', 'e'});
  EXPECT_THROW(train::load_model(d.file("junk.edp"), *build()), DataError);
}

TEST(ModelFile, LoadsTheModelPartOfATrainingCheckpoint) {
  TempDir d;
  manual_seed(4);
  auto a = build();
  optim::SGD opt(a->parameters(), {.lr = 0.1, .momentum = 0.9});
  train::Checkpoint c = train::state_dict(*a, {{"step", "7"}});
  c.tensors.emplace_back("optim.extra", Tensor::from_vector<float>({1}, {1}));  // not the model's: ignored
  train::write_checkpoint(d.file("ck.edp"), c);
  auto b = build();
  EXPECT_EQ(train::load_model(d.file("ck.edp"), *b).at("step"), "7");
  EXPECT_TRUE(same_bits(a->parameters()[0]->value, b->parameters()[0]->value));
}

// ---- evaluate ------------------------------------------------------------------------------

// y = x[0] (one Linear with weight [1, 0], no bias): predictions are the first feature.
std::shared_ptr<nn::Linear> first_feature() {
  auto m = nn::make<nn::Linear>(2, 1, false);
  float* w = m->weight().value.data<float>();
  w[0] = 1, w[1] = 0;
  return m;
}

TEST(Evaluate, ValueTargetsReportMseMaeRmse) {
  // predictions 1, 2, 3, 4.5; targets 0, 2, 5, 4: errors 1, 0, -2, 0.5.
  const Tensor x = Tensor::from_vector<float>({4, 2}, {1, 9, 2, 9, 3, 9, 4.5f, 9});
  const Tensor y = Tensor::from_vector<float>({4}, {0, 2, 5, 4});
  auto ds = std::make_shared<data::ArrayDataset>(data::Array::from_tensor("x", x), data::Array::from_tensor("y", y),
                                                 data::Targets::values, 0);
  auto m = first_feature();
  for (int64_t batch : {1, 3, 4}) {  // a last partial batch counts as much as any
    const train::EvalResult r = train::evaluate(*m, *ds, batch);
    EXPECT_EQ(r.samples, 4);
    EXPECT_DOUBLE_EQ(r.loss, (1 + 0 + 4 + 0.25) / 4);
    EXPECT_DOUBLE_EQ(r.mae, (1 + 0 + 2 + 0.5) / 4);
    EXPECT_DOUBLE_EQ(r.rmse, std::sqrt(5.25 / 4));
  }
}

TEST(Evaluate, ClassesReportPerClassPrecisionAndRecall) {
  // Logits = the features (an identity Linear over 3 classes); argmax per row and the labels:
  //   pred 0 0 1 2 2 2, label 0 1 1 2 2 0
  // class 0: TP 1, predicted 2, present 2; class 1: TP 1, predicted 1, present 2;
  // class 2: TP 2, predicted 3, present 2.
  const Tensor x = Tensor::from_vector<float>(
      {6, 3}, {5, 0, 0, 5, 1, 0, 0, 5, 1, 0, 0, 5, 1, 2, 3, 0, 0, 1});
  const Tensor y = Tensor::from_vector<int32_t>({6}, {0, 1, 1, 2, 2, 0});
  auto ds = std::make_shared<data::ArrayDataset>(data::Array::from_tensor("x", x), data::Array::from_tensor("y", y));
  auto m = nn::make<nn::Linear>(3, 3, false);
  float* w = m->weight().value.data<float>();
  for (int i = 0; i < 9; ++i) w[i] = i % 4 == 0 ? 1.0f : 0.0f;
  const train::EvalResult r = train::evaluate(*m, *ds, 4);
  EXPECT_DOUBLE_EQ(r.accuracy, 4.0 / 6);
  ASSERT_EQ(r.precision.size(), 3u);
  EXPECT_DOUBLE_EQ(r.precision[0], 0.5);
  EXPECT_DOUBLE_EQ(r.precision[1], 1.0);
  EXPECT_DOUBLE_EQ(r.precision[2], 2.0 / 3);
  EXPECT_DOUBLE_EQ(r.recall[0], 0.5);
  EXPECT_DOUBLE_EQ(r.recall[1], 0.5);
  EXPECT_DOUBLE_EQ(r.recall[2], 1.0);
  EXPECT_EQ(r.support, (std::vector<int64_t>{2, 2, 2}));
}

}  // namespace
