// reduce.cc - element-wise reduction and scaling kernels for every DataType.
// The loops are plain templates over the element type and operator with
// __restrict pointers so -O3 auto-vectorizes float32/float64 sums; 16-bit
// floats are widened to float32 in cache-sized blocks and rounded once.
#include "reduce/reduce.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#include <cpuid.h>
#endif

#include "common/error.h"

namespace hvd {

float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000 | (mantissa << 13);  // inf / nan (payload kept)
  } else if (exponent != 0) {
    bits = sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // Subnormal half: exact in float, mantissa * 2^-24.
    float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    std::memcpy(&bits, &magnitude, 4);
    bits |= sign;
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  x &= 0x7fffffff;
  if (x >= 0x7f800000) {  // inf or nan; keep nan quiet and non-zero
    return sign | (x > 0x7f800000 ? uint16_t(0x7e00 | ((x >> 13) & 0x3ff)) : uint16_t(0x7c00));
  }
  if (x >= 0x477ff000) return sign | 0x7c00;  // >= 65520 rounds to infinity
  if (x < 0x38800000) {
    // Below the smallest normal half: adding 0.5f puts the half-subnormal
    // quantum (2^-24) at the float ulp, so the FPU rounds to nearest even.
    float magnitude;
    std::memcpy(&magnitude, &x, 4);
    float shifted = magnitude + 0.5f;
    uint32_t shifted_bits;
    std::memcpy(&shifted_bits, &shifted, 4);
    return sign | static_cast<uint16_t>(shifted_bits - 0x3f000000u);
  }
  uint32_t odd = (x >> 13) & 1;
  x += 0xc8000fffu + odd;  // rebias exponent 127 -> 15 and round half to even
  return sign | static_cast<uint16_t>(x >> 13);
}

float bfloat16_to_float(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

uint16_t float_to_bfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  // Branch-free (a select, not a jump) so loops over it vectorize.
  uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1)) >> 16;
  uint32_t quiet_nan = (x >> 16) | 0x40;
  return static_cast<uint16_t>((x & 0x7fffffff) > 0x7f800000 ? quiet_nan : rounded);
}

namespace {

// Integer arithmetic wraps (as MPI and Horovod do) instead of being UB.
template <typename T>
struct SumOp {
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};
template <typename T>
struct ProductOp {
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // Promote small types to unsigned int so the multiply cannot overflow int.
      using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return a * b;
    }
  }
};
template <typename T>
struct MinOp {
  static T apply(T a, T b) { return b < a ? b : a; }
};
template <typename T>
struct MaxOp {
  static T apply(T a, T b) { return a < b ? b : a; }
};
// bool: sum/max are logical or, product/min logical and; results are 0/1.
struct OrOp {
  static uint8_t apply(uint8_t a, uint8_t b) { return (a | b) != 0; }
};
struct AndOp {
  static uint8_t apply(uint8_t a, uint8_t b) { return (a != 0) & (b != 0); }
};

// With `scale` (float32 and float64 only), each result is also multiplied
// by *scale in the same loop: rounded after the operator and again after the
// multiplication, as a separate scale_copy pass would, without that pass's
// second trip through every element.
template <typename T, typename Op>
void reduce_into_typed(T* __restrict dst, const T* __restrict src, size_t count, const T* scale = nullptr) {
  if (scale == nullptr) {
    for (size_t i = 0; i < count; ++i) dst[i] = Op::apply(dst[i], src[i]);
  } else {
    const T f = *scale;
    for (size_t i = 0; i < count; ++i) dst[i] = Op::apply(dst[i], src[i]) * f;
  }
}

template <typename T, typename Op>
void reduce_two_typed(T* __restrict dst, const T* __restrict a, const T* __restrict b,
                      size_t count, const T* scale) {
  if (scale == nullptr) {
    for (size_t i = 0; i < count; ++i) dst[i] = Op::apply(a[i], b[i]);
  } else {
    const T f = *scale;
    for (size_t i = 0; i < count; ++i) dst[i] = Op::apply(a[i], b[i]) * f;
  }
}

// Blocked so the destination block stays in L1 while every source streams
// through it once.
constexpr size_t kBlockElements = 2048;

