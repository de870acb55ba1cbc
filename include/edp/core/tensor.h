// Tensor: a shape, a dtype, a device and a contiguous storage shared between views.
// Views are only made where they are free: reshape() and narrow() along the first dimension
// keep the data contiguous and share the storage. Ops never copy across devices silently.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "edp/core/dtype.h"
#include "edp/core/error.h"

namespace edp {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> d) : dims_(d) {}
  explicit Shape(std::vector<int64_t> d) : dims_(std::move(d)) {}

  int64_t ndim() const { return static_cast<int64_t>(dims_.size()); }
  int64_t operator[](int64_t i) const { return dims_.at(static_cast<size_t>(i < 0 ? i + ndim() : i)); }
  int64_t numel() const;
  const std::vector<int64_t>& dims() const { return dims_; }
  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return dims_ != o.dims_; }
  std::string str() const;  // "[64, 1, 28, 28]"

 private:
  std::vector<int64_t> dims_;
};

// Raw memory owned by one device. CPU storage is 64-byte aligned.
class Storage {
 public:
  Storage(size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor: defined() == false
  Tensor(Shape shape, DType dtype = DType::F32, Device device = Device::cpu());

  static Tensor empty(Shape shape, DType dtype = DType::F32, Device device = Device::cpu()) {
    return Tensor(std::move(shape), dtype, device);
  }
  static Tensor zeros(Shape shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor full(Shape shape, double value, DType dtype = DType::F32,
                     Device device = Device::cpu());
  // A CPU tensor holding a copy of `values`.
  template <typename T>
  static Tensor from_vector(Shape shape, const std::vector<T>& values);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int64_t i) const { return shape_[i]; }
  int64_t ndim() const { return shape_.ndim(); }
  int64_t numel() const { return shape_.numel(); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  void* raw() const;
  template <typename T>
  T* data() const {
    check_dtype(dtype_of<T>::value);
    return static_cast<T*>(raw());
  }

  // Views (share storage).
  Tensor reshape(Shape s) const;
  Tensor flatten() const { return reshape(Shape{numel()}); }
  Tensor narrow(int64_t start, int64_t length) const;  // along dim 0

  // Copies.
  Tensor clone() const;
  Tensor to(DType t) const;       // converts values (copy even if same dtype is requested? no: same → shallow)
  Tensor to(Device d) const;      // CPU↔CUDA copy; same device → shallow
  void copy_from(const Tensor& src);  // same shape/dtype; any devices
  void fill(double value);
  void zero();

  // Element access on CPU tensors (slow path; tests and small logic only).
  double item(int64_t flat_index = 0) const;

  // The storage is shared with views; true when two tensors alias the same bytes.
  bool same_storage(const Tensor& o) const { return storage_ == o.storage_; }
  std::string str() const;  // "float32[64, 10] on cpu"

 private:
  void check_dtype(DType want) const;
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;  // bytes
  Shape shape_;
  DType dtype_ = DType::F32;
  Device device_;
};

template <typename T>
Tensor Tensor::from_vector(Shape shape, const std::vector<T>& values) {
  Tensor t(std::move(shape), dtype_of<T>::value);
  EDP_CHECK_SHAPE(static_cast<int64_t>(values.size()) == t.numel(), "from_vector: shape ",
                  t.shape().str(), " holds ", t.numel(), " elements but ", values.size(),
                  " values were given");
  T* p = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}

// Throws ShapeError naming both shapes when they differ; `what` names the op and operands.
void check_same_shape(const Tensor& a, const Tensor& b, const char* what);

}  // namespace edp
