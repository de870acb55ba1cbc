// Fuzz target: users' array files (edp/data/arrays.h). The first byte picks the format of the
// rest: .npy (the header against the size, every element converted), .npz (the zip directory,
// stored and deflated entries, each entry's .npy), CSV without a header (targets: column 0) and
// with one (targets: a column named "y"); whatever loads is read sample by sample.
#include <algorithm>
#include <vector>

#include "edp/core/error.h"
#include "edp/data/arrays.h"
#include "fuzz_util.h"

namespace {
using namespace edp::data;

void read_some(const Array& a) {
  const int64_t rows = std::min<int64_t>(a.rows(), 16);
  const int64_t per = a.row_size();
  if (per > 0 && per <= (int64_t{1} << 16)) {
    std::vector<float> buf(static_cast<size_t>(rows * per));
    a.read_f32(0, rows, buf.data());
  }
  for (int64_t i = 0; i < std::min<int64_t>(rows * per, 64); ++i) (void)a.at(i);
}

void read_samples(const ArrayDataset& ds) {
  const int64_t x = ds.sample_shape().numel(), y = std::max<int64_t>(1, ds.label_shape().numel());
  if (x > (int64_t{1} << 16) || y > (int64_t{1} << 16)) return;
  std::vector<float> xs(static_cast<size_t>(x));
  std::vector<float> ys(static_cast<size_t>(y));  // float32 or int32 targets: 4 bytes each
  for (int64_t i = 0; i < std::min<int64_t>(ds.size(), 32); ++i) ds.read_sample(i, xs.data(), ys.data());
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int mode = data[0] % 4;
  const std::string path = edp_fuzz::as_file(data + 1, size - 1);
  try {
    switch (mode) {
      case 0:
        read_some(Array::open_npy(path));
        break;
      case 1:
        for (const auto& [name, a] : read_npz(path)) read_some(a);
        break;
      case 2:
        read_samples(*load_csv(path, {.targets = {"0"}, .header = false}));
        break;
      default:
        read_samples(*load_csv(path, {.targets = {"y"}}));
        break;
    }
  } catch (const edp::Error&) {
  }
  return 0;
}
