# test_xla.py - Horovod TF collectives inside tf.function(jit_compile=True)
# on the CPU (libhvd_tensorflow_xla.so: tf2xla kernels lowering the ops to
# XLA FFI custom calls). One 2-rank job runs every check, so TensorFlow is
# imported once per rank; each test below asserts one part of its report.
import importlib.util
import os

import pytest

from horovod.common import testing


def _xla_built():
    spec = importlib.util.find_spec("horovod.tensorflow")
    for folder in spec.submodule_search_locations or []:
        info = os.path.join(folder, "_build_info.py")
        if os.path.exists(info):
            scope = {}
            with open(info) as f:
                exec(f.read(), scope)
            return scope.get("XLA_BUILT", False)
    return False


pytestmark = pytest.mark.skipif(not _xla_built(), reason="hvd-tensorflow was built without XLA (HVD_TF_XLA=OFF)")

# The rank side is rank_programs/xla.py, imported from this folder.
RANK_PROGRAMS = os.path.dirname(os.path.abspath(__file__))
RANK_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3"}


@pytest.fixture(scope="module")
def reports():
    return testing.run_program_ok(2, "rank_programs.xla:every_check", path=RANK_PROGRAMS, timeout=150, env=RANK_ENV)


def test_xla_library_is_loaded(reports):
    assert all(r["xla_built"] for r in reports)


def test_allreduce_under_jit_equals_eager_for_sum_average_dtypes_and_scaling(reports):
    for r in reports:
        assert r["allreduce_equals_eager"]
        assert r["allreduce_expected"]


def test_jit_lowers_allreduce_to_side_effecting_ffi_custom_calls_named_like_the_nodes(reports):
    for r in reports:
        assert r["allreduce_hlo_custom_calls"] == 5
        assert r["allreduce_hlo_side_effect"]
        assert r["allreduce_hlo_names"]


def test_grouped_allreduce_under_jit_equals_eager(reports):
    assert all(r["grouped_allreduce_equals_eager"] for r in reports)


def test_adasum_allreduce_under_jit_equals_eager(reports):
    for r in reports:
        assert r["adasum_equals_eager"] and r["adasum_expected"]


def test_allgather_under_jit_with_different_first_dims_equals_eager(reports):
    for r in reports:
        assert r["allgather_equals_eager"]
        assert r["allgather_hlo"]
        # rank 0 sends 1 row, rank 1 sends 2: 3 rows; int64 has one more per rank
        assert r["allgather_shapes"] == [[3, 3], [5], [3]]
        assert r["allgather_rows"] == [0.0, 100.0, 103.0]
        assert r["allgather_recompiled"]


def test_broadcast_under_jit_from_root_1_equals_eager(reports):
    for r in reports:
        assert r["broadcast_equals_eager"]
        assert r["broadcast_from_root_1"]
        assert r["broadcast_hlo"]


def test_broadcast_inplace_under_jit_overwrites_variables_with_root_1_values_as_eager(reports):
    for r in reports:
        assert r["broadcast_inplace_equals_eager"]
        assert r["broadcast_inplace_from_root_1"] == [[2.0, 4.0, 6.0], [[6.0, 6.0], [6.0, 6.0]], [14, -16]]
        assert r["broadcast_inplace_read_back"]
        # one custom call for the two float32 variables, one for the int32 one
        assert r["broadcast_inplace_hlo_custom_calls"] == 2
        assert r["broadcast_inplace_hlo_int_name"]


def test_reducescatter_under_jit_equals_eager_with_uneven_split(reports):
    assert [r["reducescatter_rows"] for r in reports] == [3, 2]
    assert all(r["reducescatter_equals_eager"] for r in reports)


def test_alltoall_under_jit_with_explicit_and_even_splits_equals_eager(reports):
    for r in reports:
        assert r["alltoall_equals_eager"]
        assert r["alltoall_hlo"] == 2
        assert r["alltoall_splits_argument"]
    # rank 0 sends [1, 3] rows, rank 1 [2, 2]: rank 0 gets 1 + 2, rank 1 gets 3 + 2
    assert [r["alltoall_received_splits"] for r in reports] == [[1, 2], [3, 2]]
    assert reports[0]["alltoall_rows"] == [0.0, 100.0, 103.0]
    assert reports[1]["alltoall_rows"] == [3.0, 6.0, 9.0, 106.0, 109.0]


