# optimizer.py - DistributedOptimizer: wraps any torch.optim.Optimizer so
# that gradients are averaged across ranks before the update. Each
# gradient's allreduce is started from a post-accumulate-grad hook while
# backward is still running, so communication overlaps the remaining compute;
# step() (or synchronize()) waits for them. The returned object is an
# instance of a class created on the fly that derives from the wrapped
# optimizer's class, as Horovod's is, so isinstance checks, state_dict() and
# LR schedulers keep working.
"""Horovod's DistributedOptimizer for PyTorch."""

import os
import warnings
import weakref
from contextlib import contextmanager

import torch

from horovod.torch.compression import Compression
from horovod.common.autotune import GradientBucketTuning
from horovod.common.optimizer_options import check_optimizer_options, gradient_scale_factors
from horovod.common.process_sets import global_process_set
from horovod.common.util import split_list
from horovod.torch.mpi_ops import (Adasum, Average, _allreduce_async, _basics, grouped_allreduce_async_, size,
                                   synchronize)

try:
    from horovod.torch.mpi_ops import sparse_allreduce_async
except ImportError:  # sparse gradients then need sparse_as_dense=True
    sparse_allreduce_async = None

__all__ = ["DistributedOptimizer"]

_ZERO_GRAD_MESSAGE = ("optimizer.zero_grad() was called after loss.backward() "
                      "but before optimizer.step() or optimizer.synchronize(). "
                      "This is prohibited as it can cause a race condition.")

_TOO_MANY_PASSES_MESSAGE = ("Gradients were computed more than "
                            "backward_passes_per_step times before call "
                            "to step(). Increase backward_passes_per_step to "
                            "accumulate gradients locally.")


# Every live DistributedOptimizer. When the engine shuts down (an elastic
# reset, or hvd.init() replacing a failed engine) the reductions they were
# waiting for are gone: they forget them, so training can go on with the next
# engine instead of zero_grad() reporting gradients still in flight.
_live_optimizers = weakref.WeakSet()


def _forget_in_flight_reductions():
    for optimizer in list(_live_optimizers):
        optimizer._forget_in_flight()


_basics.add_shutdown_callback(_forget_in_flight_reductions)


# Without `groups`, gradients are reduced in buckets of about this many MiB,
# formed statically from the parameters in reverse registration order (the
# order backward produces them); 0 reduces every gradient on its own, as
# Horovod does. Per-gradient requests cost a control round and a wake-up
# each, which on few cores shows up as step time; buckets keep the overlap
# with backward and pay once per bucket. 25 MiB is DDP's bucket_cap_mb; on the
# 102-tensor benchmark (6.6 MB of gradients, 2 CPUs, docs/benchmarks.md) one
# bucket for everything beat 2 and 4 MiB ones (0.67-0.71x DDP's step against
# 0.84-0.90x and 0.78-0.85x): where backward keeps every CPU busy, overlap
# gains less than each extra collective costs.
BUCKET_ENV = "HOROVOD_GRADIENT_BUCKET_MB"
DEFAULT_BUCKET_MB = 25.0


def _bucket_bytes():
    value = os.environ.get(BUCKET_ENV, "").strip()
    if not value:
        return int(DEFAULT_BUCKET_MB * 2 ** 20)
    try:
        mb = float(value)
    except ValueError:
        raise ValueError("%s=%r is not a number of MiB (0 disables gradient buckets)" % (BUCKET_ENV, value))
    if mb < 0:
        raise ValueError("%s=%r must be >= 0 (0 disables gradient buckets)" % (BUCKET_ENV, value))
    return int(mb * 2 ** 20)


def _buckets(params, limit):
    """Consecutive buckets of `params` in reverse order, each up to `limit` bytes (at least one parameter)."""
    out, current, used = [], [], 0
    for p in reversed(params):
        nbytes = p.numel() * p.element_size()
        if current and used + nbytes > limit:
            out.append(current)
            current, used = [], 0
        current.append(p)
        used += nbytes
    if current:
        out.append(current)
    return out


