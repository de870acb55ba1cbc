// make_synthetic: deterministic for a seed, prefix-stable in n, and actually learnable (the
// classes are separable by their means, which is what tests and benchmarks rely on).
#include <cmath>
#include <cstring>

#include "edp/data/dataset.h"
#include "test_util.h"

using namespace edp;
using namespace edp::data;

namespace {
bool same_bytes(const TensorDataset& a, const TensorDataset& b) {
  return a.features().shape() == b.features().shape() && a.labels() == b.labels() &&
         std::memcmp(a.features().raw(), b.features().raw(), a.features().nbytes()) == 0;
}
}  // namespace

TEST(Synthetic, SameSeedSameBytes) {
  auto a = make_synthetic(500, Shape{3, 4, 4}, 7, 1234, 0.8f);
  auto b = make_synthetic(500, Shape{3, 4, 4}, 7, 1234, 0.8f);
  EXPECT_EQ(a->features().shape(), (Shape{500, 3, 4, 4}));
  EXPECT_EQ(a->num_classes(), 7);
  EXPECT_TRUE(same_bytes(*a, *b));
  auto c = make_synthetic(500, Shape{3, 4, 4}, 7, 1235, 0.8f);
  EXPECT_FALSE(same_bytes(*a, *c));
  EXPECT_NE(a->labels(), c->labels());
}

TEST(Synthetic, SmallerNIsAPrefix) {
  auto big = make_synthetic(300, Shape{10}, 5, 9);
  auto small = make_synthetic(120, Shape{10}, 5, 9);
  EXPECT_TRUE(same_bytes(*small, *big->head(120)));
}

TEST(Synthetic, NoiseZeroGivesThePrototypes) {
  auto ds = make_synthetic(200, Shape{6}, 4, 3, 0.0f);
  std::vector<std::vector<float>> proto(4);
  std::vector<float> buf(6);
  for (int64_t i = 0; i < ds->size(); ++i) {
    const int32_t y = ds->get(i, buf.data());
    if (proto[y].empty())
      proto[y] = buf;
    else
      EXPECT_EQ(proto[y], buf) << "sample " << i << " of class " << y;
  }
  for (int c = 0; c < 4; ++c) EXPECT_FALSE(proto[c].empty()) << "class " << c << " never drawn";
}

TEST(Synthetic, LabelsUniformAndClassesSeparable) {
  const int64_t n = 20000, dim = 32;
  const int classes = 10;
  auto ds = make_synthetic(n, Shape{dim}, classes, 77, 1.0f);
  std::vector<int64_t> hist(classes, 0);
  std::vector<std::vector<double>> mean(classes, std::vector<double>(dim, 0.0));
  const float* x = ds->features().data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t y = ds->labels()[static_cast<size_t>(i)];
    ++hist[y];
    for (int64_t k = 0; k < dim; ++k) mean[y][k] += x[i * dim + k];
  }
  // Binomial(20000, 0.1): sd = 42.4; 6 sd = 255 makes a false failure practically impossible.
  for (int c = 0; c < classes; ++c) {
    EXPECT_NEAR(hist[c], n / classes, 255) << "class " << c;
    for (auto& m : mean[c]) m /= static_cast<double>(hist[c]);
  }
  // Noise variance is noise^2 = 1 per coordinate: check it from the data (within-class
  // spread), with a 5% tolerance for the sample estimate over 640k values.
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t y = ds->labels()[static_cast<size_t>(i)];
    for (int64_t k = 0; k < dim; ++k) ss += std::pow(x[i * dim + k] - mean[y][k], 2);
  }
  EXPECT_NEAR(ss / static_cast<double>(n * dim), 1.0, 0.05);
  // Nearest class mean: prototypes ~ N(0, I_32) are ~8 apart and the noise is 1 per
  // coordinate, so nearly every sample is classified right. 0.95 is a loose floor.
  int64_t right = 0;
  for (int64_t i = 0; i < n; ++i) {
    int best = -1;
    double best_d = 1e300;
    for (int c = 0; c < classes; ++c) {
      double d = 0;
      for (int64_t k = 0; k < dim; ++k) d += std::pow(x[i * dim + k] - mean[c][k], 2);
      if (d < best_d) best_d = d, best = c;
    }
    right += best == ds->labels()[static_cast<size_t>(i)];
  }
  EXPECT_GT(static_cast<double>(right) / n, 0.95);
}

TEST(Synthetic, RejectsBadArguments) {
  EXPECT_THROW_WITH(make_synthetic(-1, Shape{2}, 2, 0), Error, "n must be");
  EXPECT_THROW_WITH(make_synthetic(10, Shape{2}, 0, 0), Error, "num_classes");
  EXPECT_THROW_WITH(make_synthetic(10, Shape{2, 0}, 2, 0), ShapeError, "[2, 0]");
  EXPECT_THROW_WITH(make_synthetic(10, Shape{2}, 2, 0, -1.0f), Error, "noise");
}
