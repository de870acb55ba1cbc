// A first training program: a 784-256-10 MLP on Fashion-MNIST, built against an installed edp
// (examples/consumer/CMakeLists.txt). The README shows this file; the tests install edp, build it
// and run it.
#include <cstdio>

#include <edp/edp.h>

int main(int argc, char** argv) {
  using namespace edp;
  train::Options opts("first_program", "Trains a 784-256-10 MLP on Fashion-MNIST.");
  opts.add("epochs", "3", "epochs to train");
  opts.add("data", data::kFashionMnistDir, "folder of the Fashion-MNIST IDX files");
  opts.parse(argc, argv);  // --help lists the options; EDP_EPOCHS works too; an unknown one fails
  manual_seed(0);
  auto train = data::load_fashion_mnist(opts.str("data"), "train");
  auto test = data::load_fashion_mnist(opts.str("data"), "test");
  nn::Sequential model{nn::make<nn::Flatten>(), nn::make<nn::Linear>(784, 256),
                       nn::make<nn::ReLU>(), nn::make<nn::Linear>(256, 10)};
  optim::SGD opt(model.parameters(), {.lr = 0.05, .momentum = 0.9});
  data::DataLoader loader(train, std::make_shared<data::RandomSampler>(train->size(), 0),
                          {.batch_size = 64});
  nn::SoftmaxCrossEntropy loss;
  for (int epoch = 0; epoch < opts.i64("epochs"); ++epoch) {
    loader.start_epoch(epoch);
    data::Batch b;
    while (loader.next(b)) {
      opt.zero_grad();
      loss.forward(model.forward(b.x), b.y);
      model.backward(loss.backward());  // parameter grads accumulate; see nn/module.h
      opt.step();
    }
    std::printf("epoch %d: test accuracy %.4f\n", epoch, train::evaluate(model, *test).accuracy);
  }
}
