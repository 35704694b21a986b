# test_compile.py - hvd collectives inside torch.compile(fullgraph=True): no
# graph break, results and gradients equal to eager, at 2 real ranks. The
# ops are horovod.torch.custom_ops' hvd:: torch.library ops; torch.library's
# opcheck validates their schemas, fake kernels and autograd registration.
# The rank side is rank_programs/compile.py.
import torch_ranks


def test_compiled_step_with_allreduce_allgather_broadcast_matches_eager(tmp_path):
    # A fresh compile cache: torch keys cached graphs on the forward graph
    # only, so a cached backward could predate a change to an op's autograd
    # formula. Compiling on two shared cores takes tens of seconds per rank.
    reports = torch_ranks.run_program_ok(2, "compile:compiled_step_matches_eager", timeout=240,
                                         env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path)})
    for rank, report in enumerate(reports):
        assert report["forward_equal"], (rank, report)
        assert report["second_call_equal"], (rank, report)
        assert report["backward_equal"], (rank, report)
        for op, failure in report["opcheck"].items():
            assert failure is None, "rank %d: opcheck hvd::%s\n%s" % (rank, op, failure)
