// The real Fashion-MNIST files of the Debian package: sizes and class balance from the
// dataset's published description (60000 train / 10000 test images of 28x28, 10 classes of
// 6000 / 1000 images each), pixel statistics against the published mean/std the loader uses,
// and the loaded tensors against the raw bytes. Skipped, with the fix, if the package is absent.
#include <cmath>
#include <cstring>
#include <filesystem>

#include "edp/data/dataset.h"
#include "test_util.h"

using namespace edp;
using namespace edp::data;
using namespace edp_test;

namespace {
std::string fm(const std::string& name) { return std::string(kFashionMnistDir) + "/" + name; }

bool installed() {
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                        "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"})
    if (!std::filesystem::exists(fm(f))) return false;
  return true;
}

#define REQUIRE_FASHION_MNIST()                                                      \
  if (!installed())                                                                  \
  GTEST_SKIP() << "Fashion-MNIST is not in " << kFashionMnistDir                     \
               << ": apt-get install dataset-fashion-mnist"

// Loaded once: decompressing the training set takes a noticeable fraction of a second.
struct Train {
  IdxImages raw;
  std::vector<uint8_t> raw_labels;
  std::shared_ptr<TensorDataset> ds;
};
const Train& train() {
  static const Train t = [] {
    Train t;
    t.raw = read_idx_images(fm("train-images-idx3-ubyte.gz"));
    t.raw_labels = read_idx_labels(fm("train-labels-idx1-ubyte.gz"));
    t.ds = load_fashion_mnist(kFashionMnistDir, "train");
    return t;
  }();
  return t;
}
}  // namespace

TEST(FashionMnist, HeadersMatchThePublishedSizes) {
  REQUIRE_FASHION_MNIST();
  const auto& t = train();
  EXPECT_EQ(t.raw.count, 60000);
  EXPECT_EQ(t.raw.rows, 28);
  EXPECT_EQ(t.raw.cols, 28);
  EXPECT_EQ(t.raw.pixels.size(), 60000u * 28 * 28);
  EXPECT_EQ(t.raw_labels.size(), 60000u);
  IdxImages test = read_idx_images(fm("t10k-images-idx3-ubyte.gz"));
  EXPECT_EQ(test.count, 10000);
  EXPECT_EQ(test.rows, 28);
  EXPECT_EQ(test.cols, 28);
  EXPECT_EQ(read_idx_labels(fm("t10k-labels-idx1-ubyte.gz")).size(), 10000u);
}

TEST(FashionMnist, ClassesAreBalanced) {
  REQUIRE_FASHION_MNIST();
  std::vector<int64_t> hist(10, 0);
  for (uint8_t l : train().raw_labels) {
    ASSERT_LT(l, 10);
    ++hist[l];
  }
  for (int c = 0; c < 10; ++c) EXPECT_EQ(hist[c], 6000) << "train class " << c;
  std::vector<int64_t> th(10, 0);
  for (uint8_t l : read_idx_labels(fm("t10k-labels-idx1-ubyte.gz"))) ++th[l];
  for (int c = 0; c < 10; ++c) EXPECT_EQ(th[c], 1000) << "test class " << c;
}

TEST(FashionMnist, PixelStatisticsMatchTheNormalisation) {
  REQUIRE_FASHION_MNIST();
  const auto& px = train().raw.pixels;
  double s = 0, ss = 0;
  uint8_t lo = 255, hi = 0;
  for (uint8_t b : px) {
    s += b;
    ss += double(b) * b;
    lo = std::min(lo, b);
    hi = std::max(hi, b);
  }
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(hi, 255);
  const double n = static_cast<double>(px.size());
  const double mean = s / n / 255.0, sd = std::sqrt(ss / n / 65025.0 - mean * mean);
  // 0.2860 / 0.3530 are the training statistics rounded to 4 decimals: they must agree to
  // half a unit of the last decimal (the sums are exact integers in double, no extra error).
  const Normalize norm = fashion_mnist_normalize();
  EXPECT_NEAR(mean, norm.mean[0], 5e-5);
  EXPECT_NEAR(sd, norm.std[0], 5e-5);
}

