# codec.py - Horovod's horovod.runner.common.util.codec: Python objects as
# base64 text, for passing them on command lines and in environment variables.
"""Serializing objects to base64 text."""

import base64

import cloudpickle

__all__ = ["dumps_base64", "loads_base64"]


def dumps_base64(obj, to_ascii=True):
    """`obj` pickled with cloudpickle and base64-encoded: a str when `to_ascii`, else bytes."""
    encoded = base64.b64encode(cloudpickle.dumps(obj))
    return encoded.decode("ascii") if to_ascii else encoded


def loads_base64(encoded):
    """The object `dumps_base64` encoded (str or bytes)."""
    return cloudpickle.loads(base64.b64decode(encoded))
