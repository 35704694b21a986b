# pytorch_elastic_synthetic.py - elastic training with horovod.torch on
# made-up data, so it runs anywhere and offline. Workers may leave and join
# while it trains (hosts come from discover_hosts.sh); the model, optimizer,
# sampler position, epoch and batch live in an hvd.elastic.TorchState, so
# after every change of membership training resumes where it was:
#
#     horovodrun -np 2 --min-np 1 --max-np 2 \
#         --host-discovery-script ./discover_hosts.sh \
#         python pytorch_elastic_synthetic.py
#
# Rank 0 prints one line per epoch: the epoch, how many workers there were
# at its end, and the loss on held-out points.
"""Elastic horovod.torch training of a small classifier on synthetic data."""

import argparse
import time

import torch
import torch.nn.functional as F

import horovod.torch as hvd


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=20, help="epochs to train")
    parser.add_argument("--samples", type=int, default=2048, help="size of the synthetic data set")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per batch on each worker")
    parser.add_argument("--lr", type=float, default=0.05, help="learning rate of one worker")
    parser.add_argument("--commit-every", type=int, default=4,
                        help="batches between commits (what a failure can lose, against the cost of a copy)")
    parser.add_argument("--step-delay", type=float, default=0.05,
                        help="seconds to pause after each batch: stands in for a real model's compute, so that "
                             "there is time to watch (or cause) workers leaving and joining; 0 for full speed")
    parser.add_argument("--seed", type=int, default=42)
    return parser.parse_args()


def synthetic_data(samples, features=20, classes=4, seed=0):
    """Points labelled by a fixed random linear "teacher": learnable, and the same on every
    worker. Returns the training set and 512 held-out points to measure the loss on."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples + 512, features, generator=generator)
    teacher = torch.randn(features, classes, generator=generator)
    y = (x @ teacher + 0.1 * torch.randn(len(x), classes, generator=generator)).argmax(dim=1)
    return torch.utils.data.TensorDataset(x[:samples], y[:samples]), (x[samples:], y[samples:])


def main():
    args = parse_args()
    hvd.init()
    # Several workers may share one small machine; one thread each keeps them
    # from fighting over its cores.
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)

    dataset, (eval_x, eval_y) = synthetic_data(args.samples)
    features = dataset.tensors[0].shape[1]
    classes = int(dataset.tensors[1].max()) + 1
    model = torch.nn.Sequential(torch.nn.Linear(features, 64), torch.nn.ReLU(), torch.nn.Linear(64, classes))

    # The sampler splits what is left of the epoch over whichever workers are
    # there, so a reset in mid-epoch neither repeats nor skips samples.
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=args.seed)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0, batch=0)

    def on_reset():
        # The gradients are averaged over hvd.size() workers, so the step
        # follows the number of workers, as it did at the start.
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size()

    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        # Re-entered after every reset: everything needed to go on is in state.
        while state.epoch < args.epochs:
            for x, y in loader:
                optimizer.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
                if args.step_delay:
                    time.sleep(args.step_delay)

                sampler.record_batch(state.batch, args.batch_size)
                state.batch += 1
                if state.batch % args.commit_every == 0:
                    state.commit()

            if hvd.rank() == 0:
                # Every worker holds the same model: one of them can measure it.
                with torch.no_grad():
                    loss = F.cross_entropy(model(eval_x), eval_y).item()
                print(f"epoch {state.epoch}: size {hvd.size()}, loss {loss:.4f}", flush=True)
            state.epoch += 1
            state.batch = 0
            sampler.set_epoch(state.epoch)
            state.commit()

    train(state)
    if hvd.rank() == 0:
        print(f"done: {args.epochs} epochs, {hvd.size()} worker(s) at the end", flush=True)


if __name__ == "__main__":
    main()
