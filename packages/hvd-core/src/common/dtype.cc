// dtype.cc - sizes and names of the engine's element types and their
// translation to and from DLPack type descriptors.
#include "common/dtype.h"

#include "common/error.h"

namespace hvd {

size_t dtype_size(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
    case DataType::kInt8:
    case DataType::kBool:
      return 1;
    case DataType::kUInt16:
    case DataType::kInt16:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  throw_error(ErrorCode::kInvalidArgument,
              "unknown dtype code " + std::to_string(static_cast<int>(dtype)));
}

const char* dtype_name(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8: return "uint8";
    case DataType::kInt8: return "int8";
    case DataType::kUInt16: return "uint16";
    case DataType::kInt16: return "int16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kBool: return "bool";
  }
  return "unknown";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProduct: return "product";
  }
  return "unknown";
}

DataType dtype_from_dlpack(const DLDataType& dl) {
  auto describe = [&]() {
    return "DLPack dtype (code " + std::to_string(dl.code) + ", bits " + std::to_string(dl.bits) +
           ", lanes " + std::to_string(dl.lanes) + ")";
  };
  if (dl.lanes != 1) {
    throw_error(ErrorCode::kUnsupported,
                describe() + ": vector types (lanes != 1) are not supported; pass a scalar dtype");
  }
  switch (dl.code) {
    case kDLInt:
      if (dl.bits == 8) return DataType::kInt8;
      if (dl.bits == 16) return DataType::kInt16;
      if (dl.bits == 32) return DataType::kInt32;
      if (dl.bits == 64) return DataType::kInt64;
      break;
    case kDLUInt:
      if (dl.bits == 8) return DataType::kUInt8;
      if (dl.bits == 16) return DataType::kUInt16;
      // Some frameworks describe bool as uint1.
      if (dl.bits == 1) return DataType::kBool;
      break;
    case kDLFloat:
      if (dl.bits == 16) return DataType::kFloat16;
      if (dl.bits == 32) return DataType::kFloat32;
      if (dl.bits == 64) return DataType::kFloat64;
      break;
    case kDLBfloat:
      if (dl.bits == 16) return DataType::kBFloat16;
      break;
    case kDLBool:
      if (dl.bits == 8) return DataType::kBool;
      break;
    case kDLComplex:
      throw_error(ErrorCode::kUnsupported, describe() + ": complex tensors are not supported");
    default:
      break;
  }
  throw_error(ErrorCode::kUnsupported, describe() + " is not a type hvd can move");
}

DLDataType dtype_to_dlpack(DataType dtype) {
  DLDataType dl;
  dl.lanes = 1;
  dl.bits = static_cast<uint8_t>(dtype_size(dtype) * 8);
  switch (dtype) {
    case DataType::kUInt8:
    case DataType::kUInt16:
      dl.code = kDLUInt;
      break;
    case DataType::kInt8:
    case DataType::kInt16:
    case DataType::kInt32:
    case DataType::kInt64:
      dl.code = kDLInt;
      break;
    case DataType::kFloat16:
    case DataType::kFloat32:
    case DataType::kFloat64:
      dl.code = kDLFloat;
      break;
    case DataType::kBFloat16:
      dl.code = kDLBfloat;
      break;
    case DataType::kBool:
      dl.code = kDLBool;
      break;
  }
  return dl;
}

}  // namespace hvd
