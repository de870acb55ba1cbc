// The GPT decoder of edp/nn/gpt.h: its assembly from the layers, its FLOP count and sampling.
#include "edp/nn/gpt.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "edp/core/random.h"
#include "edp/nn/init.h"

namespace edp::nn {

std::string GPTConfig::str() const {
  std::ostringstream os;
  os << layers << " layers, d " << dim << ", " << heads << " heads, context " << context << ", vocab " << vocab;
  return os.str();
}

namespace {
ModulePtr block_mlp(const GPTConfig& c) {
  auto fc1 = make<Linear>(c.dim, c.mlp_ratio * c.dim);
  auto fc2 = make<Linear>(c.mlp_ratio * c.dim, c.dim);
  init::normal_(fc1->weight().value, 0.0, 0.02);
  init::normal_(fc2->weight().value, 0.0, 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers)));
  fc1->bias()->value.zero();
  fc2->bias()->value.zero();
  auto s = make<Sequential>();
  s->add(make<LayerNorm>(c.dim), "ln");
  s->add(fc1, "fc1");
  s->add(make<GELU>(), "gelu");
  s->add(fc2, "fc2");
  return s;
}
}  // namespace

GPT::GPT(const GPTConfig& c) : c_(c) {
  EDP_CHECK(c.vocab > 0 && c.context > 0 && c.layers > 0 && c.dim > 0 && c.heads > 0 && c.dim % c.heads == 0 &&
                c.mlp_ratio > 0,
            "GPT(", c.str(), "): sizes must be positive and the width a multiple of the heads");
  auto embed = make<TokenPositionEmbedding>(c.vocab, c.context, c.dim);
  add(embed, "embed");
  for (int64_t l = 0; l < c.layers; ++l) {
    auto attn = make<Sequential>();
    attn->add(make<LayerNorm>(c.dim), "ln");
    attn->add(make<CausalSelfAttention>(c.dim, c.heads, c.layers), "attn");
    auto block = make<Sequential>();
    block->add(make<Residual>(attn), "attn");
    block->add(make<Residual>(block_mlp(c)), "mlp");
    add(block, "h." + std::to_string(l));
  }
  add(make<LayerNorm>(c.dim), "ln_f");
  add(make<TiedOutput>(embed->token_table()), "head");
}

double GPT::train_flops_per_token(int64_t T) {
  const double D = static_cast<double>(c_.dim), L = static_cast<double>(c_.layers);
  // Linear weights per layer: qkv 3D², proj D², fc1 and fc2 2·ratio·D²; the head V·D.
  const double weights = L * (4.0 + 2.0 * static_cast<double>(c_.mlp_ratio)) * D * D + static_cast<double>(c_.vocab) * D;
  // Attention: q·k and p·v, 2·2·D multiply-adds per key, (T+1)/2 keys on average under the mask,
  // times 3 for forward + backward.
  const double attn = L * 3.0 * 4.0 * D * (static_cast<double>(T) + 1.0) / 2.0;
  return 6.0 * weights + attn;
}

std::vector<int32_t> GPT::generate(std::vector<int32_t> ids, int64_t n, double temperature, int64_t top_k,
                                   uint64_t seed) {
  EDP_CHECK(!ids.empty(), "GPT::generate: the prompt is empty");
  EDP_CHECK(temperature > 0, "GPT::generate: temperature ", temperature, " must be > 0");
  const bool was_training = is_training();
  eval();
  Rng rng(seed);
  const Device dev = parameters().front()->value.device();
  for (int64_t step = 0; step < n; ++step) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(ids.size()), c_.context);
    std::vector<int32_t> window(ids.end() - T, ids.end());
    Tensor x = Tensor::from_vector<int32_t>({1, T}, window).to(dev);
    Tensor logits = forward(x).to(Device::cpu()).to(DType::F64);
    const double* last = logits.data<double>() + (T - 1) * c_.vocab;
    std::vector<int32_t> order(static_cast<size_t>(c_.vocab));
    std::iota(order.begin(), order.end(), 0);
    const int64_t k = top_k > 0 ? std::min(top_k, c_.vocab) : c_.vocab;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return last[a] > last[b]; });
    std::vector<double> p(static_cast<size_t>(k));
    double sum = 0;
    for (int64_t i = 0; i < k; ++i) {
      p[static_cast<size_t>(i)] = std::exp((last[order[static_cast<size_t>(i)]] - last[order[0]]) / temperature);
      sum += p[static_cast<size_t>(i)];
    }
    double u = rng.uniform(0.0, sum);
    int64_t pick = k - 1;
    for (int64_t i = 0; i < k; ++i) {
      u -= p[static_cast<size_t>(i)];
      if (u <= 0) {
        pick = i;
        break;
      }
    }
    ids.push_back(order[static_cast<size_t>(pick)]);
  }
  train(was_training);
  return ids;
}

}  // namespace edp::nn
