# compression.py - the framework-neutral half of Horovod's gradient
# compression: the Compressor interface, the no-op compressor and the
# 16-bit cast compressor's logic. Each binding (horovod.torch,
# horovod.tensorflow) subclasses CastCompressor with its own dtype test and
# cast, and exposes Horovod's names (FP16Compressor, Compression.fp16, ...).
"""Gradient compression shared by the framework bindings."""

__all__ = ["Compressor", "NoneCompressor", "CastCompressor"]


class Compressor(object):
    """Base class of the compressors: compress() before the exchange, decompress() after it."""

    @staticmethod
    def compress(tensor):
        """Returns the tensor to send and a context object that decompress() will need."""
        pass

    @staticmethod
    def decompress(tensor, ctx):
        """Turns a received tensor back into the original form, using the context from compress()."""
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


class CastCompressor(Compressor):
    """Casts floating-point tensors to `wire_dtype` for the allreduce and back after it.

    Only floating-point tensors of another dtype are cast; integers and
    tensors already in the wire dtype travel as they are (Horovod's
    FP16Compressor behaves the same way). The original dtype is the context
    decompress() restores. Subclasses set `wire_dtype` and implement
    `_is_floating(dtype)` and `_cast(tensor, dtype)` for their framework.
    """
    wire_dtype = None

    @staticmethod
    def _is_floating(dtype):
        raise NotImplementedError

    @staticmethod
    def _cast(tensor, dtype):
        raise NotImplementedError

    @classmethod
    def compress(cls, tensor):
        """Downcasts a floating-point tensor to the wire dtype."""
        dtype = tensor.dtype
        if cls._is_floating(dtype) and dtype != cls.wire_dtype:
            tensor = cls._cast(tensor, cls.wire_dtype)
        return tensor, dtype

    @classmethod
    def decompress(cls, tensor, ctx):
        """Casts the tensor back to the dtype it had before compress()."""
        if ctx is not None and cls._is_floating(ctx) and tensor.dtype != ctx:
            tensor = cls._cast(tensor, ctx)
        return tensor
