# test_collectives.py - every collective x dtype x op at 1, 2, 3 and 4 real
# ranks; each rank checks its result against a reference it computes from
# the deterministic inputs of all ranks (rank_programs/collectives.py).
import json

import pytest

import ranks

SIZES = [1, 2, 3, 4]


# Small host allreduces can carry their inputs to the coordinator, which
# reduces them (by default only in sets that span hosts; forced here with
# HVD_INLINE_ALLREDUCE_BYTES), or go through the transport. Both must give
# the reference results.
PATHS = {"inline_when_small": {"HVD_INLINE_ALLREDUCE_BYTES": "4096"},
         "transport_only": {"HVD_INLINE_ALLREDUCE_BYTES": "0"}}


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("np_", SIZES)
def test_allreduce_every_dtype_and_op_matches_reference(np_, path):
    results = ranks.run_program_ok(np_, "collectives:allreduce_every_dtype_and_op", timeout=180, env=PATHS[path])
    for rank, failures in enumerate(results):
        assert failures == [], "rank %d: wrong allreduce results for %s" % (rank, failures)


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("np_", SIZES)
def test_allreduce_applies_scale_factors_in_place_and_async(np_, path):
    results = ranks.run_program_ok(np_, "collectives:allreduce_scale_factors_inplace_and_async", env=PATHS[path])
    for res in results:
        assert all(res.values()), res


# Host allreduces of 2 MiB up to 8 MiB among ranks that spin go through the
# shm transport's single-copy reduce-scatter + allgather (spinning forced, so
# that P=3 takes that path on 2 CPUs too), or its slots when a rank may not
# read the others' memory ("deny-for-tests": the first such call
# falls back on every rank together). Every rank must hold the reference, and
# the very same bytes as every other rank.
# "shm_slots_streamed": the slots only, what each rank writes for the others
# with streaming stores (HVD_SHM_STREAM=1). "yielding_small_chunks": ranks
# that yield instead of spinning, whose 1 MiB slots take a large allreduce
# in chunks of 256 KiB (HVD_SHM_CHUNK=small; unset, rank 0 times both).
LARGE_ALLREDUCE_KNOBS = {"default": {"HOROVOD_SPIN_WAIT": "1"},
                         "shm_read_denied": {"HOROVOD_SPIN_WAIT": "1", "HVD_SHM_SINGLE_COPY": "deny-for-tests"},
                         "shm_slots_streamed": {"HOROVOD_SPIN_WAIT": "1", "HVD_SHM_SINGLE_COPY": "0",
                                                "HVD_SHM_STREAM": "1"},
                         "yielding_small_chunks": {"HOROVOD_SPIN_WAIT": "0", "HVD_SHM_CHUNK": "small"}}


@pytest.mark.parametrize("np_, knobs", [(2, "default"), (3, "default"), (3, "shm_read_denied"),
                                        (3, "shm_slots_streamed"), (3, "yielding_small_chunks")])
def test_large_allreduce_every_dtype_and_op_matches_reference_on_every_rank(np_, knobs):
    results = ranks.run_program_ok(np_, "collectives:large_allreduce_every_dtype_and_op", timeout=180,
                                   env=LARGE_ALLREDUCE_KNOBS[knobs])
    for rank, (failures, digests) in enumerate(results):
        assert failures == [], "rank %d: wrong large allreduce results for %s" % (rank, failures)
        assert digests == results[0][1], "rank %d holds other bytes than rank 0" % rank


KNOBS = {
    "small_fusion_buffer": {"HOROVOD_FUSION_THRESHOLD": "4096"},
    "no_fusion": {"HOROVOD_FUSION_THRESHOLD": "0"},
    "no_response_cache": {"HOROVOD_CACHE_CAPACITY": "0"},
    "long_cycle": {"HOROVOD_CYCLE_TIME": "5"},
}


@pytest.mark.parametrize("knobs", sorted(KNOBS))
@pytest.mark.parametrize("np_", SIZES)
def test_grouped_and_fused_allreduce_of_many_small_tensors_are_exact(np_, knobs):
    results = ranks.run_program_ok(np_, "collectives:grouped_allreduce_and_fusion_of_many_small_tensors",
                                   env=KNOBS[knobs])
    for res in results:
        assert all(res.values()), res


