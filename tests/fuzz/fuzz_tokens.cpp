// Fuzz target: token files (the header, every id against the vocabulary) and the windows over one.
#include <memory>
#include <vector>

#include "edp/core/error.h"
#include "edp/data/tokens.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = edp_fuzz::as_file(data, size);
  try {
    auto tokens = std::make_shared<const edp::data::TokenFile>(path);
    for (int64_t i = 0; i < tokens->size(); ++i)
      if (const int32_t v = tokens->at(i); v < 0 || v >= tokens->vocab()) std::abort();  // checked at load
    const edp::data::TokenWindows w(tokens, 4);
    std::vector<int32_t> x(4), y(4);
    for (int64_t i = 0; i < std::min<int64_t>(w.size(), 64); ++i) w.get_sample(i, x.data(), y.data());
  } catch (const edp::Error&) {
  }
  return 0;
}
