// Tensor and Storage: CPU memory management and the cheap views. The CUDA half of Storage is a
// seam filled by the CUDA backend (register_device_allocator); a CPU-only build says so loudly.
#include "edp/core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "edp/core/allocator.h"
#include "core/device_hooks.h"

// Pulls src/core/cpu_guard.cpp (the start-up instruction-set check) into every program.
extern "C" int edp_cpu_guard_anchor;
[[maybe_unused]] __attribute__((used)) static int* const edp_cpu_guard_ref = &edp_cpu_guard_anchor;

namespace edp {

namespace {
DeviceHooks g_cuda_hooks;

template <typename Dst>
void convert_from(const Tensor& src, Dst* dst, int64_t n) {
  switch (src.dtype()) {
    case DType::F32: { auto* s = src.data<float>(); for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Dst>(s[i]); break; }
    case DType::F64: { auto* s = src.data<double>(); for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Dst>(s[i]); break; }
    case DType::I32: { auto* s = src.data<int32_t>(); for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Dst>(s[i]); break; }
    case DType::I64: { auto* s = src.data<int64_t>(); for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Dst>(s[i]); break; }
    case DType::U8: { auto* s = src.data<uint8_t>(); for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Dst>(s[i]); break; }
    case DType::BF16: { auto* s = src.data<bfloat16>(); for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Dst>(from_bfloat16(s[i])); break; }
  }
}

void convert_to_bf16(const Tensor& src, bfloat16* dst, int64_t n) {
  if (src.dtype() == DType::F32) {
    const float* s = src.data<float>();
    for (int64_t i = 0; i < n; ++i) dst[i] = to_bfloat16(s[i]);
    return;
  }
  const Tensor f = src.to(DType::F32);
  convert_to_bf16(f, dst, n);
}

template <typename T>
void fill_typed(void* p, int64_t n, double v) {
  T* d = static_cast<T*>(p);
  const T tv = static_cast<T>(v);
  for (int64_t i = 0; i < n; ++i) d[i] = tv;
}
}  // namespace

void register_device_hooks(const DeviceHooks& hooks) { g_cuda_hooks = hooks; }
const DeviceHooks& device_hooks() { return g_cuda_hooks; }

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    char* end = nullptr;
    long i = std::strtol(s.c_str() + 5, &end, 10);
    if (end && *end == '\0' && i >= 0) return cuda(static_cast<int>(i));
  }
  throw Error("unknown device '" + s + "': expected cpu, cuda or cuda:N");
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < dims_.size(); ++i) os << (i ? ", " : "") << dims_[i];
  os << "]";
  return os.str();
}

Storage::Storage(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  if (device.is_cpu()) {
    data_ = host_alloc(bytes);
  } else {
    if (!g_cuda_hooks.alloc)
      throw Error("a tensor on " + device.str() +
                  " needs the CUDA backend, and this build of edp has none (configure with "
                  "EDP_CUDA=ON on a machine with nvcc)");
    data_ = g_cuda_hooks.alloc(bytes, device.index);
  }
}

Storage::~Storage() {
  if (device_.is_cpu())
    host_free(data_, bytes_);
  else if (g_cuda_hooks.free)
    g_cuda_hooks.free(data_, bytes_, device_.index);
}

Tensor::Tensor(Shape shape, DType dtype, Device device)
    : shape_(std::move(shape)), dtype_(dtype), device_(device) {
  for (int64_t d : shape_.dims())
    EDP_CHECK_SHAPE(d >= 0, "negative dimension in shape ", shape_.str());
  storage_ = std::make_shared<Storage>(static_cast<size_t>(shape_.numel()) * dtype_size(dtype),
                                       device);
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  Tensor t(std::move(shape), dtype, device);
  t.zero();
  return t;
}

Tensor Tensor::full(Shape shape, double value, DType dtype, Device device) {
  Tensor t(std::move(shape), dtype, device);
  t.fill(value);
  return t;
}

void* Tensor::raw() const {
  EDP_CHECK(defined(), "use of an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_;
}

void Tensor::check_dtype(DType want) const {
  EDP_CHECK_SHAPE(dtype_ == want, "tensor ", str(), " accessed as ", dtype_name(want));
}

Tensor Tensor::reshape(Shape s) const {
  // One dimension may be -1 and is inferred.
  std::vector<int64_t> d = s.dims();
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < d.size(); ++i) {
    if (d[i] == -1) {
      EDP_CHECK_SHAPE(infer < 0, "reshape: more than one -1 in ", s.str());
      infer = static_cast<int64_t>(i);
    } else {
      known *= d[i];
    }
  }
  if (infer >= 0) {
    EDP_CHECK_SHAPE(known > 0 && numel() % known == 0, "reshape: cannot infer ", s.str(),
                    " from ", shape_.str());
    d[static_cast<size_t>(infer)] = numel() / known;
  }
  Shape ns(d);
  EDP_CHECK_SHAPE(ns.numel() == numel(), "reshape: ", shape_.str(), " (", numel(),
                  " elements) cannot become ", ns.str(), " (", ns.numel(), " elements)");
  Tensor t = *this;
  t.shape_ = ns;
  return t;
}

