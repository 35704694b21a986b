# xla_handlers_jax.py - rank side of test_xla_handlers_jax.py: hvd-tensorflow's
# XLA FFI handlers (xla_ffi_handlers.cc, built with
# HVD_XLA_FFI_EXPORTED_HANDLERS) registered with JAX's XLA and called from
# jit-compiled JAX programs on the host or on a CUDA GPU. The handlers are
# the code TensorFlow's XLA runs for tf.function(jit_compile=True); JAX only
# supplies an XLA runtime where no CUDA build of TensorFlow is at hand. Each
# collective's result is checked against numpy on the same data.
"""Rank programs for test_xla_handlers_jax.py."""

import ctypes
import os
import tempfile

import numpy as np

from rank_programs.checklist import run_checks

SUM, AVERAGE, MAX = 1, 0, 4  # Horovod's reduce-op numbers (horovod.common.basics)


def every_handler_matches_numpy(platform, library, expect_transport=None):
    """Runs every check on `platform` ("cpu" or "cuda"); returns {check: outcome}."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # ranks share the GPU
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import horovod.common as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    lib = ctypes.CDLL(library)
    suffix, xla_platform = {"cpu": ("host", "Host"), "cuda": ("cuda", "CUDA")}[platform]
    for target in ("allreduce", "reducescatter", "allgather", "broadcast", "alltoall", "join"):
        handler = getattr(lib, "hvd_xla_%s_%s" % (target, suffix))
        jax.ffi.register_ffi_target("hvd_" + target, jax.ffi.pycapsule(handler), platform=xla_platform)
    device = jax.devices("gpu" if platform == "cuda" else "cpu")[0]

    def call(target, results, *operands, **attrs):
        """Runs one custom call of `target` in a jit-compiled program on `device`; returns numpy results."""
        shapes = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in results]
        fn = jax.jit(lambda *xs: jax.ffi.ffi_call("hvd_" + target, shapes)(*xs, **attrs))
        placed = [jax.device_put(jnp.asarray(x), device) for x in operands]
        out = fn(*placed)
        assert all(device in o.devices() for o in out), "results left the device"
        return [np.asarray(o) for o in out]

    def reduce_attrs(name, op, prescale=1.0, postscale=1.0):
        return dict(op_type="HorovodAllreduce", name=name, reduce_op=np.int32(op),
                    prescale_factor=np.float64(prescale), postscale_factor=np.float64(postscale),
                    process_set_id=np.int32(0))

    def data(r, shape, dtype):
        """Rank r's input: distinct per rank, exact in every dtype used."""
        return ((np.arange(int(np.prod(shape))) % 13 + r + 1).reshape(shape)).astype(dtype)

    dtypes = [np.float32, np.float16, jnp.bfloat16, np.float64, np.int32, np.int64, np.uint8]

    def allreduce_sum_every_dtype():
        bad = {}
        for dtype in dtypes:
            d = np.dtype(dtype)
            got, = call("allreduce", [((40, 3), d)], data(rank, (40, 3), d),
                        **reduce_attrs("sum." + d.name, SUM))
            want = sum(data(r, (40, 3), d).astype(np.float64) for r in range(size)).astype(d)
            if got.dtype != d or not np.array_equal(got, want):
                bad[d.name] = [str(got.dtype), got.ravel()[:4].tolist(), want.ravel()[:4].tolist()]
        return bad or None

    def allreduce_average_max_and_scaling():
        x = data(rank, (1000,), np.float32)
        got, = call("allreduce", [((1000,), np.float32)], x, **reduce_attrs("avg", AVERAGE))
        want = sum(data(r, (1000,), np.float32) for r in range(size)) / size
        if not np.allclose(got, want):
            return "average"
        got, = call("allreduce", [((1000,), np.float32)], x, **reduce_attrs("max", MAX))
        if not np.array_equal(got, data(size - 1, (1000,), np.float32)):
            return "max"
        got, = call("allreduce", [((1000,), np.float32)], x, **reduce_attrs("scaled", SUM, 0.5, 3.0))
        want = sum(data(r, (1000,), np.float32) for r in range(size)) * 1.5
        return None if np.allclose(got, want) else "pre/postscale"

    def grouped_allreduce_of_three():
        shapes = [(5,), (300, 2), (7, 1)]
        xs = [data(rank, s, np.float32) * (i + 1) for i, s in enumerate(shapes)]
        got = call("allreduce", [(s, np.float32) for s in shapes], *xs, **reduce_attrs("group", SUM))
        for i, s in enumerate(shapes):
            want = sum(data(r, s, np.float32) * (i + 1) for r in range(size))
            if not np.array_equal(got[i], want):
                return "member %d" % i
        return None

    def allgather_of_uneven_first_dims():
        rows = [r + 1 for r in range(size)]
        got, = call("allgather", [((sum(rows), 3), np.float32)], data(rank, (rows[rank], 3), np.float32),
                    op_type="HorovodAllgather", name="gather", process_set_id=np.int32(0))
        want = np.concatenate([data(r, (rows[r], 3), np.float32) for r in range(size)])
        return None if np.array_equal(got, want) else [got.tolist(), want.tolist()]

    def allgather_refuses_a_shape_the_program_was_not_compiled_for():
        try:
            call("allgather", [((size + 5, 3), np.float32)], data(rank, (1, 3), np.float32),
                 op_type="HorovodAllgather", name="gather.wrong", process_set_id=np.int32(0))
        except Exception as e:
            return None if "compiled for" in str(e) else str(e)
        return "no error"

    def broadcast_from_the_last_rank():
        root = size - 1
        got, = call("broadcast", [((64,), np.int64)], data(rank, (64,), np.int64),
                    op_type="HorovodBroadcast", name="bcast", root_rank=np.int32(root), process_set_id=np.int32(0))
        return None if np.array_equal(got, data(root, (64,), np.int64)) else got[:4].tolist()

    def reducescatter_gives_each_rank_its_slice():
        x = data(rank, (size * 4, 2), np.float32)
        got, = call("reducescatter", [((4, 2), np.float32)], x,
                    **dict(reduce_attrs("rs", SUM), op_type="HorovodReducescatter"))
        total = sum(data(r, (size * 4, 2), np.float32) for r in range(size))
        return None if np.array_equal(got, total[rank * 4:(rank + 1) * 4]) else got.tolist()

    def alltoall_with_uneven_splits():
        # rank r sends j + 1 rows to rank j, each row filled with r
        splits = np.array([j + 1 for j in range(size)], dtype=np.int64)
        x = np.full((int(splits.sum()), 2), rank, dtype=np.float32)
        received = np.array([rank + 1] * size, dtype=np.int64)
        got, = call("alltoall", [((int(received.sum()), 2), np.float32)], x,
                    op_type="HorovodAlltoall", name="a2a", process_set_id=np.int32(0), splits=splits,
                    received_splits=received)
        want = np.concatenate([np.full((rank + 1, 2), j, dtype=np.float32) for j in range(size)])
        return None if np.array_equal(got, want) else got.tolist()

    def join_on_this_platform():
        try:
            got, = call("join", [((), np.int32)], op_type="HorovodJoin", name="join", process_set_id=np.int32(0))
        except Exception as e:
            if platform == "cuda":
                return None if "not supported" in str(e) else str(e)
            return str(e)
        if platform == "cuda":
            return "join ran on the GPU"
        return None if 0 <= int(got) < size else int(got)

    def transport():
        if not expect_transport:
            return None
        timeline = os.path.join(tempfile.mkdtemp(), "timeline.json")
        hvd.start_timeline(timeline)
        call("allreduce", [((1000,), np.float32)], data(rank, (1000,), np.float32), **reduce_attrs("probe", SUM))
        hvd.stop_timeline()
        if rank != 0:
            return None
        text = open(timeline).read()
        return None if expect_transport in text else text[-1500:]

    checks = [allreduce_sum_every_dtype, allreduce_average_max_and_scaling, grouped_allreduce_of_three,
              allgather_of_uneven_first_dims, allgather_refuses_a_shape_the_program_was_not_compiled_for,
              broadcast_from_the_last_rank, reducescatter_gives_each_rank_its_slice, alltoall_with_uneven_splits,
              join_on_this_platform, transport]
    return run_checks(checks)
