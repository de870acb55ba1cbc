// A first training program against an installed edp: a small MLP on a synthetic data set.
#include <cstdio>

#include <edp/edp.h>

int main() {
  using namespace edp;
  manual_seed(0);
  auto data = data::make_synthetic(512, {16}, 4, /*seed=*/1, /*noise=*/0.5f);
  nn::Sequential model{nn::make<nn::Linear>(16, 32), nn::make<nn::ReLU>(), nn::make<nn::Linear>(32, 4)};
  optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  data::DataLoader loader(data, std::make_shared<data::RandomSampler>(data->size(), 0), {.batch_size = 32});
  nn::SoftmaxCrossEntropy loss;
  for (int epoch = 0; epoch < 5; ++epoch) {
    loader.start_epoch(epoch);
    data::Batch b;
    while (loader.next(b)) {
      opt.zero_grad();
      loss.forward(model.forward(b.x), b.y);
      model.backward(loss.backward());
      opt.step();
    }
  }
  const auto r = train::evaluate(model, *data);
  std::printf("edp %s consumer: accuracy %.3f\n", EDP_VERSION, r.accuracy);
  return r.accuracy > 0.5 ? 0 : 1;
}