# On one host a fused allreduce runs in pieces of 512 KiB that cut through
# tensors (the shm transport's fused_piece_bytes); every element must come
# out as if it were reduced at once, whether the slots are written with
# ordinary or streaming stores (HVD_SHM_STREAM; unset, rank 0 times both).
@pytest.mark.parametrize("stream", [None, "0", "1"])
@pytest.mark.parametrize("np_", [2, 3])
def test_fused_allreduce_in_pieces_matches_reference_for_every_dtype_and_op(np_, stream):
    results = ranks.run_program_ok(np_, "collectives:grouped_allreduce_across_pieces_every_dtype_and_op", timeout=180,
                                   env={"HVD_SHM_STREAM": stream} if stream else None)
    for rank, failures in enumerate(results):
        assert failures == [], "rank %d: wrong results for %s" % (rank, failures)


# From 2 MiB (to 32 MiB) a fused allreduce goes in one piece among ranks that
# spin (forced here, so that P=3 on 2 CPUs spins too): the single copy reads
# the other ranks' tensors where they lie (HVD_SHM_SINGLE_COPY=1), the slots
# take it whole (=0), or rank 0 times both (unset); ranks that prescale or
# joined pack it instead, beside ranks that do not.
@pytest.mark.parametrize("single_copy", ["1", "0", "auto"])
@pytest.mark.parametrize("np_", [2, 3])
def test_fused_allreduce_in_the_single_copy_window_matches_reference_for_every_dtype_and_op(np_, single_copy):
    results = ranks.run_program_ok(np_, "collectives:grouped_allreduce_in_the_single_copy_window_every_dtype_and_op",
                                   timeout=180, env={"HOROVOD_SPIN_WAIT": "1", "HVD_SHM_SINGLE_COPY": single_copy})
    for rank, failures in enumerate(results):
        assert failures == [], "rank %d: wrong results for %s" % (rank, failures)


@pytest.mark.parametrize("np_", SIZES)
def test_allgather_concatenates_different_first_dimensions_every_dtype(np_):
    results = ranks.run_program_ok(np_, "collectives:allgather_with_different_first_dimensions_every_dtype")
    for failures in results:
        assert failures == []


# Large results come from the core's pool of reused blocks (or not, with the
# pool off); large shm allgathers read the other ranks' memory, or go through
# the shared-memory slots when told to or when a rank may not read the others'
# memory (simulated by "deny-for-tests": the first such call falls back).
LARGE_ALLGATHER_KNOBS = {"default": {}, "no_pool": {"HVD_RESULT_POOL_BYTES": "0"},
                         "shm_slots": {"HVD_SHM_SINGLE_COPY": "0"},
                         "shm_read_denied": {"HVD_SHM_SINGLE_COPY": "deny-for-tests"}}


@pytest.mark.parametrize("np_, knobs", [(1, "default"), (2, "default"), (3, "default"), (2, "no_pool"),
                                        (2, "shm_slots"), (3, "shm_read_denied")])
def test_large_allgather_results_are_writable_independent_and_outlive_reuse(np_, knobs):
    env = LARGE_ALLGATHER_KNOBS[knobs]
    results = ranks.run_program_ok(np_, "collectives:large_allgather_results_are_owned_writable_and_independent",
                                   env=env)
    for failures in results:
        assert failures == []


@pytest.mark.parametrize("np_, knobs", [(2, "default"), (3, "default"), (2, "no_pool")])
def test_large_out_of_place_allreduce_results_are_correct_writable_and_independent(np_, knobs):
    env = LARGE_ALLGATHER_KNOBS[knobs]
    results = ranks.run_program_ok(np_, "collectives:large_allreduce_results_come_from_the_pool", env=env)
    for failures in results:
        assert failures == []


@pytest.mark.parametrize("knobs", ["default", "no_fusion"])
@pytest.mark.parametrize("np_", SIZES)
def test_fused_allgathers_of_uneven_tensors_are_exact(np_, knobs):
    results = ranks.run_program_ok(np_, "collectives:fused_allgather_of_many_tensors", env=KNOBS.get(knobs, {}))
    for failures in results:
        assert failures == []


@pytest.mark.parametrize("knobs", ["default", "no_fusion"])
@pytest.mark.parametrize("np_", SIZES)
def test_fused_reducescatters_of_uneven_tensors_are_exact(np_, knobs):
    results = ranks.run_program_ok(np_, "collectives:fused_reducescatter_of_many_tensors", env=KNOBS.get(knobs, {}))
    for failures in results:
        assert failures == []


