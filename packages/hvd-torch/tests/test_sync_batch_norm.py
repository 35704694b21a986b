# test_sync_batch_norm.py - hvd.SyncBatchNorm on N ranks must equal torch's
# BatchNorm on the concatenated batch: outputs, input gradients, summed
# weight/bias gradients and running statistics. Ranks get different batch
# sizes on purpose (the statistics are count-weighted). The rank side is
# rank_programs/sync_batch_norm.py.
import pytest

import torch_ranks


@pytest.mark.parametrize("size", [1, 2, 3])
def test_sync_batch_norm_matches_batch_norm_on_the_whole_batch(size):
    for out in torch_ranks.run_program_ok(size, "sync_batch_norm:sync_batch_norm_matches_batch_norm", timeout=120,
                                          env={"OMP_NUM_THREADS": "1"}):
        assert out == {"cases": 5}
