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
