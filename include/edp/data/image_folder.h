// A folder of images by class — the layout of ImageNet's training set and of torchvision's
// ImageFolder:
//
//   root/cat/0001.jpg  root/cat/0002.png  root/dog/a.jpeg ...
//
// Classes are the subfolders' names, sorted (label = index); samples are each class's image files
// (.png, .jpg, .jpeg, .bmp, .gif, .tga, .pgm, .ppm, .pnm, any case) in name order. Images are
// decoded when a sample is read (stb_image: PNG, baseline and progressive JPEG, BMP, the first
// frame of a GIF, TGA, PNM), so a folder larger than memory trains, and turned into float32
// CHW features normalised like the other image sets: (byte/255 - mean[c]) / std[c].
//
//   auto train = data::load_image_folder("photos/train", {.height = 64, .width = 64, .channels = 3});
//
// Every image must have the size of the first one unless a size is given (then each is resized
// to it, stb_image_resize, box/Mitchell filtering); channels: 1 (grey) or 3 (RGB), an alpha channel
// dropped, grey turned into RGB and RGB into grey (ITU-R BT.601 luma) as asked. A file that does
// not decode or has another size is a DataError naming it, when it is read; the folder itself
// (no class, an empty class, no image at all) is checked at load.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "edp/data/dataset.h"

namespace edp::data {

struct ImageFolderOptions {
  int height = 0;    // 0: the first image's (then every image must have its size)
  int width = 0;
  int channels = 0;  // 1 or 3; 0: the first image's (1 for grey, 3 otherwise)
  Normalize norm = {};
};

class ImageFolder : public Dataset {
 public:
  ImageFolder(std::string root, ImageFolderOptions options = {});

  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  Shape sample_shape() const override { return Shape{channels_, height_, width_}; }
  int num_classes() const override { return static_cast<int>(classes_.size()); }
  int32_t get(int64_t i, float* out) const override;

  const std::vector<std::string>& classes() const { return classes_; }
  const std::string& file(int64_t i) const { return files_[static_cast<size_t>(i)]; }
  int32_t label(int64_t i) const { return labels_[static_cast<size_t>(i)]; }
  // Sample i's pixels as bytes, CHW (what get() normalises).
  std::vector<uint8_t> pixels(int64_t i) const;

 private:
  std::string root_;
  ImageFolderOptions o_;
  int64_t channels_ = 0, height_ = 0, width_ = 0;
  bool resize_ = false;
  std::vector<std::string> classes_, files_;
  std::vector<int32_t> labels_;
  std::vector<std::vector<float>> tables_;
};

std::shared_ptr<ImageFolder> load_image_folder(const std::string& root, ImageFolderOptions options = {});

// Whether this build decodes images (it was built with stb; without it load_image_folder throws).
bool have_image_decoder();

}  // namespace edp::data
