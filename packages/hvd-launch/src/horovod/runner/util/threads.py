# threads.py - Horovod's horovod.runner.util.threads helpers, which its test
# utilities (test/utils/common.py) and integrations import by this path.
"""Running functions on background threads."""

import queue
import threading

__all__ = ["execute_function_multithreaded", "in_thread", "on_event"]


def _require_tuple(args):
    if not isinstance(args, tuple):
        raise ValueError("args must be a tuple, got %s (write a single argument as (arg,))" % type(args).__name__)


def _swallowing(func):
    def run(*args):
        try:
            func(*args)
        except Exception:
            pass
    return run


def in_thread(target, args=(), name=None, daemon=True, silent=False):
    """Starts ``target(*args)`` on a new thread and returns the thread.

    Args:
        target: the function to run.
        args: its positional arguments, as a tuple.
        name: the thread's name.
        daemon: whether the thread is a daemon (does not keep the process alive).
        silent: when True, exceptions raised by `target` are dropped.
    """
    _require_tuple(args)
    thread = threading.Thread(target=_swallowing(target) if silent else target, args=args, name=name,
                              daemon=daemon)
    thread.start()
    return thread


def on_event(event, func, args=(), stop=None, check_stop_interval_s=1.0, daemon=True, silent=False):
    """Starts a thread that runs ``func(*args)`` once `event` is set, and returns the thread.

    With a `stop` event the thread checks it every `check_stop_interval_s`
    seconds and ends without calling `func` once it is set. A non-daemon
    thread needs a `stop` event, or it could keep the process alive forever.
    """
    if event is None:
        raise ValueError("event must not be None")
    _require_tuple(args)
    if stop is None and not daemon:
        raise ValueError("a non-daemon event thread needs a stop event")

    def wait_then_call():
        if stop is None:
            event.wait()
        else:
            while not event.wait(check_stop_interval_s):
                if stop.is_set():
                    return
            if stop.is_set():
                return
        func(*args)

    return in_thread(wait_then_call, daemon=daemon, silent=silent)


def execute_function_multithreaded(fn, args_list, block_until_all_done=True, max_concurrent_executions=1000):
    """Calls ``fn(*args)`` for every tuple in `args_list` on a pool of threads.

    Returns a dict from the index in `args_list` to that call's result when
    `block_until_all_done`, else None right after starting the threads.
    """
    work = queue.Queue()
    for index, args in enumerate(args_list):
        _require_tuple(args)
        work.put((index, args))
    results = {}
    lock = threading.Lock()

    def worker():
        while True:
            try:
                index, args = work.get_nowait()
            except queue.Empty:
                return
            value = fn(*args)
            with lock:
                results[index] = value

    threads = [in_thread(worker) for _ in range(max(1, min(max_concurrent_executions, len(args_list))))]
    if not block_until_all_done:
        return None
    for thread in threads:
        thread.join()
    return results
