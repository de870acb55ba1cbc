// Fuzz target: the IDX reader (MNIST, Fashion-MNIST images and labels, gzip or plain).
#include "edp/core/error.h"
#include "edp/data/dataset.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = edp_fuzz::as_file(data, size);
  try {
    const edp::data::IdxImages img = edp::data::read_idx_images(path);
    if (img.pixels.size() != static_cast<size_t>(img.count * img.rows * img.cols)) std::abort();
  } catch (const edp::Error&) {
  }
  try {
    (void)edp::data::read_idx_labels(path);
  } catch (const edp::Error&) {
  }
  return 0;
}
