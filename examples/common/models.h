// The example models, shared by the examples, the tests and the benchmarks so that all of them
// train exactly the same network.
#pragma once
#include <memory>

#include "edp/nn/layers.h"

namespace edp::examples {

// 784-256-128-10 ReLU MLP.
std::shared_ptr<nn::Sequential> fashion_mnist_mlp();
// conv3x3(1→32,pad1)-ReLU-maxpool2-conv3x3(32→64,pad1)-ReLU-maxpool2-flatten-
// linear(3136→128)-ReLU-linear(128→10).
std::shared_ptr<nn::Sequential> fashion_mnist_cnn();

// ResNet-18 for 32x32 inputs (the CIFAR variant): conv3x3(3->64)-BN-ReLU, four stages of two
// basic blocks (64, 128, 256, 512 channels; strides 1, 2, 2, 2), global average pool, linear(512->10).
std::shared_ptr<nn::Sequential> cifar_resnet18(int num_classes = 10);

}  // namespace edp::examples
