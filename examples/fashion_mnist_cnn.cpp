// Fashion-MNIST with two conv + pooling layers (published reference accuracy: 0.916).
#include "common/classifier.h"
#include "common/models.h"

int main(int argc, char** argv) {
  return edp::examples::run_classifier(
      argc, argv,
      {"fashion_mnist_cnn", "Trains a 2-conv + pooling CNN on Fashion-MNIST.",
       edp::examples::fashion_mnist_cnn, 5, 0.05});
}