@pytest.mark.parametrize("np_", [2, 3])
def test_a_burst_of_async_allreduces_that_no_one_waits_for_is_negotiated_as_one_batch(np_):
    # Ten allreduce_async_ 2 ms apart, each rank asleep in between: held while
    # the next comes within HVD_HOLD_GAP_US (50 ms here, to be sure under
    # load) and HOROVOD_CYCLE_TIME (5 s), they reach negotiation together when
    # the synchronize after the burst takes the queue.
    env = {"HVD_HOLD_GAP_US": "50000", "HOROVOD_CYCLE_TIME": "5000"}
    for res in ranks.run_program_ok(np_, "collectives:a_burst_of_single_async_allreduces", env=env):
        assert res["failures"] == []
        assert sum(res["batches"]) <= len(res["batches"]) + 2, res["batches"]


def test_without_a_hold_the_background_thread_takes_each_async_allreduce_as_it_comes():
    # The control: HOROVOD_CYCLE_TIME=0 holds nothing, so the idle background
    # thread sends each submission of the burst on its own.
    env = {"HVD_HOLD_GAP_US": "50000", "HOROVOD_CYCLE_TIME": "0"}
    for res in ranks.run_program_ok(2, "collectives:a_burst_of_single_async_allreduces", env=env):
        assert res["failures"] == []
        assert sum(res["batches"]) >= 15, res["batches"]  # of 30 submissions


def test_a_held_allreduce_goes_when_its_hold_ends_or_at_once_when_its_caller_waits():
    # Holds of 2 s: polled (no one waits), the allreduce cannot complete
    # before its ranks' holds end; synchronized at once, the caller takes the
    # queue itself and does not wait for the hold.
    env = {"HVD_HOLD_GAP_US": "2000000", "HOROVOD_CYCLE_TIME": "2000"}
    for res in ranks.run_program_ok(2, "collectives:a_held_allreduce_ends_its_hold_or_is_taken_by_its_caller", env=env):
        assert res["right"], res
        assert res["polled"] >= 1.5, res
        assert res["waited"] < 1.5, res


def _timeline_activities(timeline, activity):
    """The tensor of each `activity` event in a timeline file."""
    events = json.loads(timeline.read_text())
    rows = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    return [rows[e["pid"]] for e in events if e.get("name") == activity]


def _activities(tmp_path, program, activity):
    """Runs `program` at 2 ranks with a timeline; the tensor of each of rank 0's `activity` events."""
    timeline = tmp_path / "timeline.json"
    ranks.run_program_ok(2, program, env={"HOROVOD_TIMELINE": str(timeline)})
    return _timeline_activities(timeline, activity)


def _tensors_packed_into_the_fusion_buffer(tmp_path, program):
    return set(_activities(tmp_path, program, "MEMCPY_IN_FUSION_BUFFER"))


def test_a_fused_allreduce_in_pieces_shows_each_tensor_in_every_piece_that_holds_it(tmp_path):
    # 100000, 200000 and 50000 floats in pieces of 131072: the second tensor
    # is in all three pieces, the others in one each. Unscaled, the pieces
    # are reduced where the tensors lie; prescaled, packed and unpacked.
    def pieces(name):
        return ["grouped_allreduce.%s_%d" % (name, i) for i in (0, 1, 1, 1, 2)]

    for activity, names in (("SHM_ALLREDUCE", pieces("packed") + pieces("three")),
                            ("MEMCPY_IN_FUSION_BUFFER", pieces("packed")),
                            ("MEMCPY_OUT_FUSION_BUFFER", pieces("packed"))):
        seen = _activities(tmp_path, "collectives:grouped_allreduce_of_three_pieces", activity)
        assert sorted(seen) == names, (activity, seen)


def test_a_grouped_allreduce_in_one_process_gives_each_tensor_itself_without_packing(tmp_path):
    # In a job of one process every result is its own input (scaled), written
    # straight into its output; bools (kept 0 or 1) and a tensor given twice
    # (scaled once) still go through the fusion buffer.
    timeline = tmp_path / "timeline.json"
    [failures] = ranks.run_program_ok(1, "collectives:grouped_allreduce_in_one_process",
                                      env={"HOROVOD_TIMELINE": str(timeline)})
    assert failures == []
    reduced = set(_timeline_activities(timeline, "LOCAL_ALLREDUCE"))
    packed = set(_timeline_activities(timeline, "MEMCPY_IN_FUSION_BUFFER"))
    assert "grouped_allreduce.alone.float32.Sum_3" in reduced and "grouped_allreduce.scaled_1" in reduced
    assert packed == {"grouped_allreduce.twice_0", "grouped_allreduce.twice_1"} | {
        "grouped_allreduce.alone.bool.%s_%d" % (op, i) for op in ("Sum", "Min", "Max", "Product") for i in range(4)}