class _GradientGroup:
    """Parameters whose gradients go out in one grouped allreduce, and how many
    of them are ready. Dictionaries and sets hold it by identity: a tuple of
    tensors as a key hashes every member through Tensor.__hash__ (Python
    code), and the hooks of a 100-tensor bucket did that some 30,000 times
    a step (10 ms, more than the allreduce)."""

    __slots__ = ("params", "states", "size", "ready", "auto")

    def __init__(self, params, auto=False, states=()):
        self.params = tuple(params)
        self.states = tuple(states)  # the members' _ParamState, where the optimizer keeps them
        self.size = len(self.params)
        self.ready = 0
        self.auto = auto  # a bucket made here, not a user's group: sparse gradients leave it

    def __len__(self):
        return len(self.params)

    def __iter__(self):
        return iter(self.params)


class _ParamState:
    """What a parameter's gradient hook needs, reached without hashing the
    tensor (Tensor.__hash__ is Python code, and the hooks run for every
    gradient of every step): the backward passes left before its gradient is
    reduced, and the group it goes out with (None: on its own)."""

    __slots__ = ("delay", "group")

    def __init__(self, delay):
        self.delay = delay
        self.group = None


def _parameter_names(named_parameters, all_params):
    """{parameter: the name its reductions carry}, validating named_parameters as Horovod does."""
    named_parameters = list(named_parameters) if named_parameters is not None else []
    if any(not isinstance(p, tuple) for p in named_parameters):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters().")
    names = [k for k, _ in named_parameters]
    dups = sorted({k for k in names if names.count(k) > 1})
    if dups:
        raise ValueError("Parameter names in named_parameters must be unique. "
                         "Found duplicates: %s" % ", ".join(dups))
    if not named_parameters:
        # Numbered across all param groups (not per group) so that two
        # groups never produce the same in-flight tensor name.
        return {p: "allreduce.noname.%s" % i for i, p in enumerate(all_params)}
    named_ids = {id(v) for _, v in named_parameters}
    unnamed = [id(p) for p in all_params if id(p) not in named_ids]
    if unnamed:
        raise ValueError("named_parameters was specified, but one or more model "
                         "parameters were not named. Python object ids: "
                         "%s" % ", ".join(str(i) for i in unnamed))
    return {v: k for k, v in named_parameters}


