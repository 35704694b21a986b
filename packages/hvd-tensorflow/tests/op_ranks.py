# op_ranks.py - runs TensorFlow snippets as N real hvd ranks
# (horovod.common.testing) with `import horovod.tensorflow.mpi_ops as ops`
# in front; TF kept to few threads since ranks share two cores.
"""Helpers to run TensorFlow snippets as N real hvd ranks."""

from horovod.common import testing

PREAMBLE = """
import json, os, sys, time
import numpy as np
import tensorflow as tf
tf.config.threading.set_inter_op_parallelism_threads(2)
tf.config.threading.set_intra_op_parallelism_threads(1)  # and one inside each op
import horovod.tensorflow.mpi_ops as ops
"""

ENV = {"TF_CPP_MIN_LOG_LEVEL": "3", "OMP_NUM_THREADS": "1"}


def run(size, code, timeout=180, env=None):
    return testing.run(size, code, preamble=PREAMBLE, timeout=timeout, env=dict(ENV, **(env or {})))


def run_ok(size, code, timeout=180, env=None):
    return testing.run_ok(size, code, preamble=PREAMBLE, timeout=timeout, env=dict(ENV, **(env or {})))
