// IDX reader on crafted files: valid plain and gzip files round-trip; every malformation gives
// a DataError naming the file and the expected and found values, never a crash; decoded copies
// in EDP_DATA_CACHE, checksummed and keyed by the source's content.
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fcntl.h>
#include <sys/stat.h>
#include <zlib.h>

#include "edp/data/dataset.h"
#include "support/no_hang.h"
#include "test_util.h"

using namespace edp;
using namespace edp::data;
using namespace edp_test;

namespace {
constexpr uint32_t kN = 5, kRows = 3, kCols = 4;
const std::vector<uint8_t> kLabels{0, 9, 3, 3, 7};
}  // namespace

TEST(Idx, PlainAndGzipImagesRoundTrip) {
  TempDir dir;
  const auto px = pattern(kN * kRows * kCols);
  write_plain(dir.file("img"), idx_images(kN, kRows, kCols, px));
  write_gz(dir.file("img.gz"), idx_images(kN, kRows, kCols, px));
  for (const char* name : {"img", "img.gz"}) {
    IdxImages im = read_idx_images(dir.file(name));
    EXPECT_EQ(im.count, kN) << name;
    EXPECT_EQ(im.rows, kRows) << name;
    EXPECT_EQ(im.cols, kCols) << name;
    EXPECT_EQ(im.pixels, px) << name;
  }
  // The .gz really is compressed, so both of zlib's paths (inflate, transparent) ran.
  EXPECT_EQ(read_all(dir.file("img.gz"))[0], 0x1f);
  EXPECT_EQ(read_all(dir.file("img"))[0], 0x00);
}

TEST(Idx, PlainAndGzipLabelsRoundTrip) {
  TempDir dir;
  write_plain(dir.file("lab"), idx_labels(kN, kLabels));
  write_gz(dir.file("lab.gz"), idx_labels(kN, kLabels));
  EXPECT_EQ(read_idx_labels(dir.file("lab")), kLabels);
  EXPECT_EQ(read_idx_labels(dir.file("lab.gz")), kLabels);
}

TEST(Idx, EmptySetIsValid) {
  TempDir dir;
  write_plain(dir.file("img"), idx_images(0, 28, 28, {}));
  write_plain(dir.file("lab"), idx_labels(0, {}));
  auto ds = load_idx(dir.file("img"), dir.file("lab"), Normalize{});
  EXPECT_EQ(ds->size(), 0);
  EXPECT_EQ(ds->sample_shape(), (Shape{1, 28, 28}));
}

// EDP_DATA_CACHE: a gzip image file is decoded once into the directory; later loads read the copy
// and give the same bytes; a changed source is decoded again; a damaged copy is ignored; without
// the directory nothing is written.
// The paths of the entries of `dir` (the decoded copies in a data cache).
std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().string());
  return out;
}

TEST(Idx, DecodedCopiesInTheDataCache) {
  TempDir dir, cache;
  std::vector<uint8_t> px(6 * 12), lab(6, 1);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 7);
  write_gz(dir.file("img.gz"), idx_images(6, 3, 4, px));
  write_gz(dir.file("lab.gz"), idx_labels(6, lab));
  setenv("EDP_DATA_CACHE", cache.str().c_str(), 1);
  auto copies = [&] { return files_in(cache.str()); };
  const auto first = load_idx(dir.file("img.gz"), dir.file("lab.gz"), Normalize{});
  ASSERT_EQ(copies().size(), 1u);
  const auto again = load_idx(dir.file("img.gz"), dir.file("lab.gz"), Normalize{});
  EXPECT_EQ(std::memcmp(first->features().raw(), px.data(), px.size()), 0);
  EXPECT_EQ(std::memcmp(again->features().raw(), px.data(), px.size()), 0);
  std::ofstream(copies()[0], std::ios::trunc) << "garbage";  // damaged: ignored, decoded again
  const auto damaged = load_idx(dir.file("img.gz"), dir.file("lab.gz"), Normalize{});
  EXPECT_EQ(std::memcmp(damaged->features().raw(), px.data(), px.size()), 0);
  for (auto& p : px) p = static_cast<uint8_t>(255 - p);  // the source changes: a new copy
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  write_gz(dir.file("img.gz"), idx_images(6, 3, 4, px));
  const auto changed = load_idx(dir.file("img.gz"), dir.file("lab.gz"), Normalize{});
  EXPECT_EQ(std::memcmp(changed->features().raw(), px.data(), px.size()), 0);
  EXPECT_EQ(copies().size(), 2u);
  setenv("EDP_DATA_CACHE", (cache.str() + "/absent").c_str(), 1);  // no such directory: no copy
  load_idx(dir.file("img.gz"), dir.file("lab.gz"), Normalize{});
  EXPECT_FALSE(std::filesystem::exists(cache.str() + "/absent"));
  unsetenv("EDP_DATA_CACHE");
}

