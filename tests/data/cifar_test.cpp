// CIFAR-10 binary reader on crafted files: records decode in CHW order with the per-channel
// normalisation, several files concatenate in order, and bad sizes/labels are DataErrors that
// name the file and the numbers.
#include <filesystem>

#include "edp/data/dataset.h"
#include "test_util.h"

using namespace edp;
using namespace edp::data;
using namespace edp_test;

namespace {
constexpr size_t kRecord = 3073;

std::vector<uint8_t> cifar_records(const std::vector<uint8_t>& labels, unsigned salt) {
  std::vector<uint8_t> v;
  for (size_t r = 0; r < labels.size(); ++r) {
    v.push_back(labels[r]);
    auto px = pattern(3072, salt + static_cast<unsigned>(r));
    v.insert(v.end(), px.begin(), px.end());
  }
  return v;
}

float expected(uint8_t b, int channel) {
  const Normalize n = cifar10_normalize();
  return static_cast<float>((b / 255.0 - n.mean[channel]) / n.std[channel]);
}
}  // namespace

TEST(Cifar, GoodFilesDecodeInOrder) {
  TempDir dir;
  const std::vector<uint8_t> l1{3, 0, 9}, l2{5};
  const auto f1 = cifar_records(l1, 0), f2 = cifar_records(l2, 100);
  write_plain(dir.file("a.bin"), f1);
  write_plain(dir.file("b.bin"), f2);
  auto ds = load_cifar10_files({dir.file("a.bin"), dir.file("b.bin")}, cifar10_normalize());
  ASSERT_EQ(ds->size(), 4);
  EXPECT_EQ(ds->sample_shape(), (Shape{3, 32, 32}));
  EXPECT_EQ(ds->labels(), (std::vector<int32_t>{3, 0, 9, 5}));
  std::vector<float> buf(3072);
  for (int64_t i = 0; i < 4; ++i) {
    ds->get(i, buf.data());
    const uint8_t* rec = i < 3 ? f1.data() + i * kRecord : f2.data();
    // Byte k of the record's image is channel k / 1024 (CHW): red, green, blue planes.
    for (int k = 0; k < 3072; ++k)
      ASSERT_FLOAT_EQ(buf[k], expected(rec[1 + k], k / 1024)) << "sample " << i << " byte " << k;
  }
}

TEST(Cifar, LoadCifar10FindsTheTarballFolder) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("cifar-10-batches-bin"));
  write_plain(dir.file("cifar-10-batches-bin/test_batch.bin"), cifar_records({1, 2}, 7));
  EXPECT_EQ(load_cifar10(dir.str(), "test")->labels(), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(load_cifar10(dir.file("cifar-10-batches-bin"), "test")->size(), 2);
  EXPECT_THROW_WITH(load_cifar10(dir.str(), "train"), DataError, "data_batch_1.bin",
                    "file not found", "cifar-10-binary.tar.gz");
  EXPECT_THROW_WITH(load_cifar10(dir.str(), "dev"), Error, "\"dev\"");
}

TEST(Cifar, BadSize) {
  TempDir dir;
  auto v = cifar_records({1, 2}, 0);
  v.resize(v.size() + 5);
  write_plain(dir.file("odd.bin"), v);
  EXPECT_THROW_WITH(load_cifar10_files({dir.file("odd.bin")}, cifar10_normalize()), DataError,
                    dir.file("odd.bin"), "size 6151 bytes", "3073-byte", "2 whole records",
                    "5 bytes left over");
  write_plain(dir.file("empty.bin"), {});
  EXPECT_THROW_WITH(load_cifar10_files({dir.file("empty.bin")}, cifar10_normalize()), DataError,
                    dir.file("empty.bin"), "size 0 bytes");
}

TEST(Cifar, BadLabel) {
  TempDir dir;
  write_plain(dir.file("lab.bin"), cifar_records({4, 10, 2}, 0));
  EXPECT_THROW_WITH(load_cifar10_files({dir.file("lab.bin")}, cifar10_normalize()), DataError,
                    dir.file("lab.bin"), "label 10 in record 1", "byte offset 3073",
                    "expected 0..9");
}

TEST(Cifar, ArgumentChecks) {
  EXPECT_THROW_WITH(load_cifar10_files({}, cifar10_normalize()), Error, "no files");
  TempDir dir;
  write_plain(dir.file("a.bin"), cifar_records({1}, 0));
  EXPECT_THROW_WITH(load_cifar10_files({dir.file("a.bin")}, Normalize{{0.5f, 0.5f}, {1.f, 1.f}}),
                    Error, "2 means", "3 channel");
}
