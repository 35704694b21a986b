# compression.py - gradient compression for allreduce: what travels on the
# wire is whatever dtype compress() returns; the engine reduces float16 and
# bfloat16 natively, so the 16-bit compressors halve the bytes sent, at the
# cost of precision. Class names and the Compression namespace are Horovod's,
# so `compression=hvd.Compression.fp16` keeps working.
"""Gradient compression algorithms."""

import tensorflow as tf

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
    # Shared by the 16-bit compressors. Only floating-point tensors are cast
    # (integers would lose values, as in Horovod's FP16Compressor); the
    # original dtype is the context that decompress() restores.
    wire_dtype = None

    @classmethod
    def compress(cls, tensor):
        """Casts floating-point tensors to the 16-bit wire type."""
        dtype = tensor.dtype
        if dtype.is_floating and dtype != cls.wire_dtype:
            tensor = tf.cast(tensor, cls.wire_dtype)
        return tensor, dtype

    @classmethod
    def decompress(cls, tensor, ctx):
        """Casts the tensor back to the dtype it had before compress()."""
        if ctx is not None and ctx.is_floating and tensor.dtype != ctx:
            tensor = tf.cast(tensor, ctx)
        return tensor


class FP16Compressor(_CastCompressor):
    """Compress all floating point gradients to 16-bit."""
    wire_dtype = tf.float16


class BF16Compressor(_CastCompressor):
    """Compress all floating point gradients to bfloat16: 16 bits with
    float32's exponent range, so large gradients do not overflow as they can
    in float16 (an hvd addition; Horovod has none and fp16 only)."""
    wire_dtype = tf.bfloat16


class Compression(object):
    """Optional gradient compression algorithm used during allreduce."""

    """Do not compress the gradients. This is the default."""
    none = NoneCompressor

    """Compress all floating point gradients to 16-bit."""
    fp16 = FP16Compressor

    """Compress all floating point gradients to bfloat16."""
    bf16 = BF16Compressor