@pytest.mark.parametrize("np_", [2, 3])
def test_pieces_with_a_tensor_twice_or_a_joined_rank_are_packed_and_still_exact(np_):
    for failures in ranks.run_program_ok(np_, "collectives:grouped_allreduce_in_pieces_not_reduced_in_the_tensors"):
        assert failures == []


def test_grouped_reducescatter_runs_as_one_fused_collective(tmp_path):
    packed = _tensors_packed_into_the_fusion_buffer(tmp_path, "collectives:fused_reducescatter_of_many_tensors")
    assert {"grouped_reducescatter.rs.0_%d" % i for i in range(5)} <= packed, sorted(packed)


def test_grouped_allgather_runs_as_one_fused_collective(tmp_path):
    packed = _tensors_packed_into_the_fusion_buffer(tmp_path, "collectives:fused_allgather_of_many_tensors")
    assert {"grouped_allgather.fused.0_%d" % i for i in range(6)} <= packed, sorted(packed)


@pytest.mark.parametrize("np_", SIZES)
def test_broadcast_from_every_root_delivers_the_roots_tensor(np_):
    results = ranks.run_program_ok(np_, "collectives:broadcast_from_every_root")
    for failures in results:
        assert failures == []


@pytest.mark.parametrize("np_", SIZES)
def test_alltoall_delivers_each_ranks_rows_with_and_without_splits(np_):
    results = ranks.run_program_ok(np_, "collectives:alltoall_with_and_without_splits")
    for res in results:
        assert all(res.values()), res


@pytest.mark.parametrize("np_", SIZES)
def test_reducescatter_gives_each_rank_its_share_of_uneven_and_grouped_sums(np_):
    results = ranks.run_program_ok(np_, "collectives:reducescatter_uneven_first_dimension_and_grouped")
    for res in results:
        assert all(res.values()), res


@pytest.mark.parametrize("np_", SIZES)
def test_barrier_and_join_returns_last_rank_with_zero_contributions(np_):
    results = ranks.run_program_ok(np_, "collectives:barrier_and_join")
    for res in results:
        assert all(res.values()), res


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_float16_and_bfloat16_reductions_accumulate_sensibly(np_):
    results = ranks.run_program_ok(np_, "collectives:float16_and_bfloat16_sums",
                                   env={"PYTHONWARNINGS": "ignore"})
    for res in results:
        assert res["float16"] <= 1.0, res
        assert res["bfloat16"] <= 1.0, res
        size = np_
        assert res["float16.small"] == pytest.approx(256.0 + 0.125 * (size - 1), abs=0.25)


def test_bfloat16_is_taken_without_importing_ml_dtypes_with_hvd():
    # Importing ml_dtypes costs a process about 0.75 s of CPU, so hvd leaves it
    # to the code that makes bfloat16 arrays, and still takes them after that.
    results = ranks.run(2, """
print("ml_dtypes" in sys.modules)
hvd.init()
try:
    hvd.allreduce(np.ones(2, np.complex64))
except ValueError as e:
    print(e)
import ml_dtypes
x = np.array([1.5, -2.0, 3.0], ml_dtypes.bfloat16)
summed = hvd.allreduce(x, op=hvd.Sum)
print(summed.dtype, summed.tolist(), hvd.allgather(x).dtype)
hvd.allreduce_(x, op=hvd.Sum, name="again")
print(x.tolist())
""")
    for res in results:
        assert res.returncode == 0, res
        assert res.stdout.splitlines() == ["False", "Tensor type complex64 is not supported.",
                                           "bfloat16 [3.0, -4.0, 6.0] bfloat16", "[3.0, -4.0, 6.0]"], res


# Adasum against a numpy reference of the pairwise tree (rank_programs/collectives.py).
@pytest.mark.parametrize("np_, env, hosts", [(n, {}, None) for n in SIZES] + [
    (3, {"HOROVOD_SHM_DISABLE": "1"}, None), (4, {}, ["hostA", "hostA", "hostB", "hostB"])],
    ids=["1", "2", "3", "4", "3-tcp", "4-two-hosts"])
def test_adasum_matches_the_pairwise_tree_per_tensor(np_, env, hosts):
    results = ranks.run_program_ok(np_, "collectives:adasum_against_the_pairwise_tree", timeout=120, env=env,
                                   hosts=hosts)
    for rank, res in enumerate(results):
        assert all(res.values()), f"rank {rank}: {res}"
