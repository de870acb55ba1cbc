// A folder of images by class (edp/data/image_folder.h): the listing at load, the decoding
// (stb_image) and resizing (stb_image_resize) when a sample is read.
#include "edp/data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "edp/config.h"
#include "edp/core/error.h"
#include "edp/core/files.h"
#include "internal.h"

#ifndef EDP_HAVE_STB  // set by the build where stb was found
#define EDP_HAVE_STB 0
#endif
#if EDP_HAVE_STB
#include <stb_image.h>
#include <stb_image_resize.h>
#endif

namespace edp::data {

namespace fs = std::filesystem;

namespace {
constexpr size_t kMaxImageBytes = size_t{1} << 30;

bool is_image(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* e : {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tga", ".pgm", ".ppm", ".pnm"})
    if (ext == e) return true;
  return false;
}

bool hidden(const fs::path& p) { return !p.filename().empty() && p.filename().string()[0] == '.'; }

struct Decoded {
  std::vector<uint8_t> hwc;  // height x width x channels
  int height = 0, width = 0, channels = 0, file_channels = 0;
};

// Decodes `path` into `channels` channels (0: 1 for grey files, 3 otherwise).
Decoded decode(const std::string& path, int channels) {
#if EDP_HAVE_STB
  const std::string bytes = files::read_file(path, kMaxImageBytes);
  int w = 0, h = 0, comp = 0;
  const auto* src = reinterpret_cast<const stbi_uc*>(bytes.data());
  const int len = static_cast<int>(bytes.size());
  if (!stbi_info_from_memory(src, len, &w, &h, &comp))
    throw DataError(path + ": not an image stb_image can decode (" + stbi_failure_reason() + ")");
  const int want = channels > 0 ? channels : (comp <= 2 ? 1 : 3);
  stbi_uc* px = stbi_load_from_memory(src, len, &w, &h, &comp, want);
  if (!px) throw DataError(path + ": the image does not decode (" + stbi_failure_reason() + ")");
  Decoded d;
  d.height = h, d.width = w, d.channels = want, d.file_channels = comp;
  d.hwc.assign(px, px + static_cast<size_t>(w) * static_cast<size_t>(h) * static_cast<size_t>(want));
  stbi_image_free(px);
  return d;
#else
  (void)channels;
  throw Error(path + ": this edp was built without an image decoder (stb: apt-get install libstb-dev, then "
              "configure again)");
#endif
}
}  // namespace

bool have_image_decoder() { return EDP_HAVE_STB != 0; }

ImageFolder::ImageFolder(std::string root, ImageFolderOptions options) : root_(std::move(root)), o_(std::move(options)) {
  EDP_CHECK(o_.channels == 0 || o_.channels == 1 || o_.channels == 3, "load_image_folder: channels must be 0, 1 or 3, got ",
            o_.channels);
  EDP_CHECK(o_.height >= 0 && o_.width >= 0 && (o_.height > 0) == (o_.width > 0),
            "load_image_folder: give height and width together (both > 0), or neither");
  std::error_code ec;
  if (!fs::is_directory(root_, ec))
    throw DataError(root_ + ": " + (fs::exists(root_, ec) ? "not a directory" : "no such directory") +
                    "; expected a folder with one subfolder of images per class");
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root_))
    if (!hidden(e.path()) && e.is_directory()) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  if (dirs.empty()) throw DataError(root_ + ": no class subfolder; expected root/<class>/<image files>");
  for (const fs::path& d : dirs) {
    std::vector<std::string> images;
    for (const auto& e : fs::directory_iterator(d))
      if (!hidden(e.path()) && is_image(e.path()) && e.is_regular_file()) images.push_back(e.path().string());
    if (images.empty())
      throw DataError(d.string() + ": class '" + d.filename().string() +
                      "' holds no image file (.png, .jpg, .jpeg, .bmp, .gif, .tga, .pgm, .ppm, .pnm)");
    std::sort(images.begin(), images.end());
    for (auto& f : images) {
      files_.push_back(std::move(f));
      labels_.push_back(static_cast<int32_t>(classes_.size()));
    }
    classes_.push_back(d.filename().string());
  }
  const Decoded first = decode(files_.front(), o_.channels);
  channels_ = first.channels;
  resize_ = o_.height > 0;
  height_ = resize_ ? o_.height : first.height;
  width_ = resize_ ? o_.width : first.width;
  tables_ = detail::normalize_tables(o_.norm, channels_, "load_image_folder");
}

std::vector<uint8_t> ImageFolder::pixels(int64_t i) const {
  EDP_CHECK(i >= 0 && i < size(), "ImageFolder: sample ", i, " out of range [0, ", size(), ")");
  const std::string& path = files_[static_cast<size_t>(i)];
  Decoded d = decode(path, static_cast<int>(channels_));
  std::vector<uint8_t> hwc;
  if (d.height == height_ && d.width == width_) {
    hwc = std::move(d.hwc);
  } else if (resize_) {
#if EDP_HAVE_STB
    hwc.resize(static_cast<size_t>(height_ * width_ * channels_));
    if (!stbir_resize_uint8(d.hwc.data(), d.width, d.height, 0, hwc.data(), static_cast<int>(width_),
                            static_cast<int>(height_), 0, static_cast<int>(channels_)))
      throw DataError(path + ": resizing " + std::to_string(d.width) + "x" + std::to_string(d.height) + " failed");
#endif
  } else {
    throw DataError(path + ": " + std::to_string(d.width) + "x" + std::to_string(d.height) + " pixels, but " +
                    files_.front() + " (the first image) has " + std::to_string(width_) + "x" + std::to_string(height_) +
                    ": give ImageFolderOptions height and width to resize every image to one size");
  }
  std::vector<uint8_t> chw(hwc.size());
  const int64_t plane = height_ * width_;
  for (int64_t p = 0; p < plane; ++p)
    for (int64_t c = 0; c < channels_; ++c) chw[static_cast<size_t>(c * plane + p)] = hwc[static_cast<size_t>(p * channels_ + c)];
  return chw;
}

int32_t ImageFolder::get(int64_t i, float* out) const {
  const std::vector<uint8_t> chw = pixels(i);
  detail::bytes_to_features(chw.data(), 1, channels_, height_ * width_, tables_, out);
  return labels_[static_cast<size_t>(i)];
}

std::shared_ptr<ImageFolder> load_image_folder(const std::string& root, ImageFolderOptions options) {
  return std::make_shared<ImageFolder>(root, std::move(options));
}

}  // namespace edp::data
