// TensorDataset (features in memory) and the helpers every reader shares: normalisation
// tables and the checks on input files that turn "cannot open" into an actionable message.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "edp/core/error.h"
#include "internal.h"

namespace edp::data {

using ::edp::detail::concat;

TensorDataset::TensorDataset(Tensor features, std::vector<int32_t> labels, int num_classes)
    : features_(std::move(features)), labels_(std::move(labels)), num_classes_(num_classes) {
  if (!features_.defined()) throw Error("TensorDataset: the features tensor is undefined");
  if (features_.dtype() != DType::F32 || !features_.device().is_cpu())
    throw ShapeError(concat("TensorDataset: features must be float32 on the CPU, got ",
                            features_.str()));
  check_labels();
}

TensorDataset::TensorDataset(Tensor image_bytes, std::vector<int32_t> labels, int num_classes,
                             const Normalize& norm)
    : features_(std::move(image_bytes)), labels_(std::move(labels)), num_classes_(num_classes), norm_(norm) {
  if (!features_.defined()) throw Error("TensorDataset: the image tensor is undefined");
  if (features_.dtype() != DType::U8 || !features_.device().is_cpu() || features_.ndim() < 2)
    throw ShapeError(concat("TensorDataset: image bytes must be uint8 [N, C, ...] on the CPU, got ",
                            features_.str()));
  check_labels();
  tables_ = detail::normalize_tables(norm, features_.dim(1), "TensorDataset");
  plane_ = row_ / features_.dim(1);
}

void TensorDataset::check_labels() {
  if (features_.ndim() < 1)
    throw ShapeError("TensorDataset: features need a leading sample dimension, got a scalar");
  if (features_.dim(0) != static_cast<int64_t>(labels_.size()))
    throw ShapeError(concat("TensorDataset: features ", features_.shape().str(), " hold ",
                            features_.dim(0), " samples but ", labels_.size(),
                            " labels were given"));
  if (num_classes_ < 1)
    throw Error(concat("TensorDataset: num_classes must be >= 1, got ", num_classes_));
  for (size_t i = 0; i < labels_.size(); ++i)
    if (labels_[i] < 0 || labels_[i] >= num_classes_)
      throw DataError(concat("TensorDataset: label ", labels_[i], " of sample ", i,
                             " is outside [0, ", num_classes_, ")"));
  row_ = 1;
  for (int64_t d = 1; d < features_.ndim(); ++d) row_ *= features_.dim(d);
}

void Dataset::read_sample(int64_t i, void* x, void* y) const {
  if (label_dtype() != DType::I32)
    throw Error(concat("Dataset: a dataset whose targets are ", dtype_name(label_dtype()),
                       " must override read_sample() (the default reads int32 labels)"));
  get_sample(i, x, static_cast<int32_t*>(y));
}

Shape TensorDataset::sample_shape() const {
  const auto& d = features_.shape().dims();
  return Shape(std::vector<int64_t>(d.begin() + 1, d.end()));
}

int32_t TensorDataset::get(int64_t i, float* out) const {
  if (i < 0 || i >= size())
    throw Error(concat("TensorDataset::get(", i, "): index out of range for ", size(),
                       " samples"));
  if (norm_)
    detail::bytes_to_features(features_.data<uint8_t>() + i * row_, 1, features_.dim(1), plane_, tables_, out);
  else if (row_ > 0)
    std::memcpy(out, features_.data<float>() + i * row_, static_cast<size_t>(row_) * sizeof(float));
  return labels_[static_cast<size_t>(i)];
}

std::shared_ptr<TensorDataset> TensorDataset::slice(int64_t from, int64_t n) const {
  from = std::max<int64_t>(0, std::min(from, size()));
  n = std::max<int64_t>(0, std::min(n, size() - from));
  std::vector<int32_t> labels(labels_.begin() + from, labels_.begin() + from + n);
  Tensor part = features_.narrow(from, n);
  return norm_ ? std::make_shared<TensorDataset>(std::move(part), std::move(labels), num_classes_, *norm_)
               : std::make_shared<TensorDataset>(std::move(part), std::move(labels), num_classes_);
}

Normalize fashion_mnist_normalize() { return Normalize{{0.2860f}, {0.3530f}}; }
Normalize cifar10_normalize() {
  return Normalize{{0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}};
}

namespace detail {

std::vector<std::vector<float>> normalize_tables(const Normalize& norm, int64_t channels,
                                                 const char* who) {
  const size_t m = norm.mean.size(), s = norm.std.size();
  const size_t c = static_cast<size_t>(channels);
  if ((m != 1 && m != c) || (s != 1 && s != c))
    throw Error(concat(who, ": Normalize has ", m, " means and ", s,
                       " stds; the data has ", channels, " channel(s): give 1 or ", channels,
                       " of each"));
  std::vector<std::vector<float>> tables(c, std::vector<float>(256));
  for (size_t ch = 0; ch < c; ++ch) {
    // Computed in double and rounded once, so the table is the correctly rounded value of
    // the formula and does not depend on the compiler's float contraction choices.
    const double mean = norm.mean[m == 1 ? 0 : ch], sd = norm.std[s == 1 ? 0 : ch];
    if (!(sd > 0.0) || !std::isfinite(sd) || !std::isfinite(mean))
      throw Error(concat(who, ": Normalize channel ", ch, " has mean ", mean, " and std ", sd,
                         "; the std must be positive and both finite"));
    for (int b = 0; b < 256; ++b) tables[ch][b] = static_cast<float>((b / 255.0 - mean) / sd);
  }
  return tables;
}

void bytes_to_features(const uint8_t* src, int64_t samples, int64_t channels, int64_t plane,
                       const std::vector<std::vector<float>>& tables, float* dst) {
  for (int64_t i = 0; i < samples; ++i)
    for (int64_t c = 0; c < channels; ++c) {
      const float* t = tables[static_cast<size_t>(c)].data();
      for (int64_t k = 0; k < plane; ++k) *dst++ = t[*src++];
    }
}

void check_input_file(const std::string& path, const std::string& hint) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) {
    std::string msg = path + ": file not found";
    if (!hint.empty()) msg += " (" + hint + ")";
    throw DataError(msg);
  }
  if (fs::is_directory(st)) throw DataError(path + ": is a directory, expected a data file");
}

Mapping::~Mapping() {
  if (p) ::munmap(p, n);
}

std::shared_ptr<const Mapping> map_file(const std::string& path, const std::string& hint) {
  detail::check_input_file(path, hint);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw DataError(concat(path, ": cannot open (", std::strerror(errno), ")"));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw DataError(concat(path, ": not a regular file"));
  }
  auto m = std::make_shared<Mapping>();
  m->n = static_cast<size_t>(st.st_size);
  if (m->n > 0) {
    void* p = ::mmap(nullptr, m->n, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      throw DataError(concat(path, ": cannot map (", std::strerror(errno), ")"));
    }
    m->p = p;
  }
  ::close(fd);
  return m;
}

std::string idx_missing_hint(const std::string& path) {
  const std::string debian = std::string(kFashionMnistDir) + "/";
  if (path.rfind(debian, 0) == 0)
    return "the Debian package provides it: apt-get install dataset-fashion-mnist";
  return "Fashion-MNIST: https://github.com/zalandoresearch/fashion-mnist ; "
         "on Debian: apt-get install dataset-fashion-mnist, files in " +
         std::string(kFashionMnistDir);
}

}  // namespace detail
}  // namespace edp::data