def test_alltoall_gradient_inside_the_xla_program_equals_eager(reports):
    assert all(r["alltoall_gradient_equals_eager"] for r in reports)


def test_join_under_jit_returns_the_last_rank_and_joined_ranks_contribute_zeros(reports):
    for r in reports:
        assert r["join_last_rank"] == [1, 1]
        assert r["join_allreduce_equals_eager"]
        assert r["join_hlo"]


def test_ignore_name_scope_under_jit_matches_ranks_in_different_scopes(reports):
    assert all(r["ignore_name_scope"] for r in reports)


def test_gradients_inside_the_xla_program_equal_eager(reports):
    assert all(r["gradient_equals_eager"] for r in reports)


def test_shape_mismatch_under_jit_raises_on_every_rank_naming_the_tensor(reports):
    for r in reports:
        err = r["mismatch_error"]
        assert err is not None
        assert err["type"] == "FailedPreconditionError"
        assert "bad.shape" in err["message"]


def test_allgather_trailing_dim_mismatch_fails_compilation_on_every_rank(reports):
    for r in reports:
        err = r["allgather_trailing_mismatch_error"]
        assert err is not None
        assert err["type"] == "FailedPreconditionError"
        assert "bad.gather" in err["message"]


def test_allgather_with_stale_compiled_shape_raises_instead_of_hanging(reports):
    for r in reports:
        err = r["stale_allgather_error"]
        assert err is not None
        assert err["type"] == "FailedPreconditionError"
        assert "stale.gather" in err["message"]
        assert r["errors_seconds"] < 30


def test_alltoall_invalid_splits_on_one_rank_fail_compilation_on_every_rank(reports):
    bad, good = reports[1]["alltoall_bad_splits_error"], reports[0]["alltoall_bad_splits_error"]
    assert bad is not None and bad["type"] == "InvalidArgumentError"
    assert "splits add up to 2" in bad["message"]
    assert good is not None and good["type"] == "FailedPreconditionError"
    assert "bad.a2a" in good["message"] and "rank 1" in good["message"]
    for r in reports:
        err = r["alltoall_trailing_mismatch_error"]
        assert err is not None and err["type"] == "FailedPreconditionError"
        assert "bad.a2a.rows" in err["message"]


def test_alltoall_splits_that_are_not_compile_time_constants_fail_with_a_clear_message(reports):
    for r in reports:
        err = r["alltoall_dynamic_splits_error"]
        assert err is not None and err["type"] == "InvalidArgumentError"
        assert err["message"].startswith("HorovodAlltoall: 'dyn.a2a': under XLA (jit_compile=True) splits must be "
                                         "a compile-time constant")


def test_alltoall_with_stale_compiled_splits_raises_instead_of_hanging(reports):
    for r in reports:
        err = r["stale_alltoall_error"]
        assert err is not None
        assert err["type"] == "FailedPreconditionError"
        assert "stale.a2a" in err["message"]


def test_engine_usable_after_jit_errors(reports):
    assert all(r["usable_after_errors"] for r in reports)


def test_dead_peer_under_jit_raises_unknown_error_starting_with_the_op_type():
    # Horovod's elastic code turns an UnknownError whose message starts with
    # the op type into HorovodInternalError: the XLA path must keep that shape.
    results = testing.run_program(2, "rank_programs.xla:dead_peer_under_jit", path=RANK_PROGRAMS, timeout=90,
                                  env=RANK_ENV)
    assert results[1].returncode == 0, str(results[1])
    assert results[0].returncode == 0, str(results[0])
    report = results[0].last_json()
    assert report["error"] is not None
    assert report["error"]["type"] == "UnknownError"
    assert report["error"]["message"].startswith("HorovodAllreduce: ")
    assert report["seconds"] < 30
