# elastic.py - rank side of test_elastic.py: TorchState, ElasticSampler and
# @hvd.elastic.run on real ranks. Each scenario reports one JSON object with
# what the test checks.
"""Rank programs for test_elastic.py."""

import torch
import torch.nn.functional as F

import horovod.torch as hvd
from horovod.common import testing

# Ranks share two cores: intra-op threads would only contend.
torch.set_num_threads(1)


def _report(**values):
    testing.report(values)


def _flat(module):
    return torch.cat([t.detach().reshape(-1) for t in module.state_dict().values()]).tolist()


def _model(value=None):
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    if value is not None:
        with torch.no_grad():
            for t in model.state_dict().values():
                t.fill_(value)
    return model


def torch_state_sync_restore_commit():
    hvd.init()
    rank = hvd.rank()
    model = _model(value=1.0 + rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1 * (rank + 1), momentum=0.9)
    state = hvd.elastic.TorchState(model, optimizer, epoch=10 + rank, note="rank %d" % rank)
    state.sync()
    out = {"sync_model": _flat(model), "sync_lr": optimizer.param_groups[0]["lr"],
           "sync_plain": [state.epoch, state.note]}

    # One step builds the momentum buffers; then roll everything back.
    model(torch.ones(2, 3)).sum().backward()
    optimizer.step()
    state.epoch = 99
    state.restore()
    out["restore_model"] = _flat(model)
    out["restore_momentum"] = len(optimizer.state_dict()["state"])
    out["restore_epoch"] = state.epoch

    # Commit a step (model, momentum and plain value), change more, roll back to it.
    model(torch.ones(2, 3)).sum().backward()
    optimizer.step()
    state.epoch = 11
    state.commit()
    committed = _flat(model)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(5.0)
    state.epoch = 12
    state.restore()
    out["commit_restore_matches"] = _flat(model) == committed
    out["commit_restore_momentum"] = len(optimizer.state_dict()["state"])
    out["commit_restore_epoch"] = state.epoch

    # A new model assigned to the state is tracked (and saved) from then on.
    replacement = _model(value=7.0)
    state.model = replacement
    with torch.no_grad():
        for p in replacement.parameters():
            p.zero_()
    state.restore()
    out["replacement_restored"] = set(_flat(replacement)) == {7.0}
    _report(**out)


def _batches():
    generator = torch.Generator().manual_seed(99)
    data = torch.randn(6, 8, 3, generator=generator)
    target = torch.randint(0, 2, (6, 8), generator=generator)
    return data, target


def _train_steps(model, optimizer, data, target, steps):
    for step in steps:
        optimizer.zero_grad()
        F.cross_entropy(model(data[step]), target[step]).backward()
        optimizer.step()


def run_recovers_from_a_failure_mid_training():
    """Trains 6 steps, committing every 2; the first attempt fails (the ranks
    diverge, a real engine failure) during step 5's allreduce. The retry must
    resume from step 4's commit and end where a run without failure ends."""
    hvd.init()
    data, target = _batches()
    model = _model()
    base = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    optimizer = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
    lr_sizes = []

    def on_reset():
        lr_sizes.append(hvd.size())
        for group in optimizer.param_groups:
            group["lr"] = 0.05

    state = hvd.elastic.TorchState(model, optimizer, step=0)
    state.register_reset_callbacks([on_reset])
    starts = []

    @hvd.elastic.run
    def train(state):
        starts.append(state.step)
        while state.step < 6:
            optimizer.zero_grad()
            F.cross_entropy(model(data[state.step]), target[state.step]).backward()
            if state.step == 4 and len(starts) == 1:
                # The gradient allreduces of step 5 are in flight; this rank
                # now blocks in one no other rank submits.
                hvd.allreduce(torch.zeros(1), name="diverge.%d" % hvd.rank())
            optimizer.step()
            state.step += 1
            if state.step % 2 == 0:
                state.commit()

    train(state)
    trained = _flat(model)

    # The reference: the same 6 steps in this process without hvd (every rank
    # has the same data, so the averaged gradients equal the local ones).
    reference = _model()
    _train_steps(reference, torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9), data, target,
                 range(6))
    gathered = hvd.allgather_object(trained)
    _report(starts=starts, lr_sizes=lr_sizes, same_on_all_ranks=all(g == trained for g in gathered),
            max_diff_to_reference=max(abs(a - b) for a, b in zip(trained, _flat(reference))))


def elastic_sampler_resumes_the_epoch_on_all_ranks():
    hvd.init()
    dataset = list(range(40))
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=3)
    state = hvd.elastic.TorchState(sampler=sampler)
    state.sync()
    sampler.set_epoch(1)
    first_epoch_part = []
    for i, index in enumerate(sampler):
        if i == 6:
            break
        first_epoch_part.append(index)
        if i % 2 == 1:
            sampler.record_batch(i // 2, 2)
    state.commit()
    sampler.record_batch(3, 2)  # not committed
    state.restore()
    state.sync()
    rest = list(sampler)
    _report(epoch=sampler.epoch, processed=sampler.processed_num, length=len(sampler),
            seen=hvd.allgather_object(first_epoch_part), rest=hvd.allgather_object(rest))
