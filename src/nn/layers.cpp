// Layer implementations: thin wrappers over edp::ops that cache forward state and honour the
// gradient contract of module.h (parameter grads +=, activation grads =, mark_grad_ready()).
#include "edp/nn/layers.h"

#include <algorithm>
#include <cmath>

#include "edp/core/random.h"
#include "edp/nn/init.h"
#include "edp/core/timeline.h"

namespace edp::nn {

namespace {
// Weights: Kaiming-uniform with gain 1 (std 1/√fan_in); biases: U(±1/√fan_in) as in PyTorch.
// The ReLU gain √2 made the example CNN's loss spike above ln 10 in its first steps with SGD
// (Nesterov, lr 0.05-0.1), most visibly at 2 ranks; gain 1 trains smoothly from step one.
void init_weight_bias(Tensor& w, Tensor* b) {
  init::kaiming_uniform_(w, 1.0);
  if (b) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::fan_in(w)));
    init::uniform_(*b, -bound, bound);
  }
}
void require_forward(const Tensor& cached, const char* layer) {
  EDP_CHECK(cached.defined(), layer, ".backward called without a preceding forward in training");
}
}  // namespace

// ---- Linear ----------------------------------------------------------------------------------
Linear::Linear(int64_t in, int64_t out, bool bias) {
  EDP_CHECK(in > 0 && out > 0, "Linear(", in, ", ", out, "): sizes must be positive");
  Tensor w({out, in});
  Tensor b;
  if (bias) b = Tensor({out});
  init_weight_bias(w, bias ? &b : nullptr);
  w_ = &register_parameter("weight", w);
  if (bias) {
    b_ = &register_parameter("bias", b);
    b_->decay = false;
  }
}

namespace {
// [..., n] as [rows, n]: the matrix a Linear multiplies.
Tensor as_rows(const Tensor& t) {
  if (t.ndim() == 2) return t;
  EDP_CHECK_SHAPE(t.ndim() >= 1, "Linear: input ", t.shape().str(), " has no feature dimension");
  return t.reshape(Shape{-1, t.dim(-1)});
}
Shape with_last(const Shape& s, int64_t last) {
  std::vector<int64_t> d = s.dims();
  d.back() = last;
  return Shape(d);
}
}  // namespace

Tensor Linear::forward(const Tensor& x) {
  x_ = x;
  flops_ = 2.0 * static_cast<double>(x.numel()) * static_cast<double>(w_->value.dim(0));
  Tensor y = ops::linear_forward(as_rows(x), w_->value, b_ ? b_->value : Tensor(), training_ ? &saved_ : nullptr);
  return x.ndim() == 2 ? y : y.reshape(with_last(x.shape(), w_->value.dim(0)));
}

Tensor Linear::backward(const Tensor& dy) {
  require_forward(x_, "Linear");
  Tensor dx = ops::linear_backward(as_rows(x_), w_->value, as_rows(dy), w_->grad_to_accumulate(), b_ ? &b_->grad_to_accumulate() : nullptr,
                                   input_grad_, &saved_);
  saved_ = {};
  w_->mark_grad_ready();
  if (b_) b_->mark_grad_ready();
  return dx.defined() && x_.ndim() != 2 ? dx.reshape(x_.shape()) : dx;
}

// ---- Conv2d ----------------------------------------------------------------------------------
Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride,
               int64_t padding, bool bias, bool relu) {
  EDP_CHECK(in_channels > 0 && out_channels > 0 && kernel > 0 && stride > 0 && padding >= 0,
            "Conv2d(", in_channels, ", ", out_channels, ", k=", kernel, ", stride=", stride,
            ", pad=", padding, "): invalid configuration");
  Tensor w({out_channels, in_channels, kernel, kernel});
  Tensor b;
  if (bias) b = Tensor({out_channels});
  init_weight_bias(w, bias ? &b : nullptr);
  w_ = &register_parameter("weight", w);
  if (bias) {
    b_ = &register_parameter("bias", b);
    b_->decay = false;
  }
  geom_.stride = stride;
  geom_.pad = padding;
  geom_.relu = relu;
}