Tensor Tensor::narrow(int64_t start, int64_t length) const {
  EDP_CHECK_SHAPE(ndim() >= 1 && start >= 0 && length >= 0 && start + length <= dim(0),
                  "narrow(", start, ", ", length, ") out of range for shape ", shape_.str());
  Tensor t = *this;
  std::vector<int64_t> d = shape_.dims();
  const int64_t row = dim(0) ? numel() / dim(0) : 0;
  d[0] = length;
  t.shape_ = Shape(d);
  t.offset_ += static_cast<size_t>(start * row) * dtype_size(dtype_);
  return t;
}

Tensor Tensor::clone() const {
  Tensor t(shape_, dtype_, device_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype_) return *this;
  EDP_CHECK(device_.is_cpu(), "dtype conversion of ", str(), " is implemented on the CPU only");
  Tensor t(shape_, target, device_);
  const int64_t n = numel();
  switch (target) {
    case DType::F32: convert_from(*this, t.data<float>(), n); break;
    case DType::F64: convert_from(*this, t.data<double>(), n); break;
    case DType::I32: convert_from(*this, t.data<int32_t>(), n); break;
    case DType::I64: convert_from(*this, t.data<int64_t>(), n); break;
    case DType::U8: convert_from(*this, t.data<uint8_t>(), n); break;
    case DType::BF16: convert_to_bf16(*this, t.data<bfloat16>(), n); break;
  }
  return t;
}

Tensor Tensor::to(Device d) const {
  if (d == device_) return *this;
  Tensor t(shape_, dtype_, d);
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  EDP_CHECK_SHAPE(src.shape() == shape_ && src.dtype() == dtype_, "copy_from: destination ",
                  str(), " and source ", src.str(), " differ");
  if (nbytes() == 0) return;
  if (device_.is_cpu() && src.device().is_cpu()) {
    std::memmove(raw(), src.raw(), nbytes());
    return;
  }
  EDP_CHECK(g_cuda_hooks.copy, "copy between ", src.device().str(), " and ", device_.str(),
            " needs the CUDA backend, and this build has none");
  g_cuda_hooks.copy(raw(), device_, src.raw(), src.device(), nbytes());
}

void Tensor::fill(double v) {
  const int64_t n = numel();
  if (n == 0) return;
  if (!device_.is_cpu()) {
    EDP_CHECK(g_cuda_hooks.fill, "fill on ", device_.str(), " needs the CUDA backend");
    g_cuda_hooks.fill(raw(), dtype_, n, v, device_.index);
    return;
  }
  switch (dtype_) {
    case DType::F32: fill_typed<float>(raw(), n, v); break;
    case DType::F64: fill_typed<double>(raw(), n, v); break;
    case DType::I32: fill_typed<int32_t>(raw(), n, v); break;
    case DType::I64: fill_typed<int64_t>(raw(), n, v); break;
    case DType::U8: fill_typed<uint8_t>(raw(), n, v); break;
    case DType::BF16: {
      bfloat16* d = static_cast<bfloat16*>(raw());
      const bfloat16 b = to_bfloat16(static_cast<float>(v));
      for (int64_t i = 0; i < n; ++i) d[i] = b;
      break;
    }
  }
}

void Tensor::zero() {
  if (device_.is_cpu()) {
    if (nbytes()) std::memset(raw(), 0, nbytes());
  } else {
    fill(0.0);
  }
}

double Tensor::item(int64_t i) const {
  EDP_CHECK(device_.is_cpu(), "item() on ", str(), ": copy it to the CPU first");
  EDP_CHECK_SHAPE(i >= 0 && i < numel(), "item(", i, ") out of range for ", str());
  switch (dtype_) {
    case DType::F32: return data<float>()[i];
    case DType::F64: return data<double>()[i];
    case DType::I32: return data<int32_t>()[i];
    case DType::I64: return static_cast<double>(data<int64_t>()[i]);
    case DType::U8: return data<uint8_t>()[i];
    case DType::BF16: return from_bfloat16(data<bfloat16>()[i]);
  }
  return 0;
}

std::string Tensor::str() const {
  return std::string(dtype_name(dtype_)) + shape_.str() + " on " + device_.str();
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* what) {
  EDP_CHECK_SHAPE(a.shape() == b.shape(), what, ": shapes differ: ", a.shape().str(), " vs ",
                  b.shape().str());
}

}  // namespace edp
