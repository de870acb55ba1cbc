// Definitions of the example models (see models.h).
#include "models.h"

namespace edp::examples {
using namespace edp::nn;

std::shared_ptr<Sequential> fashion_mnist_mlp() {
  auto m = make<Sequential>();
  m->add(make<Flatten>(), "flatten");
  m->add(make<Linear>(784, 256), "fc1");
  m->add(make<ReLU>(), "relu1");
  m->add(make<Linear>(256, 128), "fc2");
  m->add(make<ReLU>(), "relu2");
  m->add(make<Linear>(128, 10), "fc3");
  return m;
}

std::shared_ptr<Sequential> fashion_mnist_cnn() {
  auto m = make<Sequential>();
  // Conv + ReLU fused (same math as a separate ReLU layer, two fewer memory passes each).
  m->add(make<Conv2d>(1, 32, 3, 1, 1, true, /*relu=*/true), "conv1");
  m->add(make<MaxPool2d>(2), "pool1");
  m->add(make<Conv2d>(32, 64, 3, 1, 1, true, /*relu=*/true), "conv2");
  m->add(make<MaxPool2d>(2), "pool2");
  m->add(make<Flatten>(), "flatten");
  m->add(make<Linear>(3136, 128), "fc1");
  m->add(make<ReLU>(), "relu3");
  m->add(make<Linear>(128, 10), "fc2");
  return m;
}

std::shared_ptr<Sequential> cifar_resnet18(int num_classes) {
  auto m = make<Sequential>();
  m->add(make<Conv2d>(3, 64, 3, 1, 1, false), "conv1");
  m->add(make<BatchNorm2d>(64), "bn1");
  m->add(make<ReLU>(), "relu");
  const int64_t widths[] = {64, 128, 256, 512};
  int64_t in = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t out = widths[stage];
    m->add(make<ResidualBlock>(in, out, stage == 0 ? 1 : 2), "layer" + std::to_string(stage + 1) + ".0");
    m->add(make<ResidualBlock>(out, out, 1), "layer" + std::to_string(stage + 1) + ".1");
    in = out;
  }
  m->add(make<GlobalAvgPool2d>(), "pool");
  m->add(make<Linear>(512, num_classes), "fc");
  return m;
}

}  // namespace edp::examples