Tensor Conv2d::forward(const Tensor& x) {
  x_ = x;
  col_ = Tensor();
  Tensor y = ops::conv2d_forward(x, w_->value, b_ ? b_->value : Tensor(), geom_,
                                 training_ ? &col_ : nullptr);
  if (geom_.relu) y_ = y;
  flops_ = 2.0 * static_cast<double>(y.numel()) * static_cast<double>(w_->value.numel() / w_->value.dim(0));
  return y;
}

Tensor Conv2d::backward(const Tensor& dy) {
  require_forward(x_, "Conv2d");
  Tensor dx = ops::conv2d_backward(x_, w_->value, dy, w_->grad_to_accumulate(), b_ ? &b_->grad_to_accumulate() : nullptr, geom_,
                                   input_grad_, &col_, geom_.relu ? &y_ : nullptr);
  col_ = Tensor();  // free it for the next forward
  w_->mark_grad_ready();
  if (b_) b_->mark_grad_ready();
  return dx;
}

// ---- pooling ---------------------------------------------------------------------------------
MaxPool2d::MaxPool2d(int64_t kernel, int64_t stride) : k_(kernel), s_(stride ? stride : kernel) {
  EDP_CHECK(k_ > 0 && s_ > 0, "MaxPool2d(", kernel, ", ", stride, "): invalid configuration");
}

Tensor MaxPool2d::forward(const Tensor& x) {
  x_shape_ = x.shape();
  return ops::maxpool2d_forward(x, k_, s_, argmax_);
}

Tensor MaxPool2d::backward(const Tensor& dy) {
  require_forward(argmax_, "MaxPool2d");
  return ops::maxpool2d_backward(dy, argmax_, x_shape_);
}

Tensor GlobalAvgPool2d::forward(const Tensor& x) {
  x_shape_ = x.shape();
  return ops::global_avgpool_forward(x);
}

Tensor GlobalAvgPool2d::backward(const Tensor& dy) {
  EDP_CHECK(x_shape_.ndim() == 4, "GlobalAvgPool2d.backward called without a preceding forward");
  return ops::global_avgpool_backward(dy, x_shape_);
}

// ---- activations -----------------------------------------------------------------------------
Tensor ReLU::forward(const Tensor& x) {
  y_ = ops::relu_forward(x);
  return y_;
}

Tensor ReLU::backward(const Tensor& dy) {
  require_forward(y_, "ReLU");
  return ops::relu_backward(y_, dy);
}

Tensor InputActivation::forward(const Tensor& x) {
  x_ = x;
  return f_(x);
}

Tensor InputActivation::backward(const Tensor& dy) {
  require_forward(x_, name_);
  return b_(x_, dy);
}

// ---- BatchNorm2d -----------------------------------------------------------------------------
BatchNorm2d::BatchNorm2d(int64_t channels, double eps, double momentum)
    : eps_(eps), momentum_(momentum) {
  EDP_CHECK(channels > 0, "BatchNorm2d(", channels, "): channels must be positive");
  gamma_ = &register_parameter("weight", Tensor::full({channels}, 1.0));
  beta_ = &register_parameter("bias", Tensor::zeros({channels}));
  gamma_->decay = beta_->decay = false;
  mean_ = &register_buffer("running_mean", Tensor::zeros({channels}));
  var_ = &register_buffer("running_var", Tensor::full({channels}, 1.0));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  x_ = x;
  cached_train_ = training_;
  if (!training_)
    return ops::batchnorm2d_forward_eval(x, gamma_->value, beta_->value, mean_->value,
                                         var_->value, eps_);
  return ops::batchnorm2d_forward_train(x, gamma_->value, beta_->value, mean_->value, var_->value,
                                        momentum_, eps_, save_mean_, save_invstd_);
}

Tensor BatchNorm2d::backward(const Tensor& dy) {
  require_forward(x_, "BatchNorm2d");
  EDP_CHECK(cached_train_, "BatchNorm2d.backward after an eval-mode forward: call train() first");
  Tensor dx = ops::batchnorm2d_backward(x_, dy, gamma_->value, save_mean_, save_invstd_,
                                        gamma_->grad_to_accumulate(), beta_->grad_to_accumulate());
  gamma_->mark_grad_ready();
  beta_->mark_grad_ready();
  return dx;
}

