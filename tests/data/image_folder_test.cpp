// data::load_image_folder on folders written here: classes sorted by name, files by name; PNG and
// BMP pixels exact (lossless), JPEG within 4 levels of 255 on flat colours (quality 100 rounds
// the colour transform and the DCT); grey <-> RGB as asked; sizes that differ are refused naming
// the file, or resized when a size is given (a flat colour stays itself); a folder without
// classes, a class without images, a file that is not an image: DataErrors naming them.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "edp/core/error.h"
#include "edp/data/image_folder.h"
#include "edp/data/loader.h"
#include "test_util.h"

#if EDP_TEST_STB
#include <stb_image_write.h>
#endif

namespace {
using namespace edp;
using namespace edp::data;
using edp_test::TempDir;
namespace fs = std::filesystem;

#if EDP_TEST_STB
// A w x h image of `c` channels whose byte at (y, x, ch) is f(y, x, ch).
template <typename F>
std::vector<uint8_t> image(int w, int h, int c, F f) {
  std::vector<uint8_t> v(static_cast<size_t>(w * h * c));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int ch = 0; ch < c; ++ch) v[static_cast<size_t>((y * w + x) * c + ch)] = f(y, x, ch);
  return v;
}
void png(const std::string& p, int w, int h, int c, const std::vector<uint8_t>& px) {
  fs::create_directories(fs::path(p).parent_path());
  ASSERT_TRUE(stbi_write_png(p.c_str(), w, h, c, px.data(), w * c));
}
void bmp(const std::string& p, int w, int h, int c, const std::vector<uint8_t>& px) {
  fs::create_directories(fs::path(p).parent_path());
  ASSERT_TRUE(stbi_write_bmp(p.c_str(), w, h, c, px.data()));
}
void jpg(const std::string& p, int w, int h, int c, const std::vector<uint8_t>& px) {
  fs::create_directories(fs::path(p).parent_path());
  ASSERT_TRUE(stbi_write_jpg(p.c_str(), w, h, c, px.data(), 100));
}
uint8_t pattern(int y, int x, int ch) { return static_cast<uint8_t>((y * 37 + x * 11 + ch * 101) % 256); }
#endif

TEST(ImageFolder, ClassesFilesAndPixels) {
#if !EDP_TEST_STB
  GTEST_SKIP() << "this build has no stb (apt-get install libstb-dev): load_image_folder throws";
#else
  TempDir d;
  const std::string root = d.file("train");
  const auto rgb = image(5, 4, 3, pattern);
  png(root + "/zebra/b.png", 5, 4, 3, rgb);
  png(root + "/zebra/a.png", 5, 4, 3, image(5, 4, 3, [](int, int, int) { return uint8_t{7}; }));
  bmp(root + "/ant/x.BMP", 5, 4, 3, rgb);
  edp_test::write_plain(root + "/ant/notes.txt", {'h', 'i'});  // not an image: not listed
  fs::create_directories(root + "/.cache/z");                   // hidden: not a class
  auto ds = load_image_folder(root);
  EXPECT_EQ(ds->classes(), (std::vector<std::string>{"ant", "zebra"}));
  ASSERT_EQ(ds->size(), 3);
  EXPECT_EQ(ds->sample_shape(), (Shape{3, 4, 5}));
  EXPECT_EQ(ds->num_classes(), 2);
  EXPECT_EQ(fs::path(ds->file(1)).filename(), "a.png");
  std::vector<float> x(3 * 4 * 5);
  for (int64_t i : {0, 2}) {  // the BMP and the patterned PNG: the same pixels, CHW, byte/255
    EXPECT_EQ(ds->get(i, x.data()), i == 0 ? 0 : 1);
    for (int ch = 0; ch < 3; ++ch)
      for (int y = 0; y < 4; ++y)
        for (int xx = 0; xx < 5; ++xx)
          ASSERT_EQ(x[static_cast<size_t>((ch * 4 + y) * 5 + xx)], static_cast<float>(pattern(y, xx, ch)) / 255.0f)
              << "sample " << i << " at c" << ch << " y" << y << " x" << xx;
  }
  // Through the DataLoader, normalised.
  auto norm = load_image_folder(root, {.norm = {.mean = {0.5f}, .std = {0.5f}}});
  DataLoader loader(norm, std::make_shared<SequentialSampler>(norm->size()), {.batch_size = 2});
  loader.start_epoch(0);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  EXPECT_EQ(b.x.shape(), (Shape{2, 3, 4, 5}));
  EXPECT_FLOAT_EQ(b.x.data<float>()[3 * 4 * 5], (7.0f / 255.0f - 0.5f) / 0.5f);  // a.png, flat 7
#endif
}

