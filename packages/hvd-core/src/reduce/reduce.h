// reduce.h - element-wise reduction and scaling kernels for every DataType.
// float16 and bfloat16 are widened to float32 for arithmetic and rounded
// (round-to-nearest-even) once per output element.
#pragma once

#include <cstddef>

#include "common/dtype.h"

namespace hvd {

// dst[i] = dst[i] (op) src[i]
void reduce_into(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op);
// dst[i] = srcs[0][i] (op) srcs[1][i] ... (op) srcs[n-1][i]; for float16 and
// bfloat16 the accumulation runs in float32 and rounds once. dst may alias srcs[0].
void reduce_many(void* dst, const void* const* srcs, size_t num_srcs, size_t count,
                 DataType dtype, ReduceOp op);
// reduce_many, then every element multiplied by `scale` as scale_buffer
// does (the same results), a block at a time while the block is in L1.
void reduce_many_scaled(void* dst, const void* const* srcs, size_t num_srcs, size_t count, DataType dtype,
                        ReduceOp op, double scale);
// data[i] *= factor (computed in double for integers, float for 16-bit
// floats); integer results truncate toward zero, as Horovod's scaling does.
void scale_buffer(void* data, size_t count, DataType dtype, double factor);
// dst[i] = src[i] * factor (copy and scale in one pass).
void scale_copy(void* dst, const void* src, size_t count, DataType dtype, double factor);

// float16 / bfloat16 <-> float conversions (round to nearest even).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bfloat16_to_float(uint16_t b);
uint16_t float_to_bfloat16(float f);

}  // namespace hvd
