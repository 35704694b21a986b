# sampler.py - ElasticSampler: like DistributedSampler, but it remembers how
# many samples of the epoch the job has consumed, so that after a reset the
# rest of the epoch is split over the new set of ranks instead of restarting.
"""``ElasticSampler``."""

import math
import random

import torch.utils.data

from horovod.torch.mpi_ops import rank, size


class ElasticSampler(torch.utils.data.Sampler):
    """Splits a dataset over the ranks, and re-splits what is left of the epoch after
    an elastic reset.

    Use it with a ``TorchState`` (which saves and synchronises it), call
    ``record_batch`` after each batch, and ``set_epoch`` when an epoch is done (not
    when it starts, so that a reset in the middle does not start the epoch over).

    Args:
        dataset: the dataset to sample (its length must not change).
        shuffle: whether to shuffle the indices, identically on every rank (default True).
        seed: the shuffle's seed, the same on every rank (default 0).
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0  # samples of this epoch consumed by all ranks together
        self.processed_indices = set()  # kept for Horovod's attribute; not used here
        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch`: nothing of it is processed yet, and the shuffle changes."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Records that every rank has processed one more batch of `batch_size` samples."""
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self):
        """Splits the samples not yet processed this epoch over the current ranks."""
        self.num_replicas = size()
        self.rank = rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = list(self.remaining_indices)
        # Padded with its own start so that every rank gets num_samples.
        while indices and len(indices) < self.total_size:
            indices += indices[:self.total_size - len(indices)]
        self.indices = indices[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
