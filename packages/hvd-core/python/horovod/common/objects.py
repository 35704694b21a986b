# objects.py - how Python objects become bytes for broadcast_object and
# allgather_object, shared by every binding so all of them accept the same
# objects and produce the same payloads.
"""Serialization of Python objects for the object collectives."""

import io

import numpy as np

try:
    # cloudpickle also handles lambdas and classes defined inside functions,
    # which end up in checkpoints and states users broadcast; the standard
    # pickle serves everything else when it is not installed.
    import cloudpickle as _pickle
except ImportError:  # pragma: no cover - cloudpickle is installed wherever the tests run
    import pickle as _pickle


def dump_object(obj):
    """`obj` pickled into a new uint8 array (writable, as the engine needs)."""
    buf = io.BytesIO()
    _pickle.dump(obj, buf)
    return np.frombuffer(buf.getbuffer(), dtype=np.uint8).copy()


def load_object(data):
    """The object pickled in `data` (a uint8 array or bytes-like)."""
    return _pickle.loads(np.asarray(data, dtype=np.uint8).tobytes())