TEST(ImageFolder, ChannelsSizesAndJpeg) {
#if !EDP_TEST_STB
  GTEST_SKIP() << "this build has no stb (apt-get install libstb-dev): load_image_folder throws";
#else
  TempDir d;
  const std::string root = d.file("set");
  png(root + "/grey/g.png", 6, 6, 1, image(6, 6, 1, pattern));
  jpg(root + "/jpeg/flat.jpg", 16, 8, 3, image(16, 8, 3, [](int, int, int ch) { return static_cast<uint8_t>(60 + 70 * ch); }));
  // The first image is grey, so by default every sample is grey and the JPEG's size differs.
  auto grey = load_image_folder(root);
  EXPECT_EQ(grey->sample_shape(), (Shape{1, 6, 6}));
  std::vector<float> x(3 * 16 * 8);
  EXPECT_THROW_WITH(grey->get(1, x.data()), DataError, "flat.jpg", "16x8", "g.png", "height and width");
  // Resized to 8x8, three channels: grey replicated; the flat JPEG keeps its colour.
  auto rgb = load_image_folder(root, {.height = 8, .width = 8, .channels = 3});
  EXPECT_EQ(rgb->sample_shape(), (Shape{3, 8, 8}));
  const auto g = rgb->pixels(1);  // sorted classes: grey (0), jpeg (1)
  EXPECT_EQ(rgb->label(1), 1);
  for (int ch = 0; ch < 3; ++ch)
    for (int p = 0; p < 64; ++p)
      ASSERT_NEAR(g[static_cast<size_t>(ch * 64 + p)], 60 + 70 * ch, 4) << "channel " << ch << " pixel " << p;
  const auto r = rgb->pixels(0);
  for (int p = 0; p < 64; ++p) {
    EXPECT_EQ(r[static_cast<size_t>(p)], r[static_cast<size_t>(64 + p)]);
    EXPECT_EQ(r[static_cast<size_t>(p)], r[static_cast<size_t>(128 + p)]);
  }
#endif
}

TEST(ImageFolder, BadFoldersAndFilesAreNamed) {
  TempDir d;
  EXPECT_THROW_WITH(load_image_folder(d.file("nothing")), DataError, "nothing", "no such directory");
  edp_test::write_plain(d.file("file"), {'x'});
  EXPECT_THROW_WITH(load_image_folder(d.file("file")), DataError, "not a directory");
  fs::create_directories(d.file("empty"));
  EXPECT_THROW_WITH(load_image_folder(d.file("empty")), DataError, "no class subfolder");
  fs::create_directories(d.file("noimg/cls"));
  edp_test::write_plain(d.file("noimg/cls/readme.txt"), {'x'});
  EXPECT_THROW_WITH(load_image_folder(d.file("noimg")), DataError, "class 'cls'", "no image file");
  EXPECT_THROW(load_image_folder(d.file("noimg"), {.channels = 2}), Error);
#if EDP_TEST_STB
  fs::create_directories(d.file("bad/c"));
  edp_test::write_plain(d.file("bad/c/broken.png"), {0x89, 'P', 'N', 'G', 0, 0, 0, 0});
  EXPECT_THROW_WITH(load_image_folder(d.file("bad")), DataError, "broken.png", "not an image");
#endif
}

}  // namespace
