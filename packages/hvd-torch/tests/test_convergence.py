# test_convergence.py - data-parallel training must be the same computation
# as single-process training on the whole batch: N ranks, each with its
# shard of every batch, wrapped in DistributedOptimizer (and SyncBatchNorm
# for a model with batch norm), end with the parameters that one process
# gets on the concatenated batches from the same seed. Every rank also runs
# that single-process reference itself and compares (to 1e-5). The rank
# side is rank_programs/convergence.py.
import pytest

import torch_ranks


@pytest.mark.parametrize("size", [2, 3])
def test_data_parallel_training_equals_single_process_on_the_whole_batch(size):
    for report in torch_ranks.run_program_ok(size, "convergence:data_parallel_training_matches_single_process",
                                             timeout=180, env={"OMP_NUM_THREADS": "1"}):
        assert set(report) == {"mlp_sgd", "conv_syncbn_adam"}
        assert all(v <= 1e-5 for v in report.values()), report
