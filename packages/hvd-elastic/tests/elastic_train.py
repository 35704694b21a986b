# elastic_train.py - the training script the hvd-elastic tests run under
# horovodrun: a small torch model trained with @hvd.elastic.run and a
# TorchState, with failures and host changes injected at given steps.
#
# Every rank appends JSON lines to <log>/<host>.<slot>.<pid>.jsonl: "start"
# each time the training function is (re)entered, "reset" from the reset
# callback, "done" at the end with the final parameters. The state carries
# `history`, the (step, size) of every step the parameters went through, so a
# test can recompute them (reference_parameters) and see that no committed
# step was lost or repeated.
"""Elastic training script for hvd-elastic's tests (run under horovodrun)."""

import argparse
import json
import os
import signal
import time

import torch

import horovod.torch as hvd

torch.set_num_threads(1)

FEATURES, OUTPUTS, BATCH = 8, 4, 4
LEARNING_RATE, MOMENTUM = 0.05, 0.9


def make_model():
    torch.manual_seed(7)
    return torch.nn.Linear(FEATURES, OUTPUTS)


def batch(step, rank):
    """Rank `rank`'s batch at `step`: the same whatever process computes it."""
    generator = torch.Generator().manual_seed(step * 1000 + rank)
    return (torch.randn(BATCH, FEATURES, generator=generator),
            torch.randn(BATCH, OUTPUTS, generator=generator))


def loss_of(model, step, rank):
    x, y = batch(step, rank)
    return torch.nn.functional.mse_loss(model(x), y)


def flat_parameters(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()


def reference_parameters(history):
    """The parameters after the steps in `history` ((step, size) pairs), computed in one
    process: each step averages the gradients of ranks 0..size-1, as the job does."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    for step, size in history:
        grads = [torch.zeros_like(p) for p in model.parameters()]
        for rank in range(size):
            model.zero_grad()
            loss_of(model, step, rank).backward()
            for g, p in zip(grads, model.parameters()):
                g.add_(p.grad)
        for g, p in zip(grads, model.parameters()):
            p.grad = g / size
        optimizer.step()
    return flat_parameters(model)


def size_stretches(history):
    """The sizes a job trained at, in order, each once per stretch: [4, 3] for a job
    that lost a worker."""
    sizes = []
    for _, size in history:
        if not sizes or sizes[-1] != size:
            sizes.append(size)
    return sizes


def _once(log, name):
    """True the first time any process of the job asks for `name`."""
    try:
        os.close(os.open(os.path.join(log, "once." + name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--commit-every", type=int, default=2)
    parser.add_argument("--step-seconds", type=float, default=0.05)
    parser.add_argument("--fail", action="append", default=[],
                        help="STEP:RANK:MODE, MODE one of kill, exception, stop: once per job, the rank "
                             "that is RANK at STEP fails that way before the step's allreduce")
    parser.add_argument("--write-at", action="append", default=[],
                        help="STEP[@SIZE]=FILE:CONTENT: once, rank 0 writes CONTENT (',' -> newline) to FILE at the "
                             "first step from STEP on (at which the job has SIZE ranks) - a discovery "
                             "script's hosts file, say")
    parser.add_argument("--until-sizes", default=None,
                        help="SIZE,SIZE,...: after --steps, keep training (up to 1000 more steps) until the "
                             "sizes the job trained at, in order, end with these")
    parser.add_argument("--until-file", default=None,
                        help="after --steps, keep training (up to 1000 more steps) until this file exists "
                             "(rank 0 looks, and tells the others)")
    parser.add_argument("--sleep-before-training", type=float, default=0,
                        help="seconds between hvd.init() and the training function (a slow start-up)")
    parser.add_argument("--process-sets", action="store_true",
                        help="use a static process set of ranks 0 and 1 and a dynamic one of ranks 0 and 2 "
                             "in every step (Horovod issue 4021: they must survive resets)")
    args = parser.parse_args()

    sets = []
    if args.process_sets:
        sets.append(hvd.ProcessSet([0, 1]))
        hvd.init(process_sets=[sets[0]])
        sets.append(hvd.add_process_set([0, 2]))
    else:
        hvd.init()
    me = "%s.%s.%d" % (os.environ.get("HOROVOD_HOSTNAME", "?"), os.environ.get("HOROVOD_LOCAL_RANK", "?"),
                       os.getpid())
    log_path = os.path.join(args.log, me + ".jsonl")

    def record(event, **values):
        values.update(event=event, worker=me, host=os.environ.get("HOROVOD_HOSTNAME"), rank=hvd.rank(),
                      size=hvd.size(), time=time.time())
        with open(log_path, "a") as f:
            f.write(json.dumps(values) + "\n")

    model = make_model()
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM),
        named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, optimizer, step=0, history=[])
    state.register_reset_callbacks([lambda: record("reset", step=state.step)])

    failures = [spec.split(":") for spec in args.fail]
    writes = [spec.split("=", 1) for spec in args.write_at]

    def finished():
        if state.step < args.steps:
            return False
        if state.step >= args.steps + 1000:
            return True
        if args.until_file is not None:
            return hvd.broadcast_object(os.path.exists(args.until_file), root_rank=0, name="until_file")
        if args.until_sizes is None:
            return True
        wanted = [int(size) for size in args.until_sizes.split(",")]
        return size_stretches(state.history)[-len(wanted):] == wanted

    @hvd.elastic.run
    def train(state):
        record("start", step=state.step, params=flat_parameters(model))
        while not finished():
            step = state.step
            for index, (at, content) in enumerate(writes):
                at_step, _, at_size = at.partition("@")
                due = step >= int(at_step) and (not at_size or hvd.size() == int(at_size))
                if due and hvd.rank() == 0 and _once(args.log, "write-%d" % index):
                    path, text = content.split(":", 1)
                    with open(path + ".tmp", "w") as f:
                        f.write(text.replace(",", "\n") + "\n")
                    os.replace(path + ".tmp", path)
            optimizer.zero_grad()
            loss_of(model, step, hvd.rank()).backward()
            for index, (at, rank, mode) in enumerate(failures):
                if int(at) == step and int(rank) == hvd.rank() and _once(args.log, "fail-%d" % index):
                    record("failing", step=step, mode=mode)
                    if mode == "kill":
                        os.kill(os.getpid(), signal.SIGKILL)
                    elif mode == "stop":
                        os.kill(os.getpid(), signal.SIGSTOP)
                    raise RuntimeError("injected failure at step %d on rank %d" % (step, hvd.rank()))
            optimizer.step()
            for process_set in sets:
                # A set left unregistered by a shrink (its ranks are gone) is skipped.
                if process_set.process_set_id is not None and process_set.included():
                    total = hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=process_set)
                    if int(total) != process_set.size():
                        raise AssertionError("allreduce on %s gave %s" % (process_set, total))
            state.history = state.history + [[step, hvd.size()]]
            state.step = step + 1
            time.sleep(args.step_seconds)
            if state.step % args.commit_every == 0:
                state.commit()
            else:
                state.check_host_updates()

    time.sleep(args.sleep_before_training)
    train(state)
    record("done", step=state.step, history=state.history, params=flat_parameters(model))


if __name__ == "__main__":
    main()
