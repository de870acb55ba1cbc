// TensorDataset: get() copies exactly one row, head() is a view sharing the storage, and the
// constructor rejects features and labels that do not fit together.
#include <cstring>

#include "edp/data/dataset.h"
#include "test_util.h"

using namespace edp;
using namespace edp::data;

namespace {
std::shared_ptr<TensorDataset> small(int64_t n) {
  Tensor x(Shape{n, 2, 3}, DType::F32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i) * 0.5f;
  std::vector<int32_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i)] = static_cast<int32_t>(i % 4);
  return std::make_shared<TensorDataset>(x, y, 4);
}
}  // namespace

TEST(TensorDataset, GetCopiesOneRow) {
  auto ds = small(5);
  EXPECT_EQ(ds->size(), 5);
  EXPECT_EQ(ds->sample_shape(), (Shape{2, 3}));
  EXPECT_EQ(ds->num_classes(), 4);
  // Guard values around the row catch a copy of the wrong length.
  std::vector<float> buf(8, -7.0f);
  EXPECT_EQ(ds->get(3, buf.data() + 1), 3);
  EXPECT_EQ(buf[0], -7.0f);
  EXPECT_EQ(buf[7], -7.0f);
  for (int k = 0; k < 6; ++k) EXPECT_EQ(buf[1 + k], static_cast<float>(3 * 6 + k) * 0.5f);
}

TEST(TensorDataset, GetOutOfRangeThrows) {
  auto ds = small(5);
  std::vector<float> buf(6);
  EXPECT_THROW_WITH(ds->get(5, buf.data()), Error, "get(5)", "5 samples");
  EXPECT_THROW_WITH(ds->get(-1, buf.data()), Error, "get(-1)");
}

TEST(TensorDataset, HeadIsAViewAndClamps) {
  auto ds = small(5);
  auto h = ds->head(2);
  EXPECT_EQ(h->size(), 2);
  EXPECT_TRUE(h->features().same_storage(ds->features()));
  EXPECT_EQ(h->features().shape(), (Shape{2, 2, 3}));
  std::vector<float> a(6), b(6);
  for (int64_t i = 0; i < 2; ++i) {
    EXPECT_EQ(h->get(i, a.data()), ds->get(i, b.data()));
    EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(float) * 6), 0);
  }
  EXPECT_EQ(ds->head(100)->size(), 5);
  EXPECT_EQ(ds->head(-3)->size(), 0);
  // A view sees writes to the parent: it shares the bytes, it does not copy them.
  ds->features().data<float>()[0] = 42.0f;
  h->get(0, a.data());
  EXPECT_EQ(a[0], 42.0f);
}

TEST(TensorDataset, ConstructorRejectsMismatches) {
  Tensor x(Shape{3, 2}, DType::F32);
  x.zero();
  EXPECT_THROW_WITH(TensorDataset(x, {0, 1}, 2), ShapeError, "3 samples", "2 labels");
  EXPECT_THROW_WITH(TensorDataset(x, {0, 1, 2}, 2), DataError, "label 2", "sample 2");
  EXPECT_THROW_WITH(TensorDataset(x, {0, -1, 0}, 2), DataError, "label -1");
  EXPECT_THROW_WITH(TensorDataset(Tensor(Shape{3, 2}, DType::F64), {0, 0, 0}, 2), ShapeError,
                    "float64");
  EXPECT_THROW_WITH(TensorDataset(x, {0, 0, 0}, 0), Error, "num_classes");
}

// Image bytes with a Normalize give, per sample, exactly the floats that converting the whole set
// up front gives (the table of each channel), for every byte value and channel; slices of either
// form are views that agree.
TEST(TensorDataset, ImageBytesGiveTheSameFloatsAsConvertedFeatures) {
  const int64_t n = 300, c = 3, plane = 4;
  Tensor bytes(Shape{n, c, 2, 2}, DType::U8);
  for (int64_t i = 0; i < bytes.numel(); ++i) bytes.data<uint8_t>()[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
  std::vector<int32_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i)] = static_cast<int32_t>(i % 10);
  const Normalize norm{{0.1f, 0.5f, 0.9f}, {0.2f, 0.3f, 0.7f}};
  Tensor floats(Shape{n, c, 2, 2}, DType::F32);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t k = 0; k < plane; ++k) {
        const int64_t at = (i * c + ch) * plane + k;
        const double mean = norm.mean[static_cast<size_t>(ch)], sd = norm.std[static_cast<size_t>(ch)];
        floats.data<float>()[at] = static_cast<float>((bytes.data<uint8_t>()[at] / 255.0 - mean) / sd);
      }
  TensorDataset compact(bytes, y, 10, norm), full(floats, y, 10);
  EXPECT_EQ(compact.features().nbytes() * 4, full.features().nbytes());
  std::vector<float> a(12), b(12);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(compact.get(i, a.data()), full.get(i, b.data()));
    ASSERT_EQ(std::memcmp(a.data(), b.data(), sizeof(float) * 12), 0) << "sample " << i;
  }
  auto part = compact.slice(100, 50);
  EXPECT_TRUE(part->features().same_storage(compact.features()));
  EXPECT_EQ(part->size(), 50);
  part->get(7, a.data());
  full.get(107, b.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), sizeof(float) * 12), 0);
  EXPECT_THROW_WITH(TensorDataset(floats, y, 10, norm), ShapeError, "must be uint8");
  EXPECT_THROW_WITH(TensorDataset(bytes, y, 10, Normalize{{0.1f, 0.2f}, {1.0f}}), Error, "2 means");
}
