# compression.py - gradient compression for allreduce. The wire format is
# whatever dtype compress() returns; the core reduces it natively (it knows
# float16 and bfloat16), so compression halves bytes on the wire at the cost
# of precision. Class names and the Compression namespace match Horovod's so
# `compression=hvd.Compression.fp16` keeps working.
"""Gradient compression algorithms."""

import torch

from horovod.common.compression import CastCompressor, Compressor, NoneCompressor  # noqa: F401

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "BF16Compressor", "Compression"]


class _FrameworkCast(CastCompressor):
    # The 16-bit compressors' logic lives in hvd-core; this binds it to
    # this framework's dtypes and cast.
    @staticmethod
    def _is_floating(dtype):
        return dtype.is_floating_point

    @staticmethod
    def _cast(tensor, dtype):
        return tensor.type(dtype)


class FP16Compressor(_FrameworkCast):
    """Sends floating-point tensors as float16 and casts the result back to their own dtype."""
    wire_dtype = torch.float16


class BF16Compressor(_FrameworkCast):
    """Sends floating-point tensors as bfloat16 (16-bit, float32's exponent
    range, so large gradients do not overflow as they can with fp16)."""
    wire_dtype = torch.bfloat16


class Compression(object):
    """The compressors that can be passed as `compression=` to the allreduce-based APIs."""

    """No compression: tensors travel in their own dtype (the default)."""
    none = NoneCompressor

    """Floating-point tensors travel as float16."""
    fp16 = FP16Compressor

    """Floating-point tensors travel as bfloat16."""
    bf16 = BF16Compressor