// ---- Dropout ---------------------------------------------------------------------------------
Dropout::Dropout(double p, uint64_t seed) : p_(p), seed_(seed) {
  register_counter("calls", &calls_);
  EDP_CHECK(p >= 0.0 && p < 1.0, "Dropout(p=", p, "): p must be in [0, 1)");
}

Tensor Dropout::forward(const Tensor& x) {
  active_ = training_ && p_ > 0.0;
  if (!active_) return x;
  return ops::dropout_forward(x, p_, derive_seed(seed_, calls_++), mask_);
}

Tensor Dropout::backward(const Tensor& dy) {
  if (!active_) return dy;
  return ops::dropout_backward(dy, mask_, p_);
}

// ---- Flatten ---------------------------------------------------------------------------------
Tensor Flatten::forward(const Tensor& x) {
  x_shape_ = x.shape();
  EDP_CHECK_SHAPE(x.ndim() >= 1, "Flatten: input must have a batch dimension");
  return x.reshape(Shape{x.dim(0), x.dim(0) ? x.numel() / x.dim(0) : 0});
}

Tensor Flatten::backward(const Tensor& dy) { return dy.reshape(x_shape_); }

// ---- Sequential ------------------------------------------------------------------------------
Sequential::Sequential(std::initializer_list<ModulePtr> layers) {
  for (auto& l : layers) add(l);
}

Sequential& Sequential::add(ModulePtr m, std::string name) {
  EDP_CHECK(m != nullptr, "Sequential.add: null module");
  if (name.empty()) name = std::to_string(children().size());
  register_module(name, std::move(m));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  auto& tl = Timeline::get();
  for (auto& c : children()) {
    const int64_t t0 = tl.enabled() ? tl.now_us() : 0;
    h = c.second->forward(h);
    if (tl.enabled()) tl.complete(c.first + " fwd", "layer", t0, tl.now_us());
  }
  return h;
}

Tensor Sequential::backward(const Tensor& dy) {
  Tensor g = dy;
  const auto& ch = children();
  // A child needs its input gradient only if something before it is trained (or the caller
  // wants ours): leading parameter-free layers (Flatten) do not make the first Linear compute dx.
  std::vector<bool> need(ch.size(), input_grad_);
  bool params_before = input_grad_;
  for (size_t i = 0; i < ch.size(); ++i) {
    need[i] = params_before;
    if (!params_before && ch[i].second->has_parameters()) params_before = true;
  }
  auto& tl = Timeline::get();
  for (size_t i = ch.size(); i-- > 0;) {
    ch[i].second->set_input_grad(need[i]);
    const int64_t t0 = tl.enabled() ? tl.now_us() : 0;
    g = ch[i].second->backward(g);
    if (tl.enabled()) tl.complete(ch[i].first + " bwd", "layer", t0, tl.now_us());
    if (!need[i]) return Tensor();  // nothing before this child is trained
  }
  return g;
}

void Sequential::set_input_grad(bool on) { Module::set_input_grad(on); }

// ---- ResidualBlock ---------------------------------------------------------------------------
ResidualBlock::ResidualBlock(int64_t in_channels, int64_t out_channels, int64_t stride) {
  main_ = register_module("main", make<Sequential>());
  main_->add(make<Conv2d>(in_channels, out_channels, 3, stride, 1, false), "conv1");
  main_->add(make<BatchNorm2d>(out_channels), "bn1");
  main_->add(make<ReLU>(), "relu");
  main_->add(make<Conv2d>(out_channels, out_channels, 3, 1, 1, false), "conv2");
  main_->add(make<BatchNorm2d>(out_channels), "bn2");
  if (stride != 1 || in_channels != out_channels) {
    shortcut_ = register_module("shortcut", make<Sequential>());
    shortcut_->add(make<Conv2d>(in_channels, out_channels, 1, stride, 0, false), "conv");
    shortcut_->add(make<BatchNorm2d>(out_channels), "bn");
  }
}

Tensor ResidualBlock::forward(const Tensor& x) {
  Tensor h = main_->forward(x);
  ops::add_(h, shortcut_ ? shortcut_->forward(x) : x);
  out_ = ops::relu_forward(h);
  return out_;
}

