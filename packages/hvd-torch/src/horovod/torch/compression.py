# compression.py - gradient compression for allreduce. The wire format is
# whatever dtype compress() returns; the core reduces it natively (it knows
# float16 and bfloat16), so compression halves bytes on the wire at the cost
# of precision. Class names and the Compression namespace match Horovod's so
# `compression=hvd.Compression.fp16` keeps working.
"""Gradient compression algorithms."""

import torch

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "BF16Compressor", "Compression"]


class Compressor(object):
    """Interface for compressing and decompressing a given tensor."""

    @staticmethod
    def compress(tensor):
        """Compresses a tensor and returns it with the context needed to decompress it."""
        pass

    @staticmethod
    def decompress(tensor, ctx):
        """Decompress the tensor with the given context."""
        pass


class NoneCompressor(Compressor):
    """Default no-op compression."""

    @staticmethod
    def compress(tensor):
        """Returns the tensor unmodified."""
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        """Returns the tensor unmodified."""
        return tensor


class _CastCompressor(Compressor):
    # Shared by the 16-bit compressors: only floating-point tensors wider
    # than the wire dtype are cast; integers and already-narrow floats travel
    # as they are (Horovod's FP16Compressor behaves the same way), and the
    # original dtype is the context that decompress() restores.
    wire_dtype = None

    @classmethod
    def compress(cls, tensor):
        """Downcasts the tensor to the 16-bit wire type."""
        ctx = tensor.dtype
        if tensor.dtype.is_floating_point and tensor.dtype != cls.wire_dtype:
            tensor = tensor.type(cls.wire_dtype)
        return tensor, ctx

    @classmethod
    def decompress(cls, tensor, ctx):
        """Upcasts the tensor to the initialization dtype."""
        if ctx is not None and ctx.is_floating_point and tensor.dtype != ctx:
            tensor = tensor.type(ctx)
        return tensor


class FP16Compressor(_CastCompressor):
    """Compress all floating point gradients to 16-bit."""
    wire_dtype = torch.float16


class BF16Compressor(_CastCompressor):
    """Compress all floating point gradients to bfloat16 (16-bit, float32's exponent
    range, so large gradients do not overflow as they can with fp16)."""
    wire_dtype = torch.bfloat16


class Compression(object):
    """Optional gradient compression algorithm used during allreduce."""

    """Do not compress the gradients. This is the default."""
    none = NoneCompressor

    """Compress all floating point gradients to 16-bit."""
    fp16 = FP16Compressor

    """Compress all floating point gradients to bfloat16."""
    bf16 = BF16Compressor