// `scale` is for two sources or more (reduce_many_scaled scales one itself).
template <typename T, typename Op>
void reduce_many_typed(T* dst, const void* const* srcs, size_t num_srcs, size_t count, const T* scale = nullptr) {
  if (num_srcs == 0) return;
  if (num_srcs == 1) {
    if (dst != srcs[0]) std::memmove(dst, srcs[0], count * sizeof(T));
    return;
  }
  for (size_t begin = 0; begin < count; begin += kBlockElements) {
    size_t n = count - begin < kBlockElements ? count - begin : kBlockElements;
    T* out = dst + begin;
    const T* first = static_cast<const T*>(srcs[0]) + begin;
    const T* second = static_cast<const T*>(srcs[1]) + begin;
    const T* first_scale = num_srcs == 2 ? scale : nullptr;  // the last source's loop scales
    if (out == first) {
      reduce_into_typed<T, Op>(out, second, n, first_scale);
    } else if (out == second) {
      reduce_into_typed<T, Op>(out, first, n, first_scale);  // all our ops are commutative
    } else {
      reduce_two_typed<T, Op>(out, first, second, n, first_scale);
    }
    for (size_t s = 2; s < num_srcs; ++s) {
      reduce_into_typed<T, Op>(out, static_cast<const T*>(srcs[s]) + begin, n, s + 1 == num_srcs ? scale : nullptr);
    }
  }
}

template <typename T>
void reduce_many_arith(void* dst, const void* const* srcs, size_t num_srcs, size_t count,
                       ReduceOp op, const T* scale = nullptr) {
  T* out = static_cast<T*>(dst);
  switch (op) {
    case ReduceOp::kSum: return reduce_many_typed<T, SumOp<T>>(out, srcs, num_srcs, count, scale);
    case ReduceOp::kMin: return reduce_many_typed<T, MinOp<T>>(out, srcs, num_srcs, count, scale);
    case ReduceOp::kMax: return reduce_many_typed<T, MaxOp<T>>(out, srcs, num_srcs, count, scale);
    case ReduceOp::kProduct: return reduce_many_typed<T, ProductOp<T>>(out, srcs, num_srcs, count, scale);
  }
  throw_error(ErrorCode::kInvalidArgument, "unknown reduce op");
}

void reduce_many_bool(void* dst, const void* const* srcs, size_t num_srcs, size_t count,
                      ReduceOp op) {
  uint8_t* out = static_cast<uint8_t*>(dst);
  if (num_srcs == 1) {
    // Normalise to 0/1 so a single member still produces canonical bools.
    const uint8_t* in = static_cast<const uint8_t*>(srcs[0]);
    for (size_t i = 0; i < count; ++i) out[i] = in[i] != 0;
    return;
  }
  if (op == ReduceOp::kSum || op == ReduceOp::kMax) {
    reduce_many_typed<uint8_t, OrOp>(out, srcs, num_srcs, count);
  } else {
    reduce_many_typed<uint8_t, AndOp>(out, srcs, num_srcs, count);
  }
}

#if defined(__x86_64__)
// F16C converts 8 halves per instruction; the scalar code is ~30x slower.
// Chosen at run time so the library still runs on CPUs without it.
__attribute__((target("avx,f16c"))) void widen_half_f16c(float* out, const uint16_t* in, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = half_to_float(in[i]);
}

__attribute__((target("avx,f16c"))) void narrow_half_f16c(uint16_t* out, const float* in, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = float_to_half(in[i]);
}

