# sampler_train.py - one epoch over 64 indexed samples with an ElasticSampler,
# run by test_sampler.py under horovodrun. Rank 0 removes a host from the
# discovery file after two batches; every rank logs the samples of each batch
# it trained, so the test can see each sample trained exactly once.
"""ElasticSampler script for hvd-elastic's tests (run under horovodrun)."""

import argparse
import json
import os
import time

import torch

import horovod.torch as hvd


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--log", required=True)
    parser.add_argument("--hosts-file", required=True)
    parser.add_argument("--remaining-hosts", required=True)
    args = parser.parse_args()

    hvd.init()
    dataset = torch.utils.data.TensorDataset(torch.arange(64))
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=3)
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, sampler=sampler)
    model = torch.nn.Linear(1, 1)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                         named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0, batch=0)
    log_path = os.path.join(args.log, "%d.jsonl" % os.getpid())

    @hvd.elastic.run
    def train(state):
        while state.epoch < 1:
            for (indices,) in loader:
                optimizer.zero_grad()
                model(indices.float()[:, None]).sum().backward()
                optimizer.step()
                with open(log_path, "a") as f:
                    f.write(json.dumps({"size": hvd.size(), "rank": hvd.rank(), "samples": indices.tolist(),
                                        "time": time.time()}) + "\n")
                sampler.record_batch(state.batch, 4)
                state.batch += 1
                if state.batch == 2 and hvd.size() == 2 and hvd.rank() == 0:
                    with open(args.hosts_file + ".tmp", "w") as f:
                        f.write(args.remaining_hosts + "\n")
                    os.replace(args.hosts_file + ".tmp", args.hosts_file)
                time.sleep(0.2)  # time for the driver to notice the removal mid-epoch
                state.commit()
            state.epoch += 1
            state.batch = 0
            sampler.set_epoch(state.epoch)
            state.commit()

    train(state)


if __name__ == "__main__":
    main()
