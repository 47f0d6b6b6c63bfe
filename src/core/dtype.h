#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace di {

enum class DType : uint8_t { f32, bf16, f16, f64, i32, i64, u8 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::bf16: case DType::f16: return 2;
    case DType::u8: return 1;
  }
  return 0;
}

// Names as safetensors writes them.
inline std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
    case DType::f64: return "F64";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
  }
  return "?";
}

}  // namespace di