class _DistributedOptimizer(torch.optim.Optimizer):
    # Used only as the first base of the dynamically created class (see
    # DistributedOptimizer below): super() then resolves to the wrapped
    # optimizer's class, whose __init__/step/zero_grad do the real work.

    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, groups, sparse_as_dense, process_set):
        super().__init__(params)
        self._compression = compression
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set

        all_params = [p for group in self.param_groups for p in group["params"]]
        self._parameter_names = _parameter_names(named_parameters, all_params)

        # DistributedOptimizer() has checked that `groups` is a positive
        # count or a list; what a list may hold is torch's to say.
        if isinstance(groups, list):
            seen = set()
            for group in groups:
                for p in group:
                    if not isinstance(p, torch.Tensor):
                        raise ValueError("groups must consist of torch.Tensor.")
                    if id(p) in seen:
                        raise ValueError("A parameter can only appear once in groups.")
                    seen.add(id(p))
        self._groups = groups
        self._bucket_bytes = _bucket_bytes() if groups is None else 0

        self.backward_passes_per_step = backward_passes_per_step
        self._states = {p: _ParamState(backward_passes_per_step) for p in all_params}
        # key (a parameter, or a _GradientGroup) -> (handle, ctx).
        # A handle of None marks a gradient, or a group's gradients, that is
        # accumulating locally or waiting for the rest of its group; it still
        # counts as "in flight" for the zero_grad() check.
        self._handles = {}
        self._hook_handles = []
        self._requires_update = []  # (parameter, its _ParamState) in registration order
        # Allreduces a step submits from the hooks (groups, and gradients on
        # their own), and how many of them went out this step: the last one
        # is waited for at once (see _submit).
        self._step_units = 0
        self._units_submitted = 0
        self._bucket_tuning = None  # HOROVOD_AUTOTUNE's say in self._bucket_bytes (buckets only)
        self._synchronized = False
        self._should_synchronize = True
        # A single process has nothing to average; skipping the hooks keeps
        # it as fast as the plain optimizer (Horovod does the same, except
        # under elastic training where the world may grow later). Ranks
        # outside the process set take no part in its allreduces.
        if (size() > 1 or os.environ.get("HOROVOD_ELASTIC") == "1") and process_set.included():
            self._register_hooks()
        _live_optimizers.add(self)

    def _forget_in_flight(self):
        self._handles.clear()
        self._units_submitted = 0
        for state in self._states.values():
            state.delay = self.backward_passes_per_step
            if state.group is not None:
                state.group.ready = 0
        self._synchronized = False
        if self._bucket_tuning is not None:  # the next engine's tuner starts from the configured size
            self._bucket_tuning.restart()
            self._bucket_bytes = self._bucket_tuning.bytes
            self._form_groups()

    # -- setup ----------------------------------------------------------------

    def _register_hooks(self):
        p_list = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
        self._requires_update = [(p, self._states[p]) for p in p_list]
        # A size the user chose is kept under HOROVOD_AUTOTUNE, as the engine
        # keeps every knob set explicitly (called from __init__: the
        # environment _bucket_bytes() read).
        chosen = bool(os.environ.get(BUCKET_ENV, "").strip())
        if self._groups is None and self._bucket_bytes > 0 and not chosen:
            total = sum(p.numel() * p.element_size() for p in p_list)
            self._bucket_tuning = GradientBucketTuning(self._bucket_bytes, total, self.process_set)
        self._form_groups()
        for p, state in self._requires_update:
            self._hook_handles.append(p.register_post_accumulate_grad_hook(self._make_hook(p, state)))

    def _form_groups(self):
        """Which gradients go out together: the user's `groups`, or buckets of
        self._bucket_bytes (nothing may be in flight)."""
        p_list = [p for p, _ in self._requires_update]
        for state in self._states.values():
            state.group = None
        if self._groups is not None:
            if isinstance(self._groups, list):
                ids = {id(p) for p in p_list}
                p_groups, grouped = [], set()
                for group in self._groups:
                    members = [p for p in group if id(p) in ids]
                    if members:
                        p_groups.append(members)
                    grouped.update(id(p) for p in members)
                p_groups += [[p] for p in p_list if id(p) not in grouped]
            else:
                # Contiguous, nearly equal chunks, so that parameters that
                # finish backward close together share a group.
                p_groups = split_list(p_list, min(self._groups, len(p_list))) if p_list else []
        elif self._bucket_bytes > 0 and len(p_list) > 1:
            # A bucket of one (a gradient above the limit) stays a plain allreduce.
            p_groups = [g for g in _buckets(p_list, self._bucket_bytes) if len(g) > 1]
        else:
            p_groups = []
        for params in p_groups:
            group = _GradientGroup(params, auto=self._groups is None, states=[self._states[p] for p in params])
            for state in group.states:
                state.group = group
        self._count_step_units()

    def _count_step_units(self):
        groups = {id(s.group) for _, s in self._requires_update if s.group is not None}
        self._step_units = len(groups) + sum(1 for _, s in self._requires_update if s.group is None)

    def _make_hook(self, p, state):
        def hook(*ignore):
            if state.delay <= 0:
                raise AssertionError(_TOO_MANY_PASSES_MESSAGE)
            grad = p.grad
            assert not grad.requires_grad
            state.delay -= 1
            group = state.group
            if state.delay > 0:
                self._handles[p if group is None else group] = (None, None)
                return
            if group is not None and group.auto and grad.is_sparse:
                group = self._leave_bucket(p, group)
            if group is None:
                self._handles[p] = self._allreduce_grad_async(p, self._last_of_step())
                return
            group.ready += 1
            if group.ready == group.size:
                self._submit_group(group, self._last_of_step())
            elif group.ready == 1:
                self._handles[group] = (None, None)
        return hook

    def _leave_bucket(self, p, group):
        # Sparse gradients cannot be grouped: p is reduced on its own from now
        # on. Every rank runs the same model, so all make the same change.
        self._states[p].group = None
        members = [(q, s) for q, s in zip(group.params, group.states) if q is not p]
        rest = _GradientGroup([q for q, _ in members], auto=True, states=[s for _, s in members])
        waiting = self._handles.pop(group, None)  # the group's in-flight mark, now the rest's
        for s in rest.states:
            s.group = rest
        self._count_step_units()
        if rest.size:
            rest.ready = group.ready
            if rest.ready == rest.size:
                self._submit_group(rest, self._last_of_step())
            elif waiting is not None:
                self._handles[rest] = waiting
        return None

    # -- communication --------------------------------------------------------

    def _scale_factors(self):
        return gradient_scale_factors(self.op, self.gradient_predivide_factor)

    def _last_of_step(self):
        """Counts a hook's submission; whether it is the step's last."""
        self._units_submitted += 1
        return self._units_submitted == self._step_units

    def _submit(self, tensors, name, collective, single, last):
        # The step's last allreduce is followed at once by step()'s wait,
        # which runs the engine itself (caller_waits): waking the background
        # thread instead put a third busy thread on the CPUs while backward
        # ran on every rank, where ranks have a CPU each (2-CPU VM: steps of
        # a direct loop 1.5-3.6 ms shorter in four alternated runs; training
        # benchmark, six alternated runs, 0.66-0.76x DDP's step against
        # 0.69-0.82x). The earlier ones keep the background thread, which
        # overlaps them with the rest of backward.
        prescale, postscale = self._scale_factors()
        return _allreduce_async(tensors, tensors, name, self.op, prescale, postscale, self.process_set,
                                collective, single, caller_waits=last)

    def _prepare_grad(self, p):
        """The tensor to reduce for p's gradient, and whether the result replaces
        p.grad (True) or is copied into it."""
        if p.grad is None:
            # This rank did not compute the gradient (e.g. a branch that its
            # forward skipped), but others may have: it must still take part,
            # with zeros, or the collective would never complete.
            p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
        tensor = p.grad
        if tensor.is_sparse:
            if self.sparse_as_dense:
                return tensor.to_dense(), True
            return tensor, True
        if not tensor.is_contiguous():
            # e.g. channels_last gradients: the engine reads contiguous
            # memory, so reduce a copy and copy the result back.
            tensor = tensor.contiguous()
        return tensor, False

    def _allreduce_grad_async(self, p, last=False):
        name = self._parameter_names.get(p)
        tensor, replace = self._prepare_grad(p)
        if tensor.is_sparse:
            if sparse_allreduce_async is None:
                raise NotImplementedError("sparse gradients need sparse_as_dense=True in this build")
            return sparse_allreduce_async(tensor, name=name, op=self.op, process_set=self.process_set), None
        compressed, ctx = self._compression.compress(tensor)
        return self._submit([compressed], name, "allreduce", True, last), (ctx, replace)

    def _submit_group(self, group, last=False):
        tensors, ctxs = [], []
        for q in group:
            tensor, replace = self._prepare_grad(q)
            if tensor.is_sparse:
                raise NotImplementedError("sparse gradients cannot be grouped; use sparse_as_dense=True")
            compressed, ctx = self._compression.compress(tensor)
            tensors.append(compressed)
            ctxs.append((ctx, replace))
        # A name that every rank derives the same way, whatever order its
        # groups complete in (an auto-generated one would depend on order).
        name = "%s.group%d" % (self._parameter_names.get(group.params[0]), len(group))
        self._handles[group] = (self._submit(tensors, name, "grouped_allreduce", False, last), ctxs)

    def _write_back(self, p, output, ctx):
        if ctx is None:  # sparse allreduce: the result is a new sparse tensor
            p.grad = output
            return
        compressor_ctx, replace = ctx
        result = self._compression.decompress(output, compressor_ctx)
        if replace:
            # sparse_as_dense: the gradient was sparse and the wrapped optimizer
            # may accept only sparse ones (SparseAdam): hand the average back sparse.
            p.grad = result.to_sparse()
        elif result is not p.grad:
            # A compressed or contiguous copy was reduced: write it back into
            # the gradient's own storage (which the wrapped optimizer and any
            # user references see).
            p.grad.copy_(result)

    def synchronize(self):
        """Waits for all the gradient allreduces started during backward to finish and
        writes the averaged gradients into ``p.grad``. Gradients that have not been
        submitted yet (not computed on this rank, or still accumulating) are
        allreduced now.

        It is called by ``step()``; call it directly to modify gradients (for example to
        clip them) before the update, then call ``step()`` inside
        ``optimizer.skip_synchronize()``.
        """
        if not self.process_set.included():
            self._synchronized = True
            return
        for p, state in self._requires_update:
            group = state.group
            if group is not None:
                if self._handles.get(group, (None,))[0] is None:
                    self._submit_group(group)
            elif self._handles.get(p, (None,))[0] is None:
                self._handles[p] = self._allreduce_grad_async(p)
        for key, (handle, ctx) in list(self._handles.items()):
            output = synchronize(handle)
            if isinstance(key, _GradientGroup):
                for q, state, out, c in zip(key.params, key.states, output, ctx):
                    self._write_back(q, out, c)
                    state.delay = self.backward_passes_per_step
                key.ready = 0
            else:
                self._write_back(key, output, ctx)
                self._states[key].delay = self.backward_passes_per_step
        self._handles.clear()
        self._units_submitted = 0
        self._synchronized = True
        if self._bucket_tuning is not None:
            # HOROVOD_AUTOTUNE: every rank hears the same bucket size for the next step.
            bucket = self._bucket_tuning.after_step()
            if bucket != self._bucket_bytes:
                self._bucket_bytes = bucket
                self._form_groups()

    @contextmanager
    def skip_synchronize(self):
        """Context manager under which ``optimizer.step()`` does not synchronize the gradients first.

        Use it after an explicit ``synchronize()``:

        .. code-block:: python

            optimizer.synchronize()
            with optimizer.skip_synchronize():
                optimizer.step()
        """
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def set_backward_passes_per_step(self, passes):
        """Sets the number of backward passes whose gradients are accumulated locally
        before they are averaged across ranks."""
        self.backward_passes_per_step = passes
        for state in self._states.values():
            state.delay = passes

    def step(self, closure=None):
        """Synchronizes the gradients (unless inside ``skip_synchronize()``), then performs
        a single optimization step of the wrapped optimizer."""
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without "
                              "optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def zero_grad(self, *args, **kwargs):
        """Clears the gradients of all optimized tensors. Raises an AssertionError when
        gradient allreduces from the last backward pass are still in flight."""
        if self._handles:
            raise AssertionError(_ZERO_GRAD_MESSAGE)
        return super().zero_grad(*args, **kwargs)


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    # op=Adasum combines what each rank's optimizer would do, not the raw
    # gradients (Horovod's "delta" scheme): when the gradients of a bucket of
    # parameters are ready (the same static buckets as _DistributedOptimizer's,
    # or one parameter each with HOROVOD_GRADIENT_BUCKET_MB=0), the wrapped
    # optimizer takes a local step on those parameters alone, the changes it
    # made are reduced with Adasum (each tensor with its own weights) while
    # backward goes on, and step() applies the combined changes to the
    # parameters as they were before the local step. Like
    # _DistributedOptimizer it is the first base of a class created on the
    # fly that derives from the wrapped optimizer's class.

    def __init__(self, params, named_parameters, compression, backward_passes_per_step, process_set):
        super().__init__(params)
        self._compression = compression
        self.process_set = process_set
        all_params = [p for group in self.param_groups for p in group["params"]]
        self._parameter_names = _parameter_names(named_parameters, all_params)
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {p: backward_passes_per_step for p in all_params}
        requires_update = [p for p in all_params if p.requires_grad]
        limit = _bucket_bytes()
        if limit > 0:
            self._buckets = [_GradientGroup(b) for b in _buckets(requires_update, limit)]
        else:
            self._buckets = [_GradientGroup([p]) for p in reversed(requires_update)]
        self._bucket_of = {p: b for b in self._buckets for p in b}
        # bucket -> (handle, compression ctxs, values before the local step); a
        # handle of None marks a bucket whose gradients are not all ready yet.
        self._handles = {}
        self._hook_handles = []
        if process_set.included():
            for p in requires_update:
                self._hook_handles.append(p.register_post_accumulate_grad_hook(self._make_hook(p)))
        _live_optimizers.add(self)

    def _forget_in_flight(self):
        self._handles.clear()
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = self.backward_passes_per_step
        for bucket in self._buckets:
            bucket.ready = 0

    def _make_hook(self, p):
        def hook(*ignore):
            if self._allreduce_delay[p] <= 0:
                raise AssertionError(_TOO_MANY_PASSES_MESSAGE)
            self._allreduce_delay[p] -= 1
            bucket = self._bucket_of[p]
            if self._allreduce_delay[p] == 0:
                bucket.ready += 1
            if bucket.ready == len(bucket):
                self._handles[bucket] = self._step_and_reduce_async(bucket)
            else:
                self._handles[bucket] = (None, None, None)
        return hook

    def _step_and_reduce_async(self, bucket):
        for p in bucket:
            if p.grad is None:
                # Not computed on this rank: the local step leaves p as it is
                # (for plain SGD), and the rank still takes part.
                p.grad = torch.zeros_like(p)
        starts = [p.detach().clone() for p in bucket]
        # The wrapped optimizer steps on the bucket alone: every group is
        # narrowed to its members in the bucket for the duration of the call.
        members = {id(p) for p in bucket}
        saved = [group["params"] for group in self.param_groups]
        try:
            for group in self.param_groups:
                group["params"] = [q for q in group["params"] if id(q) in members]
            super().step()
        finally:
            for group, params in zip(self.param_groups, saved):
                group["params"] = params
        compressed, ctxs = [], []
        with torch.no_grad():
            for p, start in zip(bucket, starts):
                p.sub_(start)  # p now holds this rank's change, the tensor to reduce
                c, ctx = self._compression.compress(p.data)
                compressed.append(c)
                ctxs.append(ctx)
        name = self._parameter_names.get(bucket.params[0])
        if len(bucket) > 1:
            name = "%s.group%d" % (name, len(bucket))
        handle = grouped_allreduce_async_(compressed, name=name, op=Adasum, process_set=self.process_set)
        return handle, ctxs, starts

    def synchronize(self):
        # The reduced changes are applied in step(); gradients are never
        # replaced, so there is nothing to wait for here.
        pass

    @contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum optimizer.")
        yield  # pragma: no cover - makes this a generator for contextmanager

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def step(self, closure=None):
        """Applies the Adasum combination of every rank's local optimizer step."""
        if not self.process_set.included():
            return super().step(closure)  # nothing to combine with: a plain local step
        loss = closure() if closure is not None else None
        for bucket in self._buckets:
            if self._handles.get(bucket, (None,))[0] is None:
                # Not (all) produced by backward: step and reduce it now.
                self._handles[bucket] = self._step_and_reduce_async(bucket)
        for bucket, (handle, ctxs, starts) in self._handles.items():
            for p, change, ctx, start in zip(bucket, synchronize(handle), ctxs, starts):
                with torch.no_grad():
                    p.copy_(start.add_(self._compression.decompress(change, ctx)))
                self._allreduce_delay[p] = self.backward_passes_per_step
            bucket.ready = 0
        self._handles.clear()
        return loss

    def zero_grad(self, *args, **kwargs):
        """Clears the gradients; raises an AssertionError while reductions of the
        last backward pass are still in flight."""
        if self._handles:
            raise AssertionError(_ZERO_GRAD_MESSAGE)
        return super().zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None,
                         compression=Compression.none,
                         backward_passes_per_step=1,
                         op=Average,
                         gradient_predivide_factor=1.0,
                         num_groups=0, groups=None,
                         sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps a torch.optim.Optimizer so that gradients are combined across the ranks (averaged by
    default) before the wrapped optimizer applies them to the weights.

    Each gradient's allreduce is launched as soon as ``loss.backward()`` has produced it, so the
    communication overlaps the rest of the backward pass; ``step()`` waits for all of them to
    complete before updating the model.

    ``synchronize()`` waits for the pending allreduces without stepping, for code that has to
    change the averaged gradients in place first, gradient clipping for instance. After calling
    it yourself, run ``step()`` inside ``optimizer.skip_synchronize()``.

    Gradient clipping, for example:

    .. code-block:: python

        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.synchronize()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        with optimizer.skip_synchronize():
            optimizer.step()

    Arguments:
        optimizer: the optimizer that applies the updates; the returned object is an instance
            of a class derived from its class, sharing its parameter groups.
        named_parameters: (name, parameter) pairs, normally ``model.named_parameters()``,
            from which the allreduces are named. When given it must name every parameter,
            each under a unique name.
        compression: a compressor applied to gradients before they are exchanged and undone
            afterwards, to cut the bytes sent at each step. Compression.none by default.
        backward_passes_per_step: how many backward passes are expected before each
            step()/synchronize(); gradients accumulate locally over them and are reduced
            once, which combines several mini-batches into one update.
        op: the reduction used to combine gradients across the ranks. With ``hvd.Adasum``
            each rank's optimizer steps locally and the parameter changes are combined
            with Adasum instead.
        gradient_predivide_factor: only with op == Average: moves part of the averaging before
            the sum. Gradients are multiplied by 1.0 / gradient_predivide_factor before
            summing and by gradient_predivide_factor / size afterwards.
        num_groups: deprecated in favour of ``groups``: the number of groups the gradient
            allreduces are split into; 0 (no explicit grouping) by default.
        groups: how gradient allreduces are grouped: None (the default) for no explicit
            grouping; a positive integer to split them into that many groups; or a list of
            lists of torch.Tensor, where the tensors of each inner list are reduced together
            and every parameter not listed is a group of its own.
        sparse_as_dense: when True, sparse gradients are converted to dense tensors for the
            allreduce.
        process_set: the ProcessSet over whose ranks the gradients are reduced; the global
            process set unless given.
    """
    # Checked before anything is built, so a bad configuration fails at
    # construction on every rank rather than inside a backward hook.
    groups = check_optimizer_options(op, gradient_predivide_factor, num_groups, groups)
    if op == Adasum and size() > 1:
        cls = type(optimizer.__class__.__name__, (_DistributedAdasumOptimizer, optimizer.__class__), {})
        return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, process_set)

    cls = type(optimizer.__class__.__name__, (_DistributedOptimizer, optimizer.__class__), {})
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               gradient_predivide_factor, groups, sparse_as_dense, process_set)
