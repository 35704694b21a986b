// reduce_test.cc - reduction kernels for every dtype and op, the 16-bit
// float conversions (round to nearest even, subnormals, inf/nan), single
// rounding in reduce_many, scaling, and the dtype/DLPack mapping.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/dtype.h"
#include "common/error.h"
#include "reduce/reduce.h"
#include "test_harness.h"

using namespace hvd;

namespace {
float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
}  // namespace

HVD_TEST(float_to_half_rounds_to_nearest_even) {
  EXPECT_EQ(float_to_half(1.0f), uint16_t(0x3c00));
  EXPECT_EQ(float_to_half(-2.0f), uint16_t(0xc000));
  EXPECT_EQ(float_to_half(-0.0f), uint16_t(0x8000));
  EXPECT_EQ(float_to_half(65504.0f), uint16_t(0x7bff));
  EXPECT_EQ(float_to_half(65519.0f), uint16_t(0x7bff));
  EXPECT_EQ(float_to_half(65520.0f), uint16_t(0x7c00));  // halfway to 65536 rounds up to inf
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), uint16_t(0x3c00));       // tie -> even
  EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), uint16_t(0x3c02));   // tie -> even (up)
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), uint16_t(0x3c01));
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), uint16_t(0x0001));  // smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), uint16_t(0x0000));  // tie -> even (zero)
  EXPECT_EQ(float_to_half(3 * std::ldexp(1.0f, -26)), uint16_t(0x0001));
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14)), uint16_t(0x0400));  // smallest normal
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::infinity()), uint16_t(0x7c00));
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
}

HVD_TEST(every_half_value_round_trips_through_float) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0);
      continue;
    }
    if (float_to_half(f) != h) ::hvd_test::fail(__FILE__, __LINE__, "half round trip failed for " + std::to_string(h));
  }
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x3555), 0.333251953125f);
}

