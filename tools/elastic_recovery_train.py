#!/usr/bin/env python
# elastic_recovery_train.py - the training job that elastic_recovery_benchmark.py
# runs under elastic horovodrun: a small torch model, @hvd.elastic.run with a
# TorchState committed after every step, and one line of JSON per event with
# its wall-clock time in <log>/<host>.<slot>.<pid>.jsonl, so the benchmark can
# line up what each process did with its own clock readings.
#
# Events: "process" (interpreter start, torch imported, hvd.init() returned,
# model and optimizer built), "start" (the training function was (re)entered,
# state synchronised), "error" (a collective failed: HorovodInternalError),
# "interrupt" (hosts changed: HostsUpdatedInterrupt), "reset" (rejoined a new
# round), "commit" (a step was committed), "kill" (written just before the
# worker sends itself SIGKILL or SIGSTOP), "done".
"""Elastic torch training job for tools/elastic_recovery_benchmark.py (run under horovodrun)."""

import time

PROCESS_STARTED = time.time()  # before the imports: a newcomer's start-up is part of what is measured

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402

import torch  # noqa: E402

TORCH_IMPORTED = time.time()

import horovod.torch as hvd  # noqa: E402
from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--log", required=True, help="folder for the per-process event logs")
    parser.add_argument("--kill-at-step", type=int, default=None,
                        help="once per job, the rank --kill-rank sends itself --kill-signal at this step, "
                             "between backward and the optimizer step")
    parser.add_argument("--kill-rank", type=int, default=1)
    parser.add_argument("--kill-signal", choices=("KILL", "STOP"), default="KILL",
                        help="KILL: the process dies and the kernel closes its sockets; STOP: it freezes")
    parser.add_argument("--until-size", type=int, required=True,
                        help="train until the job has this many ranks, then --steps-after more steps")
    parser.add_argument("--steps-after", type=int, default=10)
    parser.add_argument("--max-steps", type=int, default=5000, help="stop here whatever the size")
    parser.add_argument("--step-seconds", type=float, default=0.02, help="sleep per step (stand-in for compute)")
    parser.add_argument("--width", type=int, default=64)
    return parser.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(1)
    hvd.init()
    initialised = time.time()
    me = "%s.%s.%d" % (os.environ.get("HOROVOD_HOSTNAME", "?"), os.environ.get("HOROVOD_LOCAL_RANK", "?"),
                       os.getpid())
    log_path = os.path.join(args.log, me + ".jsonl")

    def record(event, **values):
        values.update(event=event, worker=me, rank=hvd.rank(), size=hvd.size(), time=time.time())
        with open(log_path, "a") as f:
            f.write(json.dumps(values) + "\n")

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(args.width, args.width), torch.nn.ReLU(),
                                torch.nn.Linear(args.width, 1))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                         named_parameters=model.named_parameters())
    # target_since: the step at which the job first had --until-size ranks. It
    # lives in the state, so every rank (newcomers included) stops at the same step.
    state = hvd.elastic.TorchState(model, optimizer, step=0, target_since=None)
    state.register_reset_callbacks([lambda: record("reset", step=state.step)])
    record("process", started=PROCESS_STARTED, torch_imported=TORCH_IMPORTED, initialised=initialised,
           built=time.time())

    def finished():
        if state.step >= args.max_steps:
            return True
        return state.target_since is not None and state.step >= state.target_since + args.steps_after

    @hvd.elastic.run
    def train(state):
        record("start", step=state.step)
        try:
            while not finished():
                if hvd.size() == args.until_size and state.target_since is None:
                    state.target_since = state.step
                generator = torch.Generator().manual_seed(state.step * 1000 + hvd.rank())
                x = torch.randn(16, args.width, generator=generator)
                optimizer.zero_grad()
                model(x).pow(2).mean().backward()
                if (state.step == args.kill_at_step and hvd.rank() == args.kill_rank
                        and _first_time(args.log, "kill")):
                    record("kill", step=state.step, signal=args.kill_signal)
                    os.kill(os.getpid(), getattr(signal, "SIG" + args.kill_signal))
                optimizer.step()
                state.step += 1
                time.sleep(args.step_seconds)
                state.commit()
                record("commit", step=state.step)
        except HorovodInternalError as e:
            record("error", step=state.step, message=str(e)[:400])
            raise
        except HostsUpdatedInterrupt:
            record("interrupt", step=state.step)
            raise

    train(state)
    record("done", step=state.step)


def _first_time(folder, name):
    """True for the first process of the job that asks (a marker file), so a rank
    that takes over the killed rank's number does not kill itself as well."""
    try:
        os.close(os.open(os.path.join(folder, "once." + name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


if __name__ == "__main__":
    main()
