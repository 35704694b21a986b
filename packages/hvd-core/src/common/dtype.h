// dtype.h - element types the engine moves and reduces, and their mapping
// from DLPack descriptors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "hvd/dlpack.h"

namespace hvd {

enum class DataType : uint8_t {
  kUInt8 = 0,
  kInt8 = 1,
  kUInt16 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat16 = 6,
  kBFloat16 = 7,
  kFloat32 = 8,
  kFloat64 = 9,
  kBool = 10,
};

// Reduction operators the transports implement. Average is Sum followed by a
// postscale of 1/size, done by the engine; Adasum is not a transport op.
enum class ReduceOp : uint8_t { kSum = 0, kMin = 1, kMax = 2, kProduct = 3 };

size_t dtype_size(DataType dtype);
const char* dtype_name(DataType dtype);  // Horovod's spelling: "float32", "bfloat16", ...
const char* reduce_op_name(ReduceOp op);
// Throws Error(kInvalidArgument / kUnsupported) naming the dtype when DLPack
// describes something the engine cannot move (complex, lanes != 1, ...).
DataType dtype_from_dlpack(const DLDataType& dl);
DLDataType dtype_to_dlpack(DataType dtype);

}  // namespace hvd