HVD_TEST(float_to_bfloat16_rounds_to_nearest_even) {
  EXPECT_EQ(float_to_bfloat16(1.0f), uint16_t(0x3f80));
  EXPECT_EQ(float_to_bfloat16(1.0f + std::ldexp(1.0f, -8)), uint16_t(0x3f80));      // tie -> even
  EXPECT_EQ(float_to_bfloat16(1.0f + 3 * std::ldexp(1.0f, -8)), uint16_t(0x3f82));  // tie -> even (up)
  EXPECT_EQ(float_to_bfloat16(from_bits(0x3f808001)), uint16_t(0x3f81));            // above tie
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::infinity()), uint16_t(0x7f80));
  EXPECT_TRUE(std::isnan(bfloat16_to_float(float_to_bfloat16(std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t b = 0; b < 0x10000; ++b) {
    float f = bfloat16_to_float(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    if (float_to_bfloat16(f) != b) ::hvd_test::fail(__FILE__, __LINE__, "bf16 round trip failed");
  }
}

HVD_TEST(reduce_many_half_accumulates_in_float_and_rounds_once) {
  // 1 + 3 * 2^-11: adding one at a time rounds back to 1 every step; one
  // rounding of the exact sum gives 1 + 2^-9.
  uint16_t one = float_to_half(1.0f), tiny = float_to_half(std::ldexp(1.0f, -11));
  std::vector<uint16_t> a{one}, b{tiny}, c{tiny}, d{tiny}, out(1);
  const void* srcs[4] = {a.data(), b.data(), c.data(), d.data()};
  reduce_many(out.data(), srcs, 4, 1, DataType::kFloat16, ReduceOp::kSum);
  EXPECT_EQ(out[0], uint16_t(0x3c02));
  std::vector<uint16_t> sequential = a;
  for (int i = 0; i < 3; ++i) reduce_into(sequential.data(), b.data(), 1, DataType::kFloat16, ReduceOp::kSum);
  EXPECT_EQ(sequential[0], uint16_t(0x3c00));

  uint16_t bone = float_to_bfloat16(1.0f), btiny = float_to_bfloat16(std::ldexp(1.0f, -8));
  std::vector<uint16_t> e{bone}, f{btiny}, bout(1);
  const void* bsrcs[4] = {e.data(), f.data(), f.data(), f.data()};
  reduce_many(bout.data(), bsrcs, 4, 1, DataType::kBFloat16, ReduceOp::kSum);
  EXPECT_EQ(bout[0], uint16_t(0x3f82));
}

namespace {
template <typename T>
void check_ops(DataType dtype, std::vector<T> x, std::vector<T> y, std::vector<T> sum, std::vector<T> mn,
               std::vector<T> mx, std::vector<T> prod) {
  struct Case { ReduceOp op; std::vector<T> expected; } cases[] = {
      {ReduceOp::kSum, sum}, {ReduceOp::kMin, mn}, {ReduceOp::kMax, mx}, {ReduceOp::kProduct, prod}};
  for (auto& c : cases) {
    std::vector<T> d = x;
    reduce_into(d.data(), y.data(), d.size(), dtype, c.op);
    for (size_t i = 0; i < d.size(); ++i) {
      if (!(d[i] == c.expected[i])) {
        ::hvd_test::fail(__FILE__, __LINE__, std::string(dtype_name(dtype)) + " " + reduce_op_name(c.op) +
                                                 " wrong at " + std::to_string(i));
      }
    }
  }
}
}  // namespace

HVD_TEST(reduce_into_every_integer_and_float_dtype_and_op) {
  check_ops<int8_t>(DataType::kInt8, {100, -3, 5}, {100, 4, -7}, {-56, 1, -2}, {100, -3, -7}, {100, 4, 5},
                    {16, -12, -35});  // 200 wraps to -56, 10000 wraps to 16
  check_ops<uint8_t>(DataType::kUInt8, {200, 3}, {100, 4}, {44, 7}, {100, 3}, {200, 4}, {32, 12});
  check_ops<int16_t>(DataType::kInt16, {-300, 7}, {5, 9}, {-295, 16}, {-300, 7}, {5, 9}, {-1500, 63});
  check_ops<uint16_t>(DataType::kUInt16, {65535, 2}, {1, 3}, {0, 5}, {1, 2}, {65535, 3}, {65535, 6});
  check_ops<int32_t>(DataType::kInt32, {INT32_MAX, -5}, {1, 3}, {INT32_MIN, -2}, {1, -5}, {INT32_MAX, 3},
                     {INT32_MAX, -15});
  check_ops<int64_t>(DataType::kInt64, {int64_t(1) << 40, -1}, {3, -1}, {(int64_t(1) << 40) + 3, -2}, {3, -1},
                     {int64_t(1) << 40, -1}, {int64_t(3) << 40, 1});
  check_ops<float>(DataType::kFloat32, {1.5f, -2.0f}, {2.0f, 8.0f}, {3.5f, 6.0f}, {1.5f, -2.0f}, {2.0f, 8.0f},
                   {3.0f, -16.0f});
  check_ops<double>(DataType::kFloat64, {1.25, -2.0}, {2.0, 0.5}, {3.25, -1.5}, {1.25, -2.0}, {2.0, 0.5},
                    {2.5, -1.0});
  check_ops<uint8_t>(DataType::kBool, {0, 1, 0, 2}, {0, 0, 1, 1}, {0, 1, 1, 1}, {0, 0, 0, 1}, {0, 1, 1, 1},
                     {0, 0, 0, 1});
}

HVD_TEST(reduce_many_float32_long_buffers_match_scalar_loop) {
  const size_t n = 10007;  // not a multiple of the block or vector width
  std::vector<std::vector<float>> inputs(5, std::vector<float>(n));
  for (size_t s = 0; s < inputs.size(); ++s)
    for (size_t i = 0; i < n; ++i) inputs[s][i] = static_cast<float>((i * 7 + s * 13) % 17) - 8.0f;
  std::vector<const void*> srcs;
  for (auto& v : inputs) srcs.push_back(v.data());
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    std::vector<float> out(n);
    reduce_many(out.data(), srcs.data(), srcs.size(), n, DataType::kFloat32, op);
    for (size_t i = 0; i < n; ++i) {
      float expected = inputs[0][i];
      for (size_t s = 1; s < inputs.size(); ++s) {
        float v = inputs[s][i];
        if (op == ReduceOp::kSum) expected += v;
        if (op == ReduceOp::kMin) expected = std::min(expected, v);
        if (op == ReduceOp::kMax) expected = std::max(expected, v);
        if (op == ReduceOp::kProduct) expected *= v;
      }
      if (out[i] != expected) ::hvd_test::fail(__FILE__, __LINE__, "mismatch at " + std::to_string(i));
    }
  }
  // dst aliasing srcs[0] is allowed.
  std::vector<float> acc = inputs[0];
  srcs[0] = acc.data();
  reduce_many(acc.data(), srcs.data(), srcs.size(), n, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(acc[5], inputs[0][5] + inputs[1][5] + inputs[2][5] + inputs[3][5] + inputs[4][5]);
}

// reduce_many_scaled is reduce_many followed by scale_buffer, to the bit:
// every dtype and op, 1-3 sources (the destination apart, or aliasing the
// first or the second source), a count that no block or vector width
// divides, a factor that rounds (1/3; 0.1 for float32, which scales with a
// float factor) and one that overflows small integers (300.5). The inputs
// have fractions and large magnitudes, so a fused loop that skipped a
// rounding, or scaled before the operator, would differ.
HVD_TEST(reduce_many_scaled_is_reduce_many_then_scale_buffer_bit_for_bit) {
  const DataType kDtypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16,
                              DataType::kInt32,   DataType::kInt64,   DataType::kInt8,    DataType::kUInt8,
                              DataType::kInt16,   DataType::kUInt16,  DataType::kBool};
  const size_t n = 2 * 2048 + 1001;
  for (DataType dtype : kDtypes) {
    const size_t esize = dtype_size(dtype);
    std::vector<std::vector<unsigned char>> inputs(3, std::vector<unsigned char>(n * esize));
    for (size_t s = 0; s < inputs.size(); ++s) {
      for (size_t i = 0; i < n; ++i) {
        const double v = (static_cast<double>((i * 7919 + s * 104729) % 2001) - 1000.0) * 0.37;
        unsigned char* at = inputs[s].data() + i * esize;
        switch (dtype) {
          case DataType::kFloat32: *reinterpret_cast<float*>(at) = static_cast<float>(v * 1e3); break;
          case DataType::kFloat64: *reinterpret_cast<double*>(at) = v * 1e6; break;
          case DataType::kFloat16: *reinterpret_cast<uint16_t*>(at) = float_to_half(static_cast<float>(v)); break;
          case DataType::kBFloat16: *reinterpret_cast<uint16_t*>(at) = float_to_bfloat16(static_cast<float>(v)); break;
          case DataType::kBool: *at = static_cast<unsigned char>(i % (s + 2) == 0); break;
          default:  // integers: the low bytes of a spread of values
            const int64_t k = static_cast<int64_t>(v * 101.0);
            std::memcpy(at, &k, esize);
        }
      }
    }
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      for (double scale : {1.0 / 3.0, 0.1, 300.5}) {
        for (size_t sources = 1; sources <= 3; ++sources) {
          for (int alias = 0; alias < 3; ++alias) {  // 0: apart, 1: dst is srcs[0], 2: dst is srcs[1]
            if (alias == 2 && sources < 2) continue;
            std::vector<std::vector<unsigned char>> copies = inputs;
            std::vector<unsigned char> apart(n * esize), expected(n * esize);
            std::vector<const void*> srcs;
            for (size_t s = 0; s < sources; ++s) srcs.push_back(copies[s].data());
            reduce_many(expected.data(), srcs.data(), sources, n, dtype, op);
            scale_buffer(expected.data(), n, dtype, scale);
            unsigned char* dst = alias == 0 ? apart.data() : copies[alias - 1].data();
            reduce_many_scaled(dst, srcs.data(), sources, n, dtype, op, scale);
            if (std::memcmp(dst, expected.data(), expected.size()) != 0) {
              ::hvd_test::fail(__FILE__, __LINE__, std::string(dtype_name(dtype)) + " op " +
                                                       std::to_string(static_cast<int>(op)) + " scale " +
                                                       std::to_string(scale) + " sources " +
                                                       std::to_string(sources) + " alias " + std::to_string(alias));
            }
          }
        }
      }
    }
  }
}

HVD_TEST(scale_truncates_integers_toward_zero_and_rounds_halves) {
  std::vector<int32_t> ints{-7, 7, 3};
  scale_buffer(ints.data(), ints.size(), DataType::kInt32, 0.5);
  EXPECT_EQ(ints[0], -3);
  EXPECT_EQ(ints[1], 3);
  EXPECT_EQ(ints[2], 1);
  std::vector<float> floats{1.0f, -3.0f};
  std::vector<float> scaled(2);
  scale_copy(scaled.data(), floats.data(), 2, DataType::kFloat32, 0.25);
  EXPECT_EQ(scaled[0], 0.25f);
  EXPECT_EQ(scaled[1], -0.75f);
  std::vector<uint16_t> halves{float_to_half(3.0f)};
  scale_buffer(halves.data(), 1, DataType::kFloat16, 1.0 / 3.0);
  EXPECT_EQ(halves[0], float_to_half(1.0f));
  std::vector<uint16_t> bf{float_to_bfloat16(6.0f)};
  scale_buffer(bf.data(), 1, DataType::kBFloat16, 0.5);
  EXPECT_EQ(bf[0], float_to_bfloat16(3.0f));
}

// Found by fuzz_c_api (UBSan): an integer scaled past its type's range was
// converted from double without a bound, which is undefined (x86 gives the
// type's minimum for every such value). It now saturates.
HVD_TEST(scaling_integers_past_their_range_saturates) {
  std::vector<int32_t> ints{1000000000, -1000000000, 5};
  scale_buffer(ints.data(), ints.size(), DataType::kInt32, 1e10);
  EXPECT_EQ(ints[0], std::numeric_limits<int32_t>::max());
  EXPECT_EQ(ints[1], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(ints[2], std::numeric_limits<int32_t>::max());
  std::vector<int8_t> bytes{100, -100};
  scale_buffer(bytes.data(), bytes.size(), DataType::kInt8, 3.0);
  EXPECT_EQ(static_cast<int>(bytes[0]), 127);
  EXPECT_EQ(static_cast<int>(bytes[1]), -128);
  std::vector<int64_t> longs{1};
  scale_buffer(longs.data(), 1, DataType::kInt64, 1e300);
  EXPECT_EQ(longs[0], std::numeric_limits<int64_t>::max());
}

HVD_TEST(float32_scaling_uses_a_float_factor_as_horovod_does) {
  // Horovod multiplies float32 buffers by the factor rounded to float (its
  // tests compute expected values the same way): x * float(0.3), not the
  // double product rounded once.
  std::vector<float> xs;
  for (int i = 0; i < 1000; ++i) xs.push_back(static_cast<float>(i * 7919 % 2003 - 1000) * 0.37f);
  std::vector<float> scaled(xs.size());
  scale_copy(scaled.data(), xs.data(), xs.size(), DataType::kFloat32, 0.3);
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(scaled[i], xs[i] * static_cast<float>(0.3));
}

HVD_TEST(dtype_names_sizes_and_dlpack_mapping_round_trip) {
  for (int d = 0; d <= static_cast<int>(DataType::kBool); ++d) {
    DataType dtype = static_cast<DataType>(d);
    EXPECT_TRUE(dtype_from_dlpack(dtype_to_dlpack(dtype)) == dtype);
    EXPECT_EQ(dtype_to_dlpack(dtype).bits, dtype_size(dtype) * 8);
  }
  EXPECT_EQ(std::string(dtype_name(DataType::kBFloat16)), std::string("bfloat16"));
  EXPECT_EQ(std::string(reduce_op_name(ReduceOp::kProduct)), std::string("product"));
  DLDataType complex64{kDLComplex, 64, 1};
  EXPECT_THROWS_CODE(dtype_from_dlpack(complex64), ErrorCode::kUnsupported);
  DLDataType vec{kDLFloat, 32, 4};
  EXPECT_THROWS_CODE(dtype_from_dlpack(vec), ErrorCode::kUnsupported);
}

HVD_TEST(vectorized_16bit_paths_agree_with_scalar_conversions) {
  // Long buffers take the SIMD (F16C) paths; they must match the scalar
  // reference bit for bit, rounding included.
  for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
    bool half = dtype == DataType::kFloat16;
    auto to_float = half ? half_to_float : bfloat16_to_float;
    auto from_float = half ? float_to_half : float_to_bfloat16;
    std::vector<uint16_t> all(0x10000), copy(0x10000);
    for (uint32_t h = 0; h < 0x10000; ++h) all[h] = static_cast<uint16_t>(h);
    const void* same[2] = {all.data(), all.data()};
    reduce_many(copy.data(), same, 2, all.size(), dtype, ReduceOp::kMax);
    for (uint32_t h = 0; h < 0x10000; ++h) {
      if (std::isnan(to_float(all[h]))) continue;
      if (copy[h] != all[h]) ::hvd_test::fail(__FILE__, __LINE__, std::string(dtype_name(dtype)) + " max(x, x) != x");
    }
    std::vector<uint16_t> a(100003), b(a.size()), sum(a.size());
    uint32_t state = 12345;
    for (size_t i = 0; i < a.size(); ++i) {
      state = state * 1664525u + 1013904223u;
      a[i] = static_cast<uint16_t>(state >> 16);
      state = state * 1664525u + 1013904223u;
      b[i] = static_cast<uint16_t>(state >> 16);
    }
    const void* srcs[2] = {a.data(), b.data()};
    reduce_many(sum.data(), srcs, 2, a.size(), dtype, ReduceOp::kSum);
    for (size_t i = 0; i < a.size(); ++i) {
      float exact = to_float(a[i]) + to_float(b[i]);
      if (std::isnan(exact)) continue;
      if (sum[i] != from_float(exact)) {
        ::hvd_test::fail(__FILE__, __LINE__, std::string(dtype_name(dtype)) + " sum differs from scalar at " +
                                                 std::to_string(i));
      }
    }
    std::vector<uint16_t> scaled(a.size());
    scale_copy(scaled.data(), a.data(), a.size(), dtype, 0.3);
    for (size_t i = 0; i < a.size(); ++i) {
      float exact = to_float(a[i]) * 0.3f;
      if (std::isnan(exact)) continue;
      if (scaled[i] != from_float(exact)) ::hvd_test::fail(__FILE__, __LINE__, "scale differs from scalar");
    }
  }
}
