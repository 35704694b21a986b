"""horovod.run() with the elastic arguments: a function trained elastically, its results
returned from the ranks of the last round."""

import os

import horovod.runner

from elastic_harness import base_env, local_hosts


def train_until_size_one(fail_marker):
    """Trains a counter; the rank that is rank 1 at step 3 dies once. Returns (rank, size, steps)."""
    import horovod.torch as hvd
    import torch
    hvd.init()
    state = hvd.elastic.TorchState(step=0, total=0.0)

    @hvd.elastic.run
    def train(state):
        while state.step < 8:
            if state.step == 3 and hvd.rank() == 1 and not os.path.exists(fail_marker):
                open(fail_marker, "w").close()
                os._exit(1)
            state.total += float(hvd.allreduce(torch.ones(1), op=hvd.Sum))
            state.step += 1
            state.commit()

    train(state)
    return hvd.rank(), hvd.size(), state.step


def test_elastic_function_survives_a_failure_and_returns_the_last_rounds_results(tmp_path, monkeypatch):
    for name in [n for n in os.environ if n.startswith(("HOROVOD_", "HVDRUN_"))]:
        monkeypatch.delenv(name)
    for name, value in base_env().items():
        if name.startswith(("HOROVOD_", "HVDRUN_")):
            monkeypatch.setenv(name, value)
    hosts = local_hosts(2)
    results = horovod.runner.run(train_until_size_one, args=(str(tmp_path / "failed"),), num_proc=2,
                                 min_num_proc=1, hosts=",".join(h + ":1" for h in hosts))
    assert results == [(0, 1, 8)]
