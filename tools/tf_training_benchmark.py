#!/usr/bin/env python
# tf_training_benchmark.py - training-step time of a Keras model with
# hvd.DistributedGradientTape (under horovodrun) against
# tf.distribute.MultiWorkerMirroredStrategy (two workers on 127.0.0.1), on
# the same model, the same data and the same number of steps, plus a check
# that both end where a one-process run averaging the workers' gradients ends.
#
#   python tools/tf_training_benchmark.py                # 3 rounds, P=2
#   python tools/tf_training_benchmark.py --quick        # smoke test
"""hvd.DistributedGradientTape vs tf.distribute.MultiWorkerMirroredStrategy: training-step time on CPU."""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import allreduce_benchmark as ab  # noqa: E402  (its process waiting)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--np", type=int, default=2, help="workers (ranks) per job (default 2)")
    parser.add_argument("--blocks", type=int, default=25,
                        help="Dense+LayerNormalization blocks, 4 weight tensors each (default 25: 102 tensors)")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32, help="examples per worker and step")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first (tracing, first collectives)")
    parser.add_argument("--steps", type=int, default=50, help="timed steps per job")
    parser.add_argument("--rounds", type=int, default=3,
                        help="jobs per method, alternating hvd and MWMS (median of the per-job medians)")
    parser.add_argument("--mwms-implementation", choices=("auto", "ring"), default="auto",
                        help="MultiWorkerMirroredStrategy's collective implementation (AUTO picks RING on CPU)")
    parser.add_argument("--threads", type=int, default=0,
                        help="TensorFlow intra-op threads per worker (0: cores / workers)")
    parser.add_argument("--tolerance", type=float, default=1e-4,
                        help="largest |parameter difference| allowed between methods and the reference")
    parser.add_argument("--timeout", type=float, default=600, help="seconds allowed per job")
    parser.add_argument("--quick", action="store_true", help="smoke test: 4 blocks, 3+5 steps, 1 round")
    parser.add_argument("--json", metavar="PATH", help="also write every job's numbers as JSON")
    # Internal: one worker of one job.
    parser.add_argument("--role", choices=("hvd", "mwms", "reference"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.blocks, args.warmup, args.steps, args.rounds = 4, 3, 5, 1
    return args


# --------------------------------------------------------------------------- what every worker runs
#
# Every role builds the same model with the same starting weights (drawn with
# numpy from a fixed seed and set explicitly, so no framework's random stream
# decides them) and trains on the same batches: worker r's batch of step i is
# batch (r, i % DISTINCT_BATCHES) drawn from numpy with seed 1000 + r. The
# reference is one process that computes every worker's gradient of a step on
# that worker's batch and applies their mean.

DISTINCT_BATCHES = 4
LEARNING_RATE = 0.01


def make_batches(args, rank):
    import numpy as np

    rng = np.random.RandomState(1000 + rank)
    return [(rng.standard_normal((args.batch_size, args.width)).astype(np.float32),
             rng.randint(0, 10, size=(args.batch_size,)).astype(np.int64)) for _ in range(DISTINCT_BATCHES)]


def build_model(args):
    import numpy as np
    import tensorflow as tf

    keras = tf.keras
    layers = [keras.Input(shape=(args.width,))]
    for _ in range(args.blocks):
        layers += [keras.layers.Dense(args.width, activation=None), keras.layers.LayerNormalization(),
                   keras.layers.ReLU()]
    layers.append(keras.layers.Dense(10))
    model = keras.Sequential(layers)
    rng = np.random.RandomState(0)
    weights = []
    for w in model.get_weights():
        if w.ndim == 2:  # Dense kernel: uniform in +-1/sqrt(fan_in), as torch's Linear starts
            bound = 1.0 / np.sqrt(w.shape[0])
            weights.append(rng.uniform(-bound, bound, size=w.shape).astype(np.float32))
        else:  # biases and LayerNormalization's beta at 0, gamma at 1
            weights.append(w.copy())
    model.set_weights(weights)
    return model


def configure_threads(args, nworkers):
    import tensorflow as tf

    threads = args.threads or max(1, (os.cpu_count() or 1) // nworkers)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    # Two inter-op threads: collective ops wait for their peers on one while the
    # other keeps the step's independent work going.
    tf.config.threading.set_inter_op_parallelism_threads(2)
    return threads


def run_steps(step, batches, args):
    """Runs warm-up + timed steps; returns (per-step seconds of the timed ones, local loss of every step)."""
    import tensorflow as tf

    data = [(tf.nest.map_structure(tf.constant, x), tf.nest.map_structure(tf.constant, y)) for x, y in batches]
    times, losses = [], []
    clock = time.perf_counter
    for i in range(args.warmup + args.steps):
        x, y = data[i % DISTINCT_BATCHES]
        t0 = clock()
        loss = float(step(x, y))  # float() waits for the step's result
        dt = clock() - t0
        losses.append(loss)
        if i >= args.warmup:
            times.append(dt)
    return times, losses


def write_result(args, rank, model, times, losses, extra):
    import numpy as np

    np.savez(os.path.join(args.out, "weights%d.npz" % rank), *model.get_weights())
    with open(os.path.join(args.out, "rank%d.json" % rank), "w") as f:
        json.dump(dict(extra, rank=rank, times=times, losses=losses), f)


def role_hvd(args):
    import tensorflow as tf

    import horovod.tensorflow as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    threads = configure_threads(args, hvd.local_size())
    model = build_model(args)
    # Equal already (same seed); broadcast anyway, as a real job starts.
    hvd.broadcast_variables(model.variables, root_rank=0)
    opt = tf.keras.optimizers.SGD(learning_rate=LEARNING_RATE)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape)  # averages the gradients over the ranks
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    times, losses = run_steps(step, make_batches(args, rank), args)
    import horovod
    write_result(args, rank, model, times, losses,
                 {"size": size, "threads": threads, "library": "hvd %s, tensorflow %s"
                  % (getattr(horovod, "__version__", "?"), tf.__version__),
                  "tensors": len(model.trainable_variables)})
    hvd.shutdown()


def role_mwms(args):
    import tensorflow as tf

    # The strategy must exist before TensorFlow runs anything else in this process.
    rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    nworkers = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
    threads = configure_threads(args, nworkers)
    impl = tf.distribute.experimental.CommunicationImplementation
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=impl.RING if args.mwms_implementation == "ring" else impl.AUTO)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    global_batch = args.batch_size * strategy.num_replicas_in_sync
    with strategy.scope():
        model = build_model(args)
        opt = tf.keras.optimizers.SGD(learning_rate=LEARNING_RATE)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            per_example = loss_fn(y, model(x, training=True))
            # Each replica's share of the global mean: the optimizer sums the
            # replicas' gradients (one all-reduce), which then is the global mean's.
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss * strategy.num_replicas_in_sync  # this worker's own mean loss

    @tf.function
    def step(x, y):
        # One replica per worker: this worker's local result, no extra collective.
        return strategy.experimental_local_results(strategy.run(replica_step, args=(x, y)))[0]

    times, losses = run_steps(step, make_batches(args, rank), args)
    write_result(args, rank, model, times, losses,
                 {"size": nworkers, "threads": threads, "library": "tensorflow %s, MWMS %s"
                  % (tf.__version__, args.mwms_implementation.upper()),
                  "tensors": len(model.trainable_variables)})


def role_reference(args):
    import tensorflow as tf

    # The workers' thread count: the same kernels, so the same rounding.
    configure_threads(args, args.np)
    model = build_model(args)
    opt = tf.keras.optimizers.SGD(learning_rate=LEARNING_RATE)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(xs, ys):
        # Each worker's gradient on its own batch, then their mean: what the
        # distributed step computes, in one process and without collectives. (One
        # gradient on the concatenated batch is the same mathematically, but its
        # matrix products round differently, and over tens of steps this deep
        # model amplifies that to visible differences.)
        losses, grads = [], []
        for x, y in zip(xs, ys):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            losses.append(loss)
            grads.append(tape.gradient(loss, model.trainable_variables))
        mean = [tf.add_n(list(gs)) / len(gs) for gs in zip(*grads)]
        opt.apply_gradients(zip(mean, model.trainable_variables))
        return tf.add_n(losses) / len(losses)

    per_rank = [make_batches(args, r) for r in range(args.np)]
    combined = [(tuple(b[i][0] for b in per_rank), tuple(b[i][1] for b in per_rank))
                for i in range(DISTINCT_BATCHES)]
    times, losses = run_steps(step, combined, args)
    write_result(args, 0, model, times, losses, {"size": 1, "library": "tensorflow %s" % tf.__version__})


# --------------------------------------------------------------------------- launching and comparing


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# The options a worker needs, forwarded as given (after --quick has applied).
WORKER_OPTIONS = ("np", "blocks", "width", "batch_size", "warmup", "steps", "mwms_implementation", "threads")


def _self_cmd(role, out, args):
    cmd = [sys.executable, os.path.abspath(__file__), "--role", role, "--out", out]
    for name in WORKER_OPTIONS:
        cmd += ["--" + name.replace("_", "-"), str(getattr(args, name))]
    return cmd


def _wait(procs, timeout, what):
    ok, log = ab._wait_all(procs, timeout)
    if not ok:
        print("! %s failed; its output:\n%s" % (what, log[-6000:]), flush=True)
    return ok


def run_job(role, args):
    """One job of `role` in fresh processes; returns its ranks' results and weights, or None."""
    import numpy as np

    env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2")
    with tempfile.TemporaryDirectory(prefix="hvd-tf-bench-") as out:
        if role == "hvd":
            procs = [subprocess.Popen([sys.executable, "-m", "horovod.runner", "-np", str(args.np)]
                                      + _self_cmd("hvd", out, args), env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True)]
            nranks = args.np
        elif role == "mwms":
            workers = ["127.0.0.1:%d" % p for p in free_ports(args.np)]
            procs = []
            for i in range(args.np):
                wenv = dict(env, TF_CONFIG=json.dumps({"cluster": {"worker": workers},
                                                       "task": {"type": "worker", "index": i}}))
                procs.append(subprocess.Popen(_self_cmd("mwms", out, args), env=wenv, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, text=True))
            nranks = args.np
        else:
            procs = [subprocess.Popen(_self_cmd("reference", out, args), env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True)]
            nranks = 1
        try:
            if not _wait(procs, args.timeout, "%s job" % role):
                return None
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        ranks = []
        for r in range(nranks):
            with open(os.path.join(out, "rank%d.json" % r)) as f:
                res = json.load(f)
            with np.load(os.path.join(out, "weights%d.npz" % r)) as z:
                res["weights"] = [z["arr_%d" % i] for i in range(len(z.files))]
            ranks.append(res)
        return ranks


def step_times(ranks):
    """Per-step seconds of the slowest rank (a step is done when every rank is)."""
    return [max(ts) for ts in zip(*(r["times"] for r in ranks))]


def mean_losses(ranks):
    """The global mean loss of every step: the mean of the workers' own means (equal batches)."""
    return [sum(ls) / len(ls) for ls in zip(*(r["losses"] for r in ranks))]


def max_diff(a, b):
    return max(float(abs(x - y).max()) for x, y in zip(a, b))


def main(argv=None):
    args = parse_args(argv)
    if args.role:
        {"hvd": role_hvd, "mwms": role_mwms, "reference": role_reference}[args.role](args)
        return 0

    print("TensorFlow training step, P=%d on one host (CPU): %d x Dense(%d)+LayerNormalization+ReLU, "
          "batch %d per worker, SGD lr %g, %d warm-up + %d timed steps per job, %d round(s), %d CPUs"
          % (args.np, args.blocks, args.width, args.batch_size, LEARNING_RATE, args.warmup, args.steps,
             args.rounds, os.cpu_count() or 0), flush=True)
    ref = run_job("reference", args)
    if ref is None:
        return 1
    jobs = {"hvd": [], "mwms": []}
    # Alternating jobs, so that a change in background load lands on both methods.
    for rnd in range(args.rounds):
        for role in ("hvd", "mwms"):
            print("round %d/%d: %s ..." % (rnd + 1, args.rounds, role), flush=True)
            res = run_job(role, args)
            if res is None:
                return 1
            jobs[role].append(res)

    ok = True
    ref_w, ref_loss = ref[0]["weights"], ref[0]["losses"]
    summary = {}
    for role, label in (("hvd", "hvd.DistributedGradientTape"), ("mwms", "MultiWorkerMirroredStrategy")):
        medians = [statistics.median(step_times(ranks)) for ranks in jobs[role]]
        ranks_agree = max(max_diff(ranks[0]["weights"], r["weights"]) for ranks in jobs[role] for r in ranks)
        vs_ref = max(max_diff(ranks[0]["weights"], ref_w) for ranks in jobs[role])
        loss_vs_ref = max(max(abs(a - b) for a, b in zip(mean_losses(ranks), ref_loss)) for ranks in jobs[role])
        summary[role] = {"label": label, "library": jobs[role][0][0]["library"], "job_medians_s": medians,
                         "median_s": statistics.median(medians), "ranks_max_diff": ranks_agree,
                         "ref_max_diff": vs_ref, "loss_max_diff": loss_vs_ref,
                         "tensors": jobs[role][0][0]["tensors"], "threads": jobs[role][0][0]["threads"]}
        ok = ok and ranks_agree <= args.tolerance and vs_ref <= args.tolerance
    between = max(max_diff(a[0]["weights"], b[0]["weights"]) for a in jobs["hvd"] for b in jobs["mwms"])
    ok = ok and between <= args.tolerance

    h, m = summary["hvd"], summary["mwms"]
    print("\n%d weight tensors; %d TensorFlow intra-op threads per worker; %s; %s"
          % (h["tensors"], h["threads"], h["library"], m["library"]))
    print("| method | step ms (median of job medians) | job medians ms |")
    print("|---|---:|---|")
    for s in (h, m):
        print("| %s | %.2f | %s |" % (s["label"], s["median_s"] * 1e3,
                                       ", ".join("%.2f" % (t * 1e3) for t in s["job_medians_s"])))
    print("hvd / MWMS step time: %.2f" % (h["median_s"] / m["median_s"]))
    print("after %d identical steps: max |param difference| hvd vs MWMS %.2e; between ranks: hvd %.2e, MWMS %.2e; "
          "vs the one-process reference: hvd %.2e, MWMS %.2e; max |mean loss - reference loss| over all steps: "
          "hvd %.2e, MWMS %.2e (tolerance %.0e for parameters): %s"
          % (args.warmup + args.steps, between, h["ranks_max_diff"], m["ranks_max_diff"], h["ref_max_diff"],
             m["ref_max_diff"], h["loss_max_diff"], m["loss_max_diff"], args.tolerance,
             "agree" if ok else "DO NOT AGREE"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(args).items() if k not in ("role", "out")},
                       "summary": summary, "hvd_vs_mwms_max_diff": between,
                       "step_times_s": {role: [step_times(r) for r in jobs[role]] for role in jobs}}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
