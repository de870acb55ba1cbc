// A layer of the user's own: a gated unit y = (W1 x) ⊙ σ(W2 x), written with edp's elementwise
// ops (CPU threads, CUDA kernels), checked with edp's gradient checker, then trained.
#include <cstdio>

#include <edp/edp.h>

using namespace edp;

class Gated : public nn::Module {
 public:
  Gated(int64_t in, int64_t out)
      : value_(register_module("value", nn::make<nn::Linear>(in, out))),
        gate_(register_module("gate", nn::make<nn::Linear>(in, out))) {}
  Tensor forward(const Tensor& x) override {
    a_ = value_->forward(x);
    b_ = gate_->forward(x);
    s_ = ops::sigmoid_forward(b_);
    return ops::mul(a_, s_);
  }
  Tensor backward(const Tensor& dy) override {  // dx = W1ᵀ(dy ⊙ s) + W2ᵀ σ'(b)(dy ⊙ a)
    Tensor dx = value_->backward(ops::mul(dy, s_));
    ops::add_(dx, gate_->backward(ops::sigmoid_backward(b_, ops::mul(dy, a_))));
    return dx;
  }
  std::string type_name() const override { return "Gated"; }

 private:
  std::shared_ptr<nn::Linear> value_, gate_;
  Tensor a_, b_, s_;
};

int main(int argc, char** argv) {
  train::Options opts("custom_layer", "Checks a custom layer's gradients, then trains it on X.npy -> y.npy.");
  opts.add("data", ".", "folder of X.npy and y.npy").add("epochs", "10", "epochs");
  opts.parse(argc, argv);
  manual_seed(0);
  Gated probe(4, 3);
  const nn::GradCheckResult g = nn::gradcheck(probe, Shape{5, 4});  // in float64, every element
  std::printf("gradcheck: %s\n", g.ok() ? "ok" : g.str().c_str());
  if (!g.ok()) return 1;

  auto ds = data::load_npy(opts.str("data") + "/X.npy", opts.str("data") + "/y.npy");
  auto model = nn::make<nn::Sequential>({nn::make<Gated>(ds->sample_shape()[0], 16), nn::make<nn::Linear>(16, 1)});
  optim::AdamW opt(model->parameters(), {.lr = 0.01, .weight_decay = 0});
  data::DataLoader loader(ds, std::make_shared<data::RandomSampler>(ds->size(), 0), {.batch_size = 32});
  nn::MSELoss loss;
  std::printf("before training: mse %.5f\n", train::evaluate(*model, *ds).loss);
  for (int epoch = 0; epoch < opts.i64("epochs"); ++epoch) {
    loader.start_epoch(epoch);
    for (data::Batch b; loader.next(b);) {
      opt.zero_grad();
      loss.forward(model->forward(b.x), b.y);
      model->backward(loss.backward());
      opt.step();
    }
  }
  std::printf("after %ld epochs: mse %.5f\n", static_cast<long>(opts.i64("epochs")), train::evaluate(*model, *ds).loss);
}
