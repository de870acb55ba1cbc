// Fuzz target: the decoded-data cache reader (idx-*.u8 in EDP_DATA_CACHE). The key it must match
// is taken from the input's own header (bytes 32-47), and for inputs whose last byte is odd the
// pixels' checksum (bytes 48-51) is made right, so that the reader gets past both checks.
#include <cstring>
#include <vector>

#include "data/internal.h"
#include "edp/core/error.h"
#include "edp/core/files.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  uint64_t hash = 0, len = 0;
  if (size >= 56) {
    std::memcpy(&hash, bytes.data() + 32, 8);
    std::memcpy(&len, bytes.data() + 40, 8);
    if (bytes.back() & 1) {
      const uint32_t px = edp::files::crc32(bytes.data() + 56, size - 56);
      std::memcpy(bytes.data() + 48, &px, 4);
    }
  }
  const std::string path = edp_fuzz::as_file(bytes.data(), bytes.size());
  std::string why;
  const auto img = edp::data::detail::read_decoded_cache(path, hash, len, why);
  if (img) {
    if (img->pixels.size() != static_cast<size_t>(img->count * img->rows * img->cols)) std::abort();
    if (edp::data::detail::encode_decoded_cache(*img, hash, len) != std::string(bytes.begin(), bytes.end())) std::abort();
  } else if (why.empty()) {
    std::abort();  // a refusal always says why
  }
  return 0;
}