// A decoded copy is never trained on unless it is the source's, whole and unchanged: a copy with
// damaged pixels (size and header intact) is decoded again with a warning naming the checksum, and
// a source replaced by another of the same size with its modification time kept (the key once was
// path, size and mtime) gets its own copy, keyed by its content. (Stored gzip files of one length
// also have one CRC-32 — a gzip file ends with the CRC-32 of its data — so the key is not a CRC.)
TEST(Idx, DamagedOrStaleCopiesAreNeverUsed) {
  TempDir dir, cache;
  std::vector<uint8_t> px(6 * 12), lab(6, 1);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 7);
  // Stored without compression, so that other pixels give a file of exactly the same size.
  auto write_stored = [&](const std::vector<uint8_t>& pixels) {
    const std::vector<uint8_t> bytes = idx_images(6, 3, 4, pixels);
    gzFile f = gzopen(dir.file("img.gz").c_str(), "wb0");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
    gzclose(f);
  };
  write_stored(px);
  write_gz(dir.file("lab.gz"), idx_labels(6, lab));
  setenv("EDP_DATA_CACHE", cache.str().c_str(), 1);
  auto copies = [&] { return files_in(cache.str()); };
  load_idx(dir.file("img.gz"), dir.file("lab.gz"), Normalize{});
  ASSERT_EQ(copies().size(), 1u);
  // Damage one pixel of the copy in place: same size, same header.
  {
    std::fstream c(copies()[0], std::ios::in | std::ios::out | std::ios::binary);
    c.seekp(-3, std::ios::end);
    c.put('\x5a');
  }
  testing::internal::CaptureStderr();
  const auto damaged = load_idx(dir.file("img.gz"), dir.file("lab.gz"), Normalize{});
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::memcmp(damaged->features().raw(), px.data(), px.size()), 0) << "the damaged copy was used";
  EXPECT_NE(said.find("is not used: checksum mismatch"), std::string::npos) << said;
  EXPECT_NE(said.find("decoding the source again"), std::string::npos) << said;
  // Replace the source by other pixels: same size, same modification time.
  struct stat before {};
  ASSERT_EQ(::stat(dir.file("img.gz").c_str(), &before), 0);
  std::vector<uint8_t> other = px;
  for (auto& p : other) p = static_cast<uint8_t>(p ^ 0x55);
  write_stored(other);
  const timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, dir.file("img.gz").c_str(), times, 0), 0);
  struct stat after {};
  ASSERT_EQ(::stat(dir.file("img.gz").c_str(), &after), 0);
  ASSERT_EQ(after.st_size, before.st_size);
  const auto replaced = load_idx(dir.file("img.gz"), dir.file("lab.gz"), Normalize{});
  EXPECT_EQ(std::memcmp(replaced->features().raw(), other.data(), other.size()), 0) << "a stale copy was used";
  EXPECT_EQ(copies().size(), 2u);
  unsetenv("EDP_DATA_CACHE");
}

