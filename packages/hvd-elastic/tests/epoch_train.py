# epoch_train.py - an epoch-by-epoch elastic training script in the style of
# the worker scripts Horovod's own elastic tests drive through the command
# line, run by test_epoch_scenarios.py. Rank 0 logs one line per finished
# epoch (the rank the worker was started with, its host, the size, and how
# many times training was (re)entered); a host schedule per epoch is written
# to the discovery file by rank 0, which then waits until the driver's
# announcement has arrived (state._host_messages, as Horovod's scripts do);
# workers started with given ranks fail at a given (epoch, batch).
"""Epoch-based elastic training script for hvd-elastic's tests (run under horovodrun)."""

import argparse
import json
import os
import time

import torch

import horovod.torch as hvd


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True)
    parser.add_argument("--hosts-file", default=None)
    parser.add_argument("--schedule", default="{}", help='JSON {"EPOCH": ["host:slots", ...]}: the hosts '
                                                         "from that epoch on")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--fail-at", default=None, help="EPOCH,BATCH: where the workers of --fail-ranks fail")
    parser.add_argument("--fail-ranks", default="", help="start ranks (HOROVOD_RANK at start) that fail, ',' "
                                                         "separated")
    parser.add_argument("--fail-mode", default="exception", choices=["exception", "kill"])
    args = parser.parse_args()

    hvd.init()
    start_rank = hvd.rank()
    hostname = os.environ.get("HOROVOD_HOSTNAME")
    schedule = {int(epoch): hosts for epoch, hosts in json.loads(args.schedule).items()}
    fail_at = tuple(int(v) for v in args.fail_at.split(",")) if args.fail_at else None
    fail_ranks = {int(r) for r in args.fail_ranks.split(",") if r}

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                         named_parameters=model.named_parameters())
    data, target = torch.randn(8, 4), torch.randn(8, 2)
    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0, rendezvous=0)

    def hosts_for(epoch):
        known = [e for e in schedule if e <= epoch]
        return schedule[max(known)] if known else None

    @hvd.elastic.run
    def train(state):
        state.rendezvous += 1
        while state.epoch < args.epochs:
            while state.batch < args.batches:
                if (state.epoch, state.batch) == fail_at and start_rank in fail_ranks:
                    if args.fail_mode == "kill":
                        os.kill(os.getpid(), 9)
                    raise RuntimeError("failing as scheduled at epoch %d batch %d (start rank %d)"
                                       % (state.epoch, state.batch, start_rank))
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(model(data), target).backward()
                optimizer.step()
                state.batch += 1
                state.commit()
            if hvd.rank() == 0:
                with open(args.log, "a") as f:
                    f.write(json.dumps({"epoch": state.epoch, "start_rank": start_rank, "hostname": hostname,
                                        "size": hvd.size(), "rendezvous": state.rendezvous}) + "\n")
                following = hosts_for(state.epoch + 1)
                if following is not None and following != hosts_for(state.epoch):
                    with open(args.hosts_file + ".tmp", "w") as f:
                        f.write("\n".join(following) + "\n")
                    os.replace(args.hosts_file + ".tmp", args.hosts_file)
                    # Wait for the driver's announcement, so that the change
                    # takes effect at this epoch's last commit on every rank.
                    state._last_updated_timestamp = 0
                    deadline = time.monotonic() + 60
                    while state._host_messages.empty():
                        if time.monotonic() > deadline:
                            raise TimeoutError("no host update from the driver within 60 s")
                        time.sleep(0.05)
            state.epoch += 1
            state.batch = 0
            state.commit()

    train(state)


if __name__ == "__main__":
    main()
