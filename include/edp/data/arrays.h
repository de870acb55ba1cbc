// Datasets from the files users have: NumPy's .npy and .npz, and CSV text. Features become
// float32 and targets become int32 class labels or float32 values, of any shape per sample, and
// every sampler (DistributedSampler included: sharded, resumable at any world size) reads them
// like any other dataset.
//
//   auto train = data::load_npy("X.npy", "y.npy");           // float64 X, int64 y: 3 classes
//   auto reg   = data::load_npz("data.npz", {.features = "x", .targets = "y"});
//   auto iris  = data::load_csv("iris.csv", {.targets = {"species"}});
//
// .npy (format versions 1-3): little- or big-endian bool, int8..int64, uint8..uint64, float16,
// float32 and float64, C order (a Fortran-order array is refused: np.ascontiguousarray first).
// A .npy file is memory-mapped and each sample is converted as it is read, so a features file
// larger than memory trains; the targets are read once. .npz: a zip of .npy files (np.savez, or
// np.savez_compressed: deflate, through zlib), entries read into memory. Malformed input throws
// edp::DataError naming the file, the byte offset and what was expected there.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "edp/core/tensor.h"
#include "edp/data/dataset.h"

namespace edp::data {

// What a target array means.
enum class Targets : uint8_t {
  automatic,  // .npy/.npz: integer or bool dtype -> classes, floating -> values. CSV: a column of
              // numbers -> values, a column with any other text -> classes (names sorted)
  classes,    // int32 class labels 0..C-1 (C: num_classes, or the largest label + 1)
  values,     // float32 values: regression, or multi-label 0/1 targets (binary cross-entropy)
};

// A numeric array in NumPy's layout: a shape, an element type (NumPy's descr, e.g. "<f8") and
// C-ordered data, memory-mapped or held in memory. Elements are read converted.
class Array {
 public:
  // Memory-maps a .npy file and checks its header against its size.
  static Array open_npy(const std::string& path);
  // Parses .npy bytes held in memory; `name` is what messages call them (e.g. "d.npz:x.npy").
  static Array parse_npy(const std::string& name, std::shared_ptr<const std::vector<uint8_t>> bytes);
  // A view of a float32, float64, int32 or int64 CPU tensor (kept alive by the array).
  static Array from_tensor(const std::string& name, const Tensor& t);

  const std::string& name() const { return name_; }
  const Shape& shape() const { return shape_; }
  const std::string& descr() const { return descr_; }
  char kind() const { return kind_; }  // 'b' bool, 'i' signed, 'u' unsigned, 'f' floating
  int item_size() const { return item_; }
  int64_t rows() const { return shape_.ndim() ? shape_[0] : 1; }
  int64_t row_size() const;  // elements per row (dimension 0)
  // Rows [row, row + n) converted to float32 (rounded to nearest).
  void read_f32(int64_t row, int64_t n, float* out) const;
  // Element i (flat index) as a double (exact for integers up to 2^53).
  double at(int64_t i) const;
  // The byte offset of element i in the file (for messages).
  int64_t offset_of(int64_t i) const { return data_offset_ + i * item_; }

 private:
  std::string name_, descr_;
  Shape shape_;
  char kind_ = 'f';
  int item_ = 4;
  bool swap_ = false;  // big-endian data
  int64_t data_offset_ = 0;
  const uint8_t* data_ = nullptr;
  std::shared_ptr<const void> owner_;  // the mapping or the bytes
};

// Writes a float32, float64, int32 or int64 CPU tensor as a version-1 .npy file, atomically.
void write_npy(const std::string& path, const Tensor& t);

// The arrays of a .npz file by name (the entry's name without ".npy").
std::map<std::string, Array> read_npz(const std::string& path);

struct ArrayOptions {
  Targets targets = Targets::automatic;
  int num_classes = 0;  // classes: 0 = the largest label + 1; larger gives classes not present
};

// Rows of a features array (any numeric dtype, [N, ...]) and a targets array ([N] or [N, ...]).
class ArrayDataset : public Dataset {
 public:
  ArrayDataset(Array features, Array targets, ArrayOptions options = {});
  // From targets already decided (CSV): classes (labels) or values.
  ArrayDataset(Array features, std::vector<int32_t> labels, int num_classes);
  ArrayDataset(Array features, Array values, Targets kind, int num_classes);

  int64_t size() const override { return features_.rows(); }
  Shape sample_shape() const override;
  int num_classes() const override { return classes_; }  // 0 for values
  Shape label_shape() const override;
  DType label_dtype() const override { return classes_ > 0 ? DType::I32 : DType::F32; }
  // Class targets: writes the features, returns the label. Value targets: refused (read_sample).
  int32_t get(int64_t i, float* out) const override;
  void read_sample(int64_t i, void* x, void* y) const override;
  const Array& features() const { return features_; }
  // The class names of a CSV's text target column, in label order (empty otherwise).
  const std::vector<std::string>& class_names() const { return names_; }
  void set_class_names(std::vector<std::string> names) { names_ = std::move(names); }

 private:
  void check_rows(const Array& targets) const;
  Array features_;
  std::vector<Array> values_;     // one element: float targets
  std::vector<int32_t> labels_;   // class targets, label_per_row_ per sample
  int64_t label_per_row_ = 1;
  Shape label_shape_;
  int classes_ = 0;
  std::vector<std::string> names_;
};

// Features and targets from two .npy files (each memory-mapped).
std::shared_ptr<ArrayDataset> load_npy(const std::string& features, const std::string& targets,
                                       ArrayOptions options = {});

struct NpzOptions {
  std::string features = "x";  // entry names, without ".npy"
  std::string targets = "y";
  Targets kind = Targets::automatic;
  int num_classes = 0;
};
std::shared_ptr<ArrayDataset> load_npz(const std::string& path, NpzOptions options = {});

// CSV: one sample per line, fields separated by `delimiter`, "double quotes" around a field that
// holds the delimiter ("" inside is a quote). With a header the columns are named by it,
// otherwise by their index ("0", "1", ...). `targets` names the target columns (required);
// `features` the feature columns (empty: every other column). Feature fields must be numbers; an
// empty or malformed one is a DataError naming the file, line, column and byte offset.
struct CsvOptions {
  std::vector<std::string> targets = {};
  std::vector<std::string> features = {};
  bool header = true;
  char delimiter = ',';
  Targets kind = Targets::automatic;
  int num_classes = 0;
};
std::shared_ptr<ArrayDataset> load_csv(const std::string& path, CsvOptions options);

}  // namespace edp::data