Tensor ResidualBlock::backward(const Tensor& dy) {
  require_forward(out_, "ResidualBlock");
  Tensor g = ops::relu_backward(out_, dy);
  // Both branches always need dx here (they sum), except at the network's input.
  main_->set_input_grad(input_grad_);
  Tensor dx_main = main_->backward(g);
  if (!shortcut_) return input_grad_ ? ops::add(dx_main, g) : Tensor();
  shortcut_->set_input_grad(input_grad_);
  Tensor dx_short = shortcut_->backward(g);
  if (!input_grad_) return Tensor();
  ops::add_(dx_main, dx_short);
  return dx_main;
}

// ---- transformer layers ----------------------------------------------------------------------
TokenPositionEmbedding::TokenPositionEmbedding(int64_t vocab, int64_t context, int64_t dim) {
  EDP_CHECK(vocab > 0 && context > 0 && dim > 0, "TokenPositionEmbedding(", vocab, ", ", context, ", ", dim,
            "): sizes must be positive");
  Tensor wte({vocab, dim}), wpe({context, dim});
  init::normal_(wte, 0.0, 0.02);
  init::normal_(wpe, 0.0, 0.02);
  wte_ = &register_parameter("wte", wte);
  wpe_ = &register_parameter("wpe", wpe);
}

Tensor TokenPositionEmbedding::forward(const Tensor& ids) {
  ids_ = ids;
  return ops::embedding_forward(ids, wte_->value, wpe_->value);
}

Tensor TokenPositionEmbedding::backward(const Tensor& dy) {
  require_forward(ids_, "TokenPositionEmbedding");
  ops::embedding_backward(ids_, dy, wte_->grad_to_accumulate(), wpe_->grad_to_accumulate());
  wte_->mark_grad_ready();
  wpe_->mark_grad_ready();
  return Tensor();
}

LayerNorm::LayerNorm(int64_t dim, double eps) : eps_(eps) {
  EDP_CHECK(dim > 0, "LayerNorm(", dim, "): dim must be positive");
  gamma_ = &register_parameter("weight", Tensor::full({dim}, 1.0));
  beta_ = &register_parameter("bias", Tensor::zeros({dim}));
  gamma_->decay = beta_->decay = false;
}

Tensor LayerNorm::forward(const Tensor& x) {
  x_ = x;
  return ops::layernorm_forward(x, gamma_->value, beta_->value, eps_, mean_, rstd_);
}

Tensor LayerNorm::backward(const Tensor& dy) {
  require_forward(x_, "LayerNorm");
  Tensor dx = ops::layernorm_backward(x_, dy, gamma_->value, mean_, rstd_, gamma_->grad_to_accumulate(), beta_->grad_to_accumulate());
  gamma_->mark_grad_ready();
  beta_->mark_grad_ready();
  return dx;
}

CausalSelfAttention::CausalSelfAttention(int64_t dim, int64_t heads, int64_t layers) : heads_(heads) {
  EDP_CHECK(dim > 0 && heads > 0 && dim % heads == 0, "CausalSelfAttention(", dim, ", heads=", heads,
            "): the width must be a positive multiple of the heads");
  qkv_ = register_module("qkv", make<Linear>(dim, 3 * dim));
  proj_ = register_module("proj", make<Linear>(dim, dim));
  init::normal_(qkv_->weight().value, 0.0, 0.02);
  init::normal_(proj_->weight().value, 0.0, layers > 0 ? 0.02 / std::sqrt(2.0 * static_cast<double>(layers)) : 0.02);
  qkv_->bias()->value.zero();
  proj_->bias()->value.zero();
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  EDP_CHECK_SHAPE(x.ndim() == 3, "CausalSelfAttention: input must be [B, T, D], got ", x.shape().str());
  qkv_out_ = qkv_->forward(x);
  attn_ = ops::attention_forward(qkv_out_, heads_, lse_);
  return proj_->forward(attn_);
}

Tensor CausalSelfAttention::backward(const Tensor& dy) {
  require_forward(attn_, "CausalSelfAttention");
  proj_->set_input_grad(true);
  Tensor dattn = proj_->backward(dy);
  Tensor dqkv = ops::attention_backward(qkv_out_, attn_, dattn, lse_, heads_);
  qkv_->set_input_grad(input_grad_);
  return qkv_->backward(dqkv);
}

