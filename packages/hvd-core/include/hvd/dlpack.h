/*
 * hvd/dlpack.h - the tensor descriptor hvd's C ABI passes: DLPack's.
 *
 * The ABI uses DLPack's unversioned DLTensor, DLDataType, DLDevice and
 * DLManagedTensor, whose layouts have not changed since DLPack 0.6. The
 * header that comes with hvd-core is DLPack 1.1's, unchanged
 * (include/dlpack/dlpack.h, Apache-2.0: include/dlpack/LICENSE), so it also
 * offers DLPACK_MAJOR_VERSION/DLPACK_MINOR_VERSION and
 * DLManagedTensorVersioned. A program that includes another copy of
 * dlpack.h first (PyTorch's, XLA's) gets that one's definitions through the
 * shared include guard; the types the ABI uses are the same in every DLPack
 * release it may be.
 */
#ifndef HVD_DLPACK_H_
#define HVD_DLPACK_H_

#include "dlpack/dlpack.h"

#endif /* HVD_DLPACK_H_ */