// An IDX "file" that is a FIFO is refused at once, naming it (opening it would block).
TEST(Idx, AFifoIsRefusedNotWaitedOn) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("img.gz").c_str(), 0600), 0);
  const ChildResult r = run_in_child([&] {
    try {
      read_idx_images(dir.file("img.gz"));
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  });
  ASSERT_TRUE(r.finished) << "reading a FIFO blocked";
  EXPECT_NE(r.output.find(dir.file("img.gz") + ": a FIFO, not a regular file"), std::string::npos) << r.output;
}

TEST(Idx, LoadIdxNormalisesEveryByteValue) {
  TempDir dir;
  // 256 images of 1x1 holding every byte value once.
  std::vector<uint8_t> px(256), lab(256);
  for (int b = 0; b < 256; ++b) px[b] = static_cast<uint8_t>(b), lab[b] = static_cast<uint8_t>(b % 10);
  write_gz(dir.file("img.gz"), idx_images(256, 1, 1, px));
  write_gz(dir.file("lab.gz"), idx_labels(256, lab));
  auto ds = load_idx(dir.file("img.gz"), dir.file("lab.gz"), Normalize{{0.25f}, {0.5f}});
  EXPECT_EQ(ds->features().shape(), (Shape{256, 1, 1, 1}));
  for (int b = 0; b < 256; ++b) {
    float v;
    EXPECT_EQ(ds->get(b, &v), b % 10);
    // The value is the float nearest to the exact formula (computed in double): 4 ulp slack.
    EXPECT_FLOAT_EQ(v, static_cast<float>((b / 255.0 - 0.25f) / 0.5f)) << "byte " << b;
  }
}

TEST(Idx, WrongMagic) {
  TempDir dir;
  write_gz(dir.file("train-images-idx3-ubyte.gz"), idx_labels(kN, kLabels));  // a labels file
  EXPECT_THROW_WITH(read_idx_images(dir.file("train-images-idx3-ubyte.gz")), DataError,
                    dir.file("train-images-idx3-ubyte.gz"), "bad magic 0x00000801",
                    "expected 0x00000803", "labels file");
  write_plain(dir.file("lab"), idx_images(kN, kRows, kCols, pattern(60)));  // an images file
  EXPECT_THROW_WITH(read_idx_labels(dir.file("lab")), DataError, dir.file("lab"),
                    "bad magic 0x00000803", "expected 0x00000801");
  write_plain(dir.file("junk"), {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd', '!',
                                 '!', '!', '!', '!', '!'});
  EXPECT_THROW_WITH(read_idx_images(dir.file("junk")), DataError, dir.file("junk"),
                    "bad magic 0x68656c6c", "not an IDX file");
}

TEST(Idx, TruncatedHeader) {
  TempDir dir;
  auto full = idx_images(kN, kRows, kCols, pattern(60));
  write_plain(dir.file("img7"), std::vector<uint8_t>(full.begin(), full.begin() + 7));
  EXPECT_THROW_WITH(read_idx_images(dir.file("img7")), DataError, dir.file("img7"),
                    "truncated header", "expected 16 header bytes", "file ends after 7");
  write_gz(dir.file("img2.gz"), std::vector<uint8_t>(full.begin(), full.begin() + 2));
  EXPECT_THROW_WITH(read_idx_images(dir.file("img2.gz")), DataError, dir.file("img2.gz"),
                    "expected 16 header bytes", "file ends after 2");
  write_plain(dir.file("empty"), {});
  EXPECT_THROW_WITH(read_idx_labels(dir.file("empty")), DataError, dir.file("empty"),
                    "expected 8 header bytes", "file ends after 0");
}

