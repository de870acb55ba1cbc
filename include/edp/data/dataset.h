// Datasets: random access to (features, label) pairs. Readers for the IDX format (MNIST,
// Fashion-MNIST; gzip or plain) and CIFAR-10 binary batches, plus a learnable synthetic set.
// Malformed input throws edp::DataError naming the file, what was expected and what was found.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "edp/core/tensor.h"

namespace edp::data {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Shape of one sample's features, e.g. [1, 28, 28].
  virtual Shape sample_shape() const = 0;
  // Classes of a classification set; 0 for a set whose targets are values (label_dtype() float32).
  virtual int num_classes() const = 0;
  // Writes sample i's features (sample_shape().numel() float32 values) to `out`, returns its label.
  // Must be safe to call from several threads at once.
  virtual int32_t get(int64_t i, float* out) const = 0;

  // Sequence datasets (token windows) have int32 features and one label per position; the
  // DataLoader reads every dataset through read_sample(), whose default is get_sample(), whose
  // default is get().
  virtual DType feature_dtype() const { return DType::F32; }
  virtual Shape label_shape() const { return Shape{}; }  // [] : one label (target) per sample
  // Writes sample i's features (sample_shape().numel() values of feature_dtype()) to `x` and its
  // label_shape().numel() labels to `y`.
  virtual void get_sample(int64_t i, void* x, int32_t* y) const { *y = get(i, static_cast<float*>(x)); }

  // Targets: int32 class labels (the default: classification, sequences) or float32 values
  // (regression, multi-label 0/1 targets), label_shape() of them per sample.
  virtual DType label_dtype() const { return DType::I32; }
  // Writes sample i's features to `x` and its label_shape().numel() targets of label_dtype() to
  // `y`. Datasets with float32 targets override it (and label_dtype()); the default reads int32
  // labels through get_sample().
  virtual void read_sample(int64_t i, void* x, void* y) const;
};

// Per-channel affine normalisation applied after scaling bytes to [0, 1]: (x/255 - mean)/std.
// `mean`/`std` hold one value per channel, or one value for all channels.
struct Normalize {
  std::vector<float> mean{0.0f};
  std::vector<float> std{1.0f};
};

// Features held in memory, labels as int32 [N]. Two forms:
//   float32 [N, ...sample_shape], copied out as they are;
//   image bytes (uint8 [N, C, ...]) with a Normalize, turned into float32 by get() one sample at a
//   time — (byte/255 - mean[c]) / std[c] from a table of 256 values per channel, computed in double
//   and rounded once — so a quarter of the memory, and the very floats that converting the whole
//   set at load time would give. The dataset loaders keep images this way.
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor features, std::vector<int32_t> labels, int num_classes);
  TensorDataset(Tensor image_bytes, std::vector<int32_t> labels, int num_classes, const Normalize& norm);
  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  Shape sample_shape() const override;
  int num_classes() const override { return num_classes_; }
  int32_t get(int64_t i, float* out) const override;
  // The stored features: float32, or the image bytes (uint8) when normalize() is set.
  const Tensor& features() const { return features_; }
  const std::optional<Normalize>& normalize() const { return norm_; }
  const std::vector<int32_t>& labels() const { return labels_; }
  // Samples [from, from + n) (a view of the same features; clamped to the set).
  std::shared_ptr<TensorDataset> slice(int64_t from, int64_t n) const;
  // The first n samples (slice(0, n)).
  std::shared_ptr<TensorDataset> head(int64_t n) const { return slice(0, n); }

 private:
  void check_labels();  // and sets row_
  Tensor features_;
  std::vector<int32_t> labels_;
  int num_classes_;
  int64_t row_ = 0;  // values per sample, cached: get() is the hot path of the loader
  std::optional<Normalize> norm_;
  std::vector<std::vector<float>> tables_;  // bytes: one 256-entry table per channel
  int64_t plane_ = 0;                       // bytes: values per channel of a sample
};

// The normalisations the loaders below apply (statistics of each training set):
// Fashion-MNIST mean 0.2860 / std 0.3530; CIFAR-10 per channel (0.4914, 0.4822, 0.4465) /
// (0.2470, 0.2435, 0.2616).
Normalize fashion_mnist_normalize();
Normalize cifar10_normalize();

// IDX files (http://yann.lecun.com/exdb/mnist/ format), gzip-compressed or plain.
// Images: magic 0x00000803, [N, rows, cols] uint8. Labels: magic 0x00000801, [N] uint8.
// All header fields are big-endian uint32. A header whose sizes are implausible (rows or cols
// above 65536, more than 64 GiB of pixels) is rejected before anything is allocated, and data
// is read incrementally, so a corrupt count fails at end of file rather than exhausting memory.
// Bytes after the announced data are an error too: the header's count would then be wrong.
struct IdxImages {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // count*rows*cols
};
IdxImages read_idx_images(const std::string& path);
std::vector<uint8_t> read_idx_labels(const std::string& path);

// Loads a pair of IDX files into a dataset of [N, 1, rows, cols] image bytes, normalised by `norm`
// as they are read (TensorDataset).
std::shared_ptr<TensorDataset> load_idx(const std::string& images_path,
                                        const std::string& labels_path, const Normalize& norm,
                                        int num_classes = 10);

// Fashion-MNIST / MNIST from a directory holding train-images-idx3-ubyte(.gz) etc.
// split is "train" or "test" (files train-* and t10k-*); each file is looked up with .gz first,
// then without. Normalised with fashion_mnist_normalize().
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
std::shared_ptr<TensorDataset> load_fashion_mnist(const std::string& dir, const std::string& split);

// CIFAR-10 binary version: files of 10000 records of 1 label byte + 3072 pixel bytes (CHW).
// dir holds data_batch_1..5.bin (train) and test_batch.bin (test), or is the folder the
// official tarball unpacks into (dir/cifar-10-batches-bin/ is tried too).
// A file whose size is not a whole number of records, or a label >= 10, is a DataError.
std::shared_ptr<TensorDataset> load_cifar10_files(const std::vector<std::string>& files,
                                                  const Normalize& norm);
std::shared_ptr<TensorDataset> load_cifar10(const std::string& dir, const std::string& split);

// A learnable synthetic classification set: class prototypes drawn from N(0,1) plus per-sample
// Gaussian noise; features [n, ...shape], labels uniform over the classes. Same seed → same
// data; the prototypes do not depend on n, and a smaller n gives a prefix of a larger one.
std::shared_ptr<TensorDataset> make_synthetic(int64_t n, Shape sample_shape, int num_classes,
                                              uint64_t seed, float noise = 1.0f);

}  // namespace edp::data