TEST(FashionMnist, LoadedTensorsAreTheNormalisedBytes) {
  REQUIRE_FASHION_MNIST();
  const auto& t = train();
  const auto& ds = *t.ds;
  ASSERT_EQ(ds.size(), 60000);
  EXPECT_EQ(ds.sample_shape(), (Shape{1, 28, 28}));
  EXPECT_EQ(ds.num_classes(), 10);
  ASSERT_EQ(ds.features().shape(), (Shape{60000, 1, 28, 28}));
  for (size_t i = 0; i < t.raw_labels.size(); ++i) ASSERT_EQ(ds.labels()[i], t.raw_labels[i]);
  // Kept as the file's bytes (a quarter of the memory); every sample comes out as the table of
  // the normalisation gives it.
  ASSERT_EQ(ds.features().dtype(), DType::U8);
  ASSERT_EQ(std::memcmp(ds.features().raw(), t.raw.pixels.data(), t.raw.pixels.size()), 0);
  float lut[256];
  for (int b = 0; b < 256; ++b) lut[b] = static_cast<float>((b / 255.0 - 0.2860f) / 0.3530f);
  std::vector<float> xs(t.raw.pixels.size());
  for (int64_t i = 0; i < ds.size(); ++i) ds.get(i, xs.data() + i * 784);
  const float* x = xs.data();
  double s = 0, ss = 0;
  float lo = 1e30f, hi = -1e30f;
  for (size_t k = 0; k < t.raw.pixels.size(); ++k) {
    ASSERT_EQ(x[k], lut[t.raw.pixels[k]]) << "pixel " << k;
    s += x[k];
    ss += double(x[k]) * x[k];
    lo = std::min(lo, x[k]);
    hi = std::max(hi, x[k]);
  }
  // Range after normalisation: bytes 0 and 255 both occur (checked above).
  EXPECT_FLOAT_EQ(lo, (0.0f - 0.2860f) / 0.3530f);
  EXPECT_FLOAT_EQ(hi, (1.0f - 0.2860f) / 0.3530f);
  // Standardised training set: mean ~0, std ~1. The published constants are rounded to 4
  // decimals (5e-5 / 0.353 = 1.4e-4 in normalised units); 3e-4 adds room for float rounding.
  const double n = static_cast<double>(t.raw.pixels.size());
  const double mean = s / n;
  EXPECT_NEAR(mean, 0.0, 3e-4);
  EXPECT_NEAR(std::sqrt(ss / n - mean * mean), 1.0, 3e-4);
}

TEST(FashionMnist, PlainCopiesLoadTheSame) {
  REQUIRE_FASHION_MNIST();
  // Decompress the test split with zlib into a folder of plain files, load both ways.
  TempDir dir;
  for (const char* f : {"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    gzFile in = gzopen(fm(std::string(f) + ".gz").c_str(), "rb");
    ASSERT_NE(in, nullptr);
    std::vector<uint8_t> all, buf(1 << 20);
    int r;
    while ((r = gzread(in, buf.data(), static_cast<unsigned>(buf.size()))) > 0)
      all.insert(all.end(), buf.begin(), buf.begin() + r);
    gzclose(in);
    write_plain(dir.file(f), all);
  }
  auto gz = load_fashion_mnist(kFashionMnistDir, "test");
  auto plain = load_fashion_mnist(dir.str(), "test");
  ASSERT_EQ(gz->size(), 10000);
  ASSERT_EQ(plain->features().shape(), gz->features().shape());
  EXPECT_EQ(plain->labels(), gz->labels());
  EXPECT_EQ(std::memcmp(plain->features().raw(), gz->features().raw(), gz->features().nbytes()),
            0);
}

TEST(FashionMnist, DebianFolderWithoutTheFilesSaysWhatToInstall) {
  // Not skipped: the message for the default folder is checked on a name that never exists.
  EXPECT_THROW_WITH(read_idx_labels(fm("train-labels-idx1-ubyte.missing")), DataError,
                    fm("train-labels-idx1-ubyte.missing"), "apt-get install dataset-fashion-mnist");
}