TEST(Idx, TruncatedData) {
  TempDir dir;
  write_plain(dir.file("img"), idx_images(kN, kRows, kCols, pattern(50)));
  EXPECT_THROW_WITH(read_idx_images(dir.file("img")), DataError, dir.file("img"),
                    "expected 60 pixel bytes after the header", "5 images of 3x4",
                    "file ends after 50");
  write_gz(dir.file("lab.gz"), idx_labels(kN, {1, 2}));
  EXPECT_THROW_WITH(read_idx_labels(dir.file("lab.gz")), DataError, dir.file("lab.gz"),
                    "expected 5 label bytes", "file ends after 2");
}

TEST(Idx, CutGzipStream) {
  TempDir dir;
  // Incompressible-ish content so that cutting the .gz in half cuts the pixel data.
  std::vector<uint8_t> px(40000);
  uint32_t s = 12345;
  for (auto& b : px) s = s * 1664525u + 1013904223u, b = static_cast<uint8_t>(s >> 24);
  write_gz(dir.file("full.gz"), idx_images(100, 20, 20, px));
  auto gz = read_all(dir.file("full.gz"));
  write_plain(dir.file("cut.gz"), std::vector<uint8_t>(gz.begin(), gz.begin() + gz.size() / 2));
  EXPECT_THROW_WITH(read_idx_images(dir.file("cut.gz")), DataError, dir.file("cut.gz"),
                    "expected 40000 pixel bytes", "cut short");
}

TEST(Idx, DamagedGzipStream) {
  TempDir dir;
  write_gz(dir.file("ok.gz"), idx_images(kN, kRows, kCols, pattern(60)));
  auto gz = read_all(dir.file("ok.gz"));
  // Keep the 10-byte gzip header, overwrite the deflate data with invalid block types.
  for (size_t i = 10; i + 8 < gz.size(); ++i) gz[i] = 0xff;
  write_plain(dir.file("bad.gz"), gz);
  EXPECT_THROW_WITH(read_idx_images(dir.file("bad.gz")), DataError, dir.file("bad.gz"));
}

TEST(Idx, ExtraDataAfterPayload) {
  TempDir dir;
  write_plain(dir.file("img"), idx_images(kN, kRows, kCols, pattern(61)));
  EXPECT_THROW_WITH(read_idx_images(dir.file("img")), DataError, dir.file("img"),
                    "continues after the 60 pixel bytes");
}

TEST(Idx, AbsurdHeaderSizes) {
  TempDir dir;
  write_plain(dir.file("zero"), idx_images(5, 0, 28, {}));
  EXPECT_THROW_WITH(read_idx_images(dir.file("zero")), DataError, dir.file("zero"),
                    "implausible image size 0x28");
  write_plain(dir.file("wide"), idx_images(1, 28, 0xFFFFFFFFu, {}));
  EXPECT_THROW_WITH(read_idx_images(dir.file("wide")), DataError, dir.file("wide"),
                    "implausible image size 28x4294967295");
  // 4e9 images of 28x28 would be 3 TB: refused before any allocation.
  write_plain(dir.file("many"), idx_images(4000000000u, 28, 28, pattern(100)));
  EXPECT_THROW_WITH(read_idx_images(dir.file("many")), DataError, dir.file("many"),
                    "4000000000 images of 28x28", "probably corrupt");
  // 40M images (31 GB) passes the size guard but the data is read incrementally: the error
  // comes at end of file, after a bounded first buffer, not from a 31 GB allocation.
  write_plain(dir.file("lying"), idx_images(40000000u, 28, 28, pattern(100)));
  EXPECT_THROW_WITH(read_idx_images(dir.file("lying")), DataError, dir.file("lying"),
                    "expected 31360000000 pixel bytes", "file ends after 100");
}

TEST(Idx, CountMismatchNamesBothFiles) {
  TempDir dir;
  write_plain(dir.file("img"), idx_images(kN, kRows, kCols, pattern(60)));
  write_plain(dir.file("lab"), idx_labels(4, {0, 1, 2, 3}));
  EXPECT_THROW_WITH(load_idx(dir.file("img"), dir.file("lab"), Normalize{}), DataError,
                    dir.file("img") + " holds 5 images", dir.file("lab") + " holds 4 labels");
}

