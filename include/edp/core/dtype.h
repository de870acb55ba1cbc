// Element types and devices. float32 is the training type and the type of master weights,
// gradients and optimizer state; float64 exists for gradient checks and exact collectives;
// bfloat16 is a storage type for the operands of mixed-precision matrix products (converted from
// float32 with round-to-nearest-even, products accumulated in float32: see edp/backend/ops.h,
// "precision").
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace edp {

enum class DType : uint8_t { F32 = 0, F64 = 1, I32 = 2, I64 = 3, U8 = 4, BF16 = 5 };

// bfloat16: the upper half of an IEEE float32 (8 exponent bits, 7 mantissa bits).
struct bfloat16 {
  uint16_t bits = 0;
};
// Round to nearest, ties to even; a NaN stays a (quiet) NaN.
inline bfloat16 to_bfloat16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bfloat16{static_cast<uint16_t>((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bfloat16{static_cast<uint16_t>(u >> 16)};
}
inline float from_bfloat16(bfloat16 b) {
  const uint32_t u = static_cast<uint32_t>(b.bits) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
    case DType::BF16: return 2;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F64: return "float64";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U8: return "uint8";
    case DType::BF16: return "bfloat16";
  }
  return "?";
}

template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::I64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::U8; };
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::BF16; };

struct Device {
  enum class Kind : uint8_t { CPU = 0, CUDA = 1 };
  Kind kind = Kind::CPU;
  int index = 0;

  static Device cpu() { return {Kind::CPU, 0}; }
  static Device cuda(int i = 0) { return {Kind::CUDA, i}; }
  bool is_cpu() const { return kind == Kind::CPU; }
  bool is_cuda() const { return kind == Kind::CUDA; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
  // "cpu", "cuda", "cuda:1"
  static Device parse(const std::string& s);
};

}  // namespace edp
