// A learnable synthetic classification set for tests, benchmarks and examples that must not
// depend on files: class prototypes ~ N(0,1), sample = prototype[label] + noise * N(0,1).
// Prototypes and samples come from two streams derived from the seed, so the prototypes do not
// depend on n and make_synthetic(n) is a prefix of make_synthetic(m > n) with the same seed.
#include "edp/core/random.h"
#include "edp/data/dataset.h"

namespace edp::data {

using ::edp::detail::concat;

std::shared_ptr<TensorDataset> make_synthetic(int64_t n, Shape sample_shape, int num_classes,
                                              uint64_t seed, float noise) {
  if (n < 0) throw Error(concat("make_synthetic: n must be >= 0, got ", n));
  if (num_classes < 1)
    throw Error(concat("make_synthetic: num_classes must be >= 1, got ", num_classes));
  if (!(noise >= 0.0f)) throw Error(concat("make_synthetic: noise must be >= 0, got ", noise));
  for (int64_t d : sample_shape.dims())
    if (d < 1)
      throw ShapeError(concat("make_synthetic: sample shape ", sample_shape.str(),
                              " has a dimension < 1"));
  const int64_t row = sample_shape.numel();

  Rng proto_rng(derive_seed(seed, 0x70726F746FULL));  // "proto"
  std::vector<float> protos(static_cast<size_t>(num_classes * row));
  for (float& p : protos) p = static_cast<float>(proto_rng.normal());

  std::vector<int64_t> dims{n};
  dims.insert(dims.end(), sample_shape.dims().begin(), sample_shape.dims().end());
  Tensor x(Shape(dims), DType::F32);
  std::vector<int32_t> y(static_cast<size_t>(n));
  float* px = x.data<float>();
  Rng rng(derive_seed(seed, 0x73616D706C65ULL));  // "sample"
  for (int64_t i = 0; i < n; ++i) {
    const int32_t label = static_cast<int32_t>(rng.below(static_cast<uint64_t>(num_classes)));
    y[static_cast<size_t>(i)] = label;
    const float* p = protos.data() + label * row;
    float* out = px + i * row;
    for (int64_t k = 0; k < row; ++k)
      out[k] = p[k] + noise * static_cast<float>(rng.normal());
  }
  return std::make_shared<TensorDataset>(std::move(x), std::move(y), num_classes);
}

}  // namespace edp::data
