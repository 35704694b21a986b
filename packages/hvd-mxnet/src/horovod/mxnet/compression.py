# compression.py - gradient compression for DistributedTrainer's allreduce:
# the 16-bit cast logic is hvd-core's, bound here to MXNet's dtypes and cast.
# Class names and the Compression namespace match Horovod's, so
# `compression=hvd.Compression.fp16` keeps working.
"""Gradient compression algorithms."""

import numpy as np

from horovod.common.compression import CastCompressor, Compressor, NoneCompressor  # noqa: F401
from horovod.mxnet._engine_bridge import BFLOAT16

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "Compression"]


class FP16Compressor(CastCompressor):
    """Sends floating-point NDArrays (bfloat16 too) as float16 and casts the result back to their own dtype."""
    wire_dtype = np.float16

    @staticmethod
    def _is_floating(dtype):
        # bfloat16 counts as floating point, as in Horovod's FP16Compressor and
        # hvd-torch's: it travels as float16 (same size, more precision, less range).
        dtype = np.dtype(dtype)
        return np.issubdtype(dtype, np.floating) or dtype == BFLOAT16

    @staticmethod
    def _cast(tensor, dtype):
        return tensor.astype(dtype, copy=False)


class Compression(object):
    """The compressors that can be passed as `compression=` to DistributedTrainer."""

    """No compression: gradients travel in their own dtype (the default)."""
    none = NoneCompressor

    """Floating-point gradients travel as float16."""
    fp16 = FP16Compressor