TEST(Idx, LabelOutOfRange) {
  TempDir dir;
  write_plain(dir.file("img"), idx_images(kN, kRows, kCols, pattern(60)));
  write_plain(dir.file("lab"), idx_labels(kN, {0, 1, 2, 10, 4}));
  EXPECT_THROW_WITH(load_idx(dir.file("img"), dir.file("lab"), Normalize{}, 10), DataError,
                    dir.file("lab"), "label 10 of sample 3", "byte offset 11", "expected 0..9");
  // The same file is fine for a caller that says there are 11 classes.
  EXPECT_EQ(load_idx(dir.file("img"), dir.file("lab"), Normalize{}, 11)->size(), 5);
}

TEST(Idx, MissingFile) {
  TempDir dir;
  EXPECT_THROW_WITH(read_idx_images(dir.file("nope.gz")), DataError, dir.file("nope.gz"),
                    "file not found");
  const std::string debian = std::string(kFashionMnistDir) + "/no-such-file-idx3-ubyte.gz";
  EXPECT_THROW_WITH(read_idx_images(debian), DataError, debian, "file not found",
                    "apt-get install dataset-fashion-mnist");
  EXPECT_THROW_WITH(read_idx_labels(dir.str()), DataError, dir.str(), "is a directory");
}

TEST(Idx, FashionMnistLayoutFromPlainFiles) {
  TempDir dir;
  // Train without .gz, test with .gz: each file is looked up both ways.
  write_plain(dir.file("train-images-idx3-ubyte"), idx_images(kN, kRows, kCols, pattern(60)));
  write_plain(dir.file("train-labels-idx1-ubyte"), idx_labels(kN, kLabels));
  write_gz(dir.file("t10k-images-idx3-ubyte.gz"), idx_images(2, kRows, kCols, pattern(24, 3)));
  write_gz(dir.file("t10k-labels-idx1-ubyte.gz"), idx_labels(2, {4, 5}));
  auto train = load_fashion_mnist(dir.str(), "train");
  auto test = load_fashion_mnist(dir.str(), "test");
  EXPECT_EQ(train->size(), 5);
  EXPECT_EQ(test->size(), 2);
  EXPECT_EQ(train->sample_shape(), (Shape{1, 3, 4}));
  EXPECT_EQ(test->labels(), (std::vector<int32_t>{4, 5}));
  const uint8_t first = pattern(60)[0];
  std::vector<float> sample(12);
  train->get(0, sample.data());
  EXPECT_FLOAT_EQ(sample[0], static_cast<float>((first / 255.0 - 0.2860f) / 0.3530f));
  EXPECT_EQ(train->features().dtype(), DType::U8);  // kept as bytes, converted per sample
  EXPECT_THROW_WITH(load_fashion_mnist(dir.str(), "valid"), Error, "\"valid\"", "train");
  const std::string nodir = dir.file("missing");
  EXPECT_THROW_WITH(load_fashion_mnist(nodir, "train"), DataError,
                    nodir + "/train-images-idx3-ubyte.gz", "does not exist");
}

TEST(Idx, NormalizeMustFitTheChannels) {
  TempDir dir;
  write_plain(dir.file("img"), idx_images(kN, kRows, kCols, pattern(60)));
  write_plain(dir.file("lab"), idx_labels(kN, kLabels));
  EXPECT_THROW_WITH(load_idx(dir.file("img"), dir.file("lab"), Normalize{{0.1f, 0.2f}, {1.f, 1.f}}),
                    Error, "2 means", "1 channel");
  EXPECT_THROW_WITH(load_idx(dir.file("img"), dir.file("lab"), Normalize{{0.1f}, {0.0f}}), Error,
                    "std must be positive");
}
