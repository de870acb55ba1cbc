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

}  // namespace edp::examples