// F16C from CPUID leaf 1 rather than __builtin_cpu_supports("f16c"), which
// clang before 15 does not know (the fuzz targets build the engine with clang).
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
const bool kHasF16c = __builtin_cpu_supports("avx") && cpu_has_f16c();
#endif

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void widen_block(float* __restrict out, const uint16_t* __restrict in, size_t n) {
#if defined(__x86_64__)
  if (ToFloat == half_to_float && kHasF16c) return widen_half_f16c(out, in, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = ToFloat(in[i]);
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void narrow_block(uint16_t* __restrict out, const float* __restrict in, size_t n) {
#if defined(__x86_64__)
  if (FromFloat == float_to_half && kHasF16c) return narrow_half_f16c(out, in, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = FromFloat(in[i]);
}

// 16-bit floats: accumulate in float32 per block, round once at the end.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void reduce_many_half(void* dst, const void* const* srcs, size_t num_srcs, size_t count,
                      ReduceOp op) {
  if (num_srcs == 0) return;
  float accumulator[kBlockElements];
  float widened[kBlockElements];
  uint16_t* out = static_cast<uint16_t*>(dst);
  for (size_t begin = 0; begin < count; begin += kBlockElements) {
    size_t n = count - begin < kBlockElements ? count - begin : kBlockElements;
    widen_block<ToFloat, FromFloat>(accumulator, static_cast<const uint16_t*>(srcs[0]) + begin, n);
    for (size_t s = 1; s < num_srcs; ++s) {
      widen_block<ToFloat, FromFloat>(widened, static_cast<const uint16_t*>(srcs[s]) + begin, n);
      switch (op) {
        case ReduceOp::kSum: reduce_into_typed<float, SumOp<float>>(accumulator, widened, n); break;
        case ReduceOp::kMin: reduce_into_typed<float, MinOp<float>>(accumulator, widened, n); break;
        case ReduceOp::kMax: reduce_into_typed<float, MaxOp<float>>(accumulator, widened, n); break;
        case ReduceOp::kProduct:
          reduce_into_typed<float, ProductOp<float>>(accumulator, widened, n);
          break;
      }
    }
    narrow_block<ToFloat, FromFloat>(out + begin, accumulator, n);
  }
}

template <typename T>
void scale_copy_typed(T* dst, const T* src, size_t count, double factor) {
  if constexpr (std::is_same_v<T, float>) {
    float f = static_cast<float>(factor);
    for (size_t i = 0; i < count; ++i) dst[i] = src[i] * f;
  } else if constexpr (std::is_floating_point_v<T>) {
    for (size_t i = 0; i < count; ++i) dst[i] = src[i] * factor;
  } else if constexpr (std::is_same_v<T, bool>) {
    for (size_t i = 0; i < count; ++i) dst[i] = static_cast<bool>(static_cast<double>(src[i]) * factor);
  } else {
    // Truncates toward zero, and saturates: a product outside T's range
    // (a large scale factor) would make the conversion undefined.
    constexpr double lo = static_cast<double>(std::numeric_limits<T>::min());
    constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
    for (size_t i = 0; i < count; ++i) {
      double v = static_cast<double>(src[i]) * factor;
      dst[i] = v != v    ? T(0)
               : v <= lo ? std::numeric_limits<T>::min()
               : v >= hi ? std::numeric_limits<T>::max()
                         : static_cast<T>(v);
    }
  }
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void scale_copy_half(uint16_t* dst, const uint16_t* src, size_t count, double factor) {
  float f = static_cast<float>(factor);
  float widened[kBlockElements];
  for (size_t begin = 0; begin < count; begin += kBlockElements) {
    size_t n = count - begin < kBlockElements ? count - begin : kBlockElements;
    widen_block<ToFloat, FromFloat>(widened, src + begin, n);
    for (size_t i = 0; i < n; ++i) widened[i] *= f;
    narrow_block<ToFloat, FromFloat>(dst + begin, widened, n);
  }
}

}  // namespace

void reduce_many(void* dst, const void* const* srcs, size_t num_srcs, size_t count,
                 DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kUInt8: return reduce_many_arith<uint8_t>(dst, srcs, num_srcs, count, op);
    case DataType::kInt8: return reduce_many_arith<int8_t>(dst, srcs, num_srcs, count, op);
    case DataType::kUInt16: return reduce_many_arith<uint16_t>(dst, srcs, num_srcs, count, op);
    case DataType::kInt16: return reduce_many_arith<int16_t>(dst, srcs, num_srcs, count, op);
    case DataType::kInt32: return reduce_many_arith<int32_t>(dst, srcs, num_srcs, count, op);
    case DataType::kInt64: return reduce_many_arith<int64_t>(dst, srcs, num_srcs, count, op);
    case DataType::kFloat32: return reduce_many_arith<float>(dst, srcs, num_srcs, count, op);
    case DataType::kFloat64: return reduce_many_arith<double>(dst, srcs, num_srcs, count, op);
    case DataType::kFloat16:
      return reduce_many_half<half_to_float, float_to_half>(dst, srcs, num_srcs, count, op);
    case DataType::kBFloat16:
      return reduce_many_half<bfloat16_to_float, float_to_bfloat16>(dst, srcs, num_srcs, count, op);
    case DataType::kBool: return reduce_many_bool(dst, srcs, num_srcs, count, op);
  }
  throw_error(ErrorCode::kInvalidArgument, "reduce: unknown dtype");
}

void reduce_many_scaled(void* dst, const void* const* srcs, size_t num_srcs, size_t count, DataType dtype,
                        ReduceOp op, double scale) {
  if (scale == 1.0) return reduce_many(dst, srcs, num_srcs, count, dtype, op);
  // scale_copy multiplies float32 in float and float64 in double.
  if (num_srcs >= 2 && dtype == DataType::kFloat32) {
    const float f = static_cast<float>(scale);
    return reduce_many_arith<float>(dst, srcs, num_srcs, count, op, &f);
  }
  if (num_srcs >= 2 && dtype == DataType::kFloat64) {
    return reduce_many_arith<double>(dst, srcs, num_srcs, count, op, &scale);
  }
  // The rest (and a single source, a copy): a block at a time, scaled while
  // it is in L1.
  const size_t esize = dtype_size(dtype);
  const void* few[16];
  std::vector<const void*> many;
  const void** block_srcs = few;
  if (num_srcs > 16) {
    many.resize(num_srcs);
    block_srcs = many.data();
  }
  for (size_t begin = 0; begin < count; begin += kBlockElements) {
    const size_t n = count - begin < kBlockElements ? count - begin : kBlockElements;
    for (size_t s = 0; s < num_srcs; ++s) block_srcs[s] = static_cast<const unsigned char*>(srcs[s]) + begin * esize;
    void* out = static_cast<unsigned char*>(dst) + begin * esize;
    reduce_many(out, block_srcs, num_srcs, n, dtype, op);
    scale_copy(out, out, n, dtype, scale);
  }
}

void reduce_into(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op) {
  const void* srcs[2] = {dst, src};
  reduce_many(dst, srcs, 2, count, dtype, op);
}

void scale_copy(void* dst, const void* src, size_t count, DataType dtype, double factor) {
  switch (dtype) {
    case DataType::kUInt8:
      return scale_copy_typed(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), count, factor);
    case DataType::kInt8:
      return scale_copy_typed(static_cast<int8_t*>(dst), static_cast<const int8_t*>(src), count, factor);
    case DataType::kUInt16:
      return scale_copy_typed(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count, factor);
    case DataType::kInt16:
      return scale_copy_typed(static_cast<int16_t*>(dst), static_cast<const int16_t*>(src), count, factor);
    case DataType::kInt32:
      return scale_copy_typed(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), count, factor);
    case DataType::kInt64:
      return scale_copy_typed(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), count, factor);
    case DataType::kFloat32:
      return scale_copy_typed(static_cast<float*>(dst), static_cast<const float*>(src), count, factor);
    case DataType::kFloat64:
      return scale_copy_typed(static_cast<double*>(dst), static_cast<const double*>(src), count, factor);
    case DataType::kFloat16:
      return scale_copy_half<half_to_float, float_to_half>(
          static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count, factor);
    case DataType::kBFloat16:
      return scale_copy_half<bfloat16_to_float, float_to_bfloat16>(
          static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count, factor);
    case DataType::kBool: {
      uint8_t* out = static_cast<uint8_t*>(dst);
      const uint8_t* in = static_cast<const uint8_t*>(src);
      for (size_t i = 0; i < count; ++i) out[i] = (in[i] != 0) && factor != 0.0;
      return;
    }
  }
  throw_error(ErrorCode::kInvalidArgument, "scale: unknown dtype");
}

void scale_buffer(void* data, size_t count, DataType dtype, double factor) {
  scale_copy(data, data, count, dtype, factor);
}

}  // namespace hvd
