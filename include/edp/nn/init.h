// Parameter initialisation from a seeded generator. Layers draw from the global init generator
// at construction, so a model built after manual_seed(s) is the same on every run and rank.
#pragma once
#include <cstdint>

#include "edp/core/random.h"
#include "edp/core/tensor.h"

namespace edp {
// Seeds the generator that layer constructors use for their initial weights.
void manual_seed(uint64_t seed);
}  // namespace edp

namespace edp::nn::init {

Rng& generator();

// fan_in / fan_out of a weight [out, in, ...]: in·receptive, out·receptive.
int64_t fan_in(const Tensor& w);
int64_t fan_out(const Tensor& w);

void uniform_(Tensor& t, double lo, double hi, Rng& rng = generator());
void normal_(Tensor& t, double mean, double std, Rng& rng = generator());
// He/Kaiming for ReLU networks: std = gain/√fan_in with gain √2 (normal), bound = √3·std (uniform).
void kaiming_normal_(Tensor& w, double gain = 1.4142135623730951, Rng& rng = generator());
void kaiming_uniform_(Tensor& w, double gain = 1.4142135623730951, Rng& rng = generator());
// Glorot/Xavier: bound = gain·√(6/(fan_in + fan_out)).
void xavier_uniform_(Tensor& w, double gain = 1.0, Rng& rng = generator());
void xavier_normal_(Tensor& w, double gain = 1.0, Rng& rng = generator());

}  // namespace edp::nn::init
