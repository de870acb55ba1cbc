// Fashion-MNIST with a 784-256-128-10 ReLU MLP (published reference accuracy: 0.883).
#include "common/classifier.h"
#include "common/models.h"

int main(int argc, char** argv) {
  return edp::examples::run_classifier(
      argc, argv,
      {"fashion_mnist_mlp", "Trains a 784-256-128-10 MLP on Fashion-MNIST.",
       edp::examples::fashion_mnist_mlp, 10, 0.05});
}
