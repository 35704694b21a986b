# test_functions.py - broadcast_parameters, broadcast_optimizer_state,
# broadcast_object and allgather_object on real ranks (one job per world
# size, many checks in it; the rank side is rank_programs/functions.py).
import pytest

import torch_ranks


@pytest.mark.parametrize("size", [1, 2, 3])
def test_broadcast_and_allgather_functions_give_every_rank_the_root_state(size):
    for done in torch_ranks.run_program_ok(size, "functions:every_function_check", timeout=180,
                                           env={"OMP_NUM_THREADS": "1"}):
        assert done == ["broadcast_parameters", "broadcast_optimizer_state", "fresh_and_stateless", "objects"]
