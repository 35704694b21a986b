/*
 * hvd/dlpack.h - the DLPack tensor descriptor, as hvd's C ABI uses it.
 *
 * DLPack is the cross-framework convention for describing a tensor in memory.
 * The struct layouts and enum values below are that convention's (version 0.8
 * / 1.x "unversioned" DLTensor and DLManagedTensor); they are what every
 * framework's from_dlpack/to_dlpack produces and consumes. The include guard
 * is DLPack's own, so this header and an upstream dlpack.h can be included in
 * either order: whichever comes first defines the types, and the layouts are
 * identical.
 */
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where the memory of a tensor lives. Values are fixed by DLPack. */
typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

/* Element type class. Values are fixed by DLPack. */
typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U
} DLDataTypeCode;

typedef struct {
  uint8_t code;   /* a DLDataTypeCode */
  uint8_t bits;   /* bits per lane, e.g. 32 for float32 */
  uint16_t lanes; /* 1 for scalar element types */
} DLDataType;

typedef struct {
  void* data;            /* base pointer; element 0 is at data + byte_offset */
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;        /* ndim entries */
  int64_t* strides;      /* ndim entries in elements, or NULL for row-major compact */
  uint64_t byte_offset;
} DLTensor;

/* A DLTensor plus the means to release it. The consumer calls deleter(self)
 * exactly once when it no longer needs the memory. */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensor* self);
} DLManagedTensor;

#ifdef __cplusplus
}
#endif

#endif /* DLPACK_DLPACK_H_ */
