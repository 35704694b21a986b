# test_training.py - data-parallel training through horovod.mxnet equals
# one-process training on the concatenated batch: Gluon's DistributedTrainer
# (per-tensor, grouped, fp16-compressed, predivided, bfloat16 parameters;
# test_naive_engine.py trains bfloat16 without compression)
# and the Module API's DistributedOptimizer, at 2 and 3 ranks, after
# broadcast_parameters has made different initial weights equal.
import pytest

import mxnet_ranks


@pytest.mark.parametrize("size,options", [
    (2, {}),
    (3, {}),
    (2, {"num_groups": 2, "predivide": 2.0}),
    (3, {"compression": "fp16"}),
    (3, {"dtype": "bfloat16", "compression": "fp16", "num_groups": 1}),
])
def test_gluon_distributed_trainer_equals_one_process_on_the_whole_batch(size, options):
    # bfloat16 keeps 8 significant bits: summing the ranks' gradients rounds
    # differently from one process's gradient of the whole batch.
    tolerance = 2e-2 if options.get("dtype") == "bfloat16" else 5e-3 if options.get("compression") == "fp16" else 1e-5
    for report in mxnet_ranks.run_program_ok(size, "training:gluon_trainer_matches_one_process", kwargs=options,
                                             timeout=120):
        assert report["moved"] > 1e-3  # it trained
        assert report["diff"] < tolerance, report
        assert report["ranks_agree"], report
        if options.get("dtype") == "bfloat16":
            assert report["grad_dtypes"] == ["bfloat16"], report  # they were exchanged as bfloat16


@pytest.mark.parametrize("size,num_groups", [(2, 0), (3, 1)])
def test_module_distributed_optimizer_equals_one_process_on_the_whole_batch(size, num_groups):
    for report in mxnet_ranks.run_program_ok(size, "training:module_optimizer_matches_one_process",
                                             kwargs={"num_groups": num_groups}, timeout=120):
        assert report["moved"] > 1e-3
        assert report["diff"] < 1e-5, report
