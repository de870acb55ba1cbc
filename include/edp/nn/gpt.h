// A GPT-style decoder built from edp's layers (GPT-2's layout, pre-norm):
//
//   ids [B, T] -> TokenPositionEmbedding -> layers × ( x + attn(ln1(x)) ; x + mlp(ln2(x)) )
//              -> LayerNorm -> TiedOutput (the token table, transposed) -> logits [B, T, vocab]
//   mlp(x) = fc2(GELU(fc1(x))), fc1: D -> mlp_ratio·D
//
// Parameters are named like GPT-2's ("embed.wte", "h.0.attn.body.1.qkv.weight", ...). Weights
// start at N(0, 0.02), the residual branches' output projections at N(0, 0.02/√(2·layers)),
// biases at 0, LayerNorms at (1, 0). Train it with SequenceCrossEntropy on the next token.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "edp/nn/layers.h"

namespace edp::nn {

struct GPTConfig {
  int64_t vocab = 256;
  int64_t context = 128;  // longest sequence (the position table's rows)
  int64_t layers = 4;
  int64_t dim = 256;
  int64_t heads = 4;
  int64_t mlp_ratio = 4;
  std::string str() const;  // "4 layers, d 256, 4 heads, context 128, vocab 256"
};

class GPT : public Sequential {
 public:
  explicit GPT(const GPTConfig& c);
  std::string type_name() const override { return "GPT"; }
  const GPTConfig& config() const { return c_; }
  // Floating-point operations of one training step (forward and backward) per token: the
  // matrix products, 6 per weight of the Linears and the output projection plus the attention's
  // causal products (on average over positions), as in the PaLM/nanoGPT estimate.
  double train_flops_per_token(int64_t seq_len);

  // Continues `prompt` by `n` tokens sampled from softmax(logits / temperature) over the top_k
  // most likely tokens (top_k 0: all), with the last `context` tokens as the window. The model is
  // put in eval mode and back.
  std::vector<int32_t> generate(std::vector<int32_t> prompt, int64_t n, double temperature, int64_t top_k,
                                uint64_t seed);

 private:
  GPTConfig c_;
};

}  // namespace edp::nn
