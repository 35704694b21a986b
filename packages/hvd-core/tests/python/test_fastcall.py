# test_fastcall.py - the optional C accelerator of the synchronous numpy and
# torch calls (packages/hvd-core/pyext/fastcall.c, _hvd_fastcall.abi3.so
# next to libhvd_core): built and found, switched off by HVD_FASTCALL=0, and
# giving exactly what the ctypes path gives, errors included. Interrupted
# waits through it: test_interrupts.py. Rank side: rank_programs/fastcall.py.
import os
import subprocess
import sys

import ranks
from horovod.common import config


def _accelerator_path():
    return os.path.join(os.path.dirname(config.get_library_path()), "_hvd_fastcall.abi3.so")


def test_accelerator_is_built_next_to_the_library_and_links_no_libpython():
    path = _accelerator_path()
    assert os.path.isfile(path), "no %s: hvd-core was built without Python headers" % path
    dynamic = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    needed = [line for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert not [line for line in needed if "libpython" in line or "libhvd_core" in line], needed


def _loaded(env_value):
    env = dict(os.environ)
    env.pop("HVD_FASTCALL", None)
    if env_value is not None:
        env["HVD_FASTCALL"] = env_value
    code = "from horovod.common import engine_calls; print(type(engine_calls.fastcall()).__name__)"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                          timeout=60).stdout.strip()


def test_accelerator_loads_by_default_and_hvd_fastcall_0_turns_it_off():
    assert _loaded(None) == "module"
    assert _loaded("1") == "module"
    assert _loaded("0") == "bool"
    assert _loaded("off") == "bool"


def test_every_synchronous_call_gives_the_same_with_and_without_the_accelerator():
    on = ranks.run_program_ok(2, "fastcall:every_call_either_way", timeout=240)
    off = ranks.run_program_ok(2, "fastcall:every_call_either_way", timeout=240, env={"HVD_FASTCALL": "0"})
    for rank in range(2):
        assert on[rank]["accelerator_loaded"] and not off[rank]["accelerator_loaded"]
        assert len(on[rank]["outcomes"]) == len(off[rank]["outcomes"]) > 0
        for with_it, without in zip(on[rank]["outcomes"], off[rank]["outcomes"]):
            label, tag, call, accelerated = with_it[:4]
            assert not without[3], without
            # Results and errors alike, byte for byte.
            assert with_it[:3] + with_it[4:] == without[:3] + without[4:], (rank, with_it, without)
            # Every call on a plain array goes through it, but bfloat16 ones:
            # numpy cannot export that dtype through the buffer protocol.
            if tag.endswith(".plain") and not tag.startswith("bfloat16"):
                assert accelerated, (rank, with_it[:5])
    statuses = {tuple(o[:2]): o[4] for o in on[0]["outcomes"]}
    # The cases meant to fail did, the same way on both paths.
    assert statuses[("allreduce_", "float32.read_only")] == "error"
    assert statuses[("allreduce", "float32.read_only")] == "ok"
    assert statuses[("allreduce", "float32.strided")] == "error"


def test_the_table_of_repeated_calls_tells_every_argument_apart():
    # Each case runs three times in a row: the first makes the block, the
    # other two find it in the accelerator's table (the C lookup by op,
    # factors, shape, dtype, name, in place, root rank). A wrong match would
    # give another case's result.
    for outcomes in ranks.run_program_ok(2, "fastcall:table_tells_calls_apart", timeout=120):
        for label, right, hits in outcomes:
            assert right, (label, outcomes)
        hits = {label: hits for label, _, hits in outcomes}
        # An equal name in another string object finds the "sum" block at once;
        # an ndarray subclass is left to the general path. Allgather and
        # reducescatter results come back as arrays made in C up to 64 KiB,
        # as the engine's memory above that.
        expected = {label: 2 for label in hits}
        expected.update({"equal name, another string": 3, "subclass": 0, "200 names": 200, "input untouched": 0})
        # Only the large allgather hands the engine's memory over.
        assert [label for label in hits if label.endswith("(handed over)")] == [
            "allgather above the copy limit (handed over)"], hits
        assert hits == expected


def test_large_results_from_the_table_are_arrays_over_the_engine_memory():
    # Above the copy limit the accelerator hands the engine's result memory
    # to numpy (an array made in C that frees it with the last reference):
    # right values, dtypes and flags, independent results, views and a
    # result kept past shutdown that stay valid, nothing piling up.
    for failures, handovers in ranks.run_program_ok(2, "fastcall:table_hands_over_large_results", timeout=120):
        assert failures == []
        # Every repeat of each case, and each of the 300 dropped results.
        assert handovers >= 300 + 3 * 2 + 2, handovers


def test_a_numpy_whose_array_layout_differs_is_not_read_by_header():
    # bind_numpy checks the header fields it reads against the buffer
    # protocol; given probes that do not match, it declines, and repeated
    # calls go through the buffer-protocol path with the same results.
    code = """
import numpy as np
from horovod.common import engine_calls
fast = engine_calls.fastcall()
plain, view = np.zeros((3, 5), np.float32), np.zeros((4, 6), np.int16)[::2, 1:]
view.flags.writeable = False
print(fast.bind_numpy(np.ndarray, np.empty, plain, plain.dtype, view, view.dtype))
print(fast.bind_numpy(np.ndarray, np.empty, plain, view.dtype, view, view.dtype))
print(fast.bind_numpy(np.ndarray, np.empty, view, view.dtype, plain, plain.dtype))
import horovod.common as hvd
hvd.init()
x = np.arange(4, dtype=np.float32)
print([hvd.allreduce(x, op=hvd.Sum, name="x").tolist() for _ in range(3)])
print(engine_calls._fast.run_cached(engine_calls.thread_sync().table, 1, x, False, "x", 1, 0, 1.0, 1.0, 0))
hvd.shutdown()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:5] == ["True", "False", "False", str([[0.0, 1.0, 2.0, 3.0]] * 3), "None"]
