// fluxcpp/types.hpp: element types shared by every operator.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fluxcpp {

// Values match fluxcpp_dtype_t in the C ABI.
enum class DType : int { kFloat32 = 0, kFloat64 = 1, kBFloat16 = 2 };

// Size in bytes of one element; 0 for a value outside the enum.
constexpr std::size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kBFloat16: return 2;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) noexcept {
  switch (t) {
    case DType::kFloat32: return "f32";
    case DType::kFloat64: return "f64";
    case DType::kBFloat16: return "bf16";
  }
  return "invalid";
}

constexpr bool dtype_valid(DType t) noexcept {
  return dtype_size(t) != 0;
}

}  // namespace fluxcpp
