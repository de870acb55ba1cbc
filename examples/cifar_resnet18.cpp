// ResNet-18 (CIFAR variant) on CIFAR-10 binary files from --data (data_batch_1..5.bin,
// test_batch.bin), or on a synthetic CIFAR-shaped set when --data is "synthetic" (the default:
// the data set is not packaged for Debian; 10,000 train / 2,000 test). Same driver, flags and JSON line as the
// Fashion-MNIST examples; made for the GPU benchmarks (batch 128), slow on a CPU.
#include "common/classifier.h"
#include "common/models.h"

int main(int argc, char** argv) {
  edp::examples::ClassifierSpec spec{"cifar_resnet18",
                                     "Trains a ResNet-18 (32x32 variant) on CIFAR-10 or a synthetic set.",
                                     [] { return edp::examples::cifar_resnet18(); }, 30, 0.05};
  spec.default_data = "synthetic";
  spec.load = [](const std::string& dir) {
    if (dir == "synthetic") {
      // 12,000 learnable samples of 3x32x32 from one seed (shared class prototypes), split into
      // 10,000 for training and 2,000 for testing.
      auto all = edp::data::make_synthetic(12000, {3, 32, 32}, 10, /*seed=*/1);
      return std::make_pair(all->head(10000), all->slice(10000, 2000));
    }
    return std::make_pair(edp::data::load_cifar10(dir, "train"), edp::data::load_cifar10(dir, "test"));
  };
  return edp::examples::run_classifier(argc, argv, spec);
}
