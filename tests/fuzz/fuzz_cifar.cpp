// Fuzz target: the CIFAR-10 binary reader (3073-byte records: a label, then 3 planes of 32x32).
#include "edp/core/error.h"
#include "edp/data/dataset.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = edp_fuzz::as_file(data, size);
  try {
    const auto ds = edp::data::load_cifar10_files({path}, edp::data::cifar10_normalize());
    if (ds->size() * 3073 != static_cast<int64_t>(size)) std::abort();
    float x[3 * 32 * 32];
    for (int64_t i = 0; i < ds->size(); ++i)
      if (const int32_t y = ds->get(i, x); y < 0 || y >= 10) std::abort();
  } catch (const edp::Error&) {
  }
  return 0;
}