Residual::Residual(ModulePtr body) : body_(register_module("body", std::move(body))) {
  EDP_CHECK(body_ != nullptr, "Residual: null body");
}

Tensor Residual::forward(const Tensor& x) {
  Tensor y = body_->forward(x);
  // The body's output is fresh (never the input), so it can take the sum in place.
  EDP_CHECK(!y.same_storage(x), "Residual: the body returned its input; wrap a layer that makes a new tensor");
  ops::add_(y, x);
  return y;
}

Tensor Residual::backward(const Tensor& dy) {
  body_->set_input_grad(true);
  Tensor dx = body_->backward(dy);
  ops::add_(dx, dy);
  return dx;
}

Tensor TiedOutput::forward(const Tensor& x) {
  x_ = x;
  flops_ = 2.0 * static_cast<double>(x.numel()) * static_cast<double>(w_->value.dim(0));
  Tensor y = ops::linear_forward(as_rows(x), w_->value, Tensor(), training_ ? &saved_ : nullptr);
  return x.ndim() == 2 ? y : y.reshape(with_last(x.shape(), w_->value.dim(0)));
}

Tensor TiedOutput::backward(const Tensor& dy) {
  require_forward(x_, "TiedOutput");
  Tensor dx = ops::linear_backward(as_rows(x_), w_->value, as_rows(dy), w_->grad_to_accumulate(), nullptr, input_grad_, &saved_);
  saved_ = {};
  return dx.defined() && x_.ndim() != 2 ? dx.reshape(x_.shape()) : dx;
}

double SequenceCrossEntropy::forward(const Tensor& logits, const Tensor& targets) {
  EDP_CHECK_SHAPE(logits.ndim() >= 2 && targets.numel() * logits.dim(-1) == logits.numel(), "SequenceCrossEntropy: logits ",
                  logits.shape().str(), " do not fit targets ", targets.shape().str());
  shape_ = logits.shape();
  targets_ = targets.reshape(Shape{targets.numel()});
  return ops::softmax_cross_entropy_forward(logits.reshape(Shape{-1, logits.dim(-1)}), targets_, probs_, ignore_,
                                            &counted_);
}

Tensor SequenceCrossEntropy::backward(double scale) const {
  EDP_CHECK(probs_.defined(), "SequenceCrossEntropy.backward called before forward");
  const double s = counted_ ? scale / static_cast<double>(counted_) : 0.0;
  return ops::softmax_cross_entropy_backward(probs_, targets_, s, ignore_).reshape(shape_);
}

// ---- loss ------------------------------------------------------------------------------------
double SoftmaxCrossEntropy::forward(const Tensor& logits, const Tensor& labels) {
  labels_ = labels;
  return ops::softmax_cross_entropy_forward(logits, labels, probs_);
}

Tensor SoftmaxCrossEntropy::backward(double scale) const {
  EDP_CHECK(probs_.defined(), "SoftmaxCrossEntropy.backward called before forward");
  return ops::softmax_cross_entropy_backward(probs_, labels_,
                                             scale / static_cast<double>(probs_.dim(0)));
}

// ---- pointwise losses ------------------------------------------------------------------------
double PointwiseLoss::forward(const Tensor& pred, const Tensor& target) {
  EDP_CHECK(pred.defined() && target.defined(), ops::point_loss_name(kind_), " loss: an operand is undefined");
  // int32 0/1 labels (or float64 targets of a float32 model): converted where they are (CPU).
  pred_ = pred;
  target_ = target.dtype() == pred.dtype() || !target.device().is_cpu() ? target : target.to(pred.dtype());
  const Tensor l = ops::point_loss_forward(kind_, pred_, target_, delta_);
  return pred.numel() ? ops::sum(l) / static_cast<double>(pred.numel()) : 0.0;
}

Tensor PointwiseLoss::backward(double scale) const {
  EDP_CHECK(pred_.defined(), ops::point_loss_name(kind_), " loss: backward called before forward");
  return ops::point_loss_backward(kind_, pred_, target_, delta_,
                                  scale / static_cast<double>(std::max<int64_t>(1, pred_.numel())));
}

}  // namespace edp::nn
