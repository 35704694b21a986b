# test_interrupts.py - a rank waiting on a collective still runs Python signal
# handlers: Ctrl-C (SIGINT) raises KeyboardInterrupt and an alarm handler's
# exception (what pytest-timeout does) propagates, within a fraction of a
# second. The interrupted operation stays in flight with its buffers alive,
# and shutdown() ends it cleanly.
import ranks


def test_ctrl_c_interrupts_a_pending_allreduce_and_the_operation_still_completes(tmp_path):
    results = ranks.run_ok(2, '''
import signal, threading
# A rank started from a background job inherits SIGINT ignored, and Python
# then installs no KeyboardInterrupt handler: put it in place, as a terminal has.
signal.signal(signal.SIGINT, signal.default_int_handler)
hvd.init()
out = {}
x = np.arange(4, dtype=np.float32) + hvd.rank()
# Rank 1 submits "late" only once rank 0 has been interrupted in it (a file
# says so), however slowly a loaded machine runs the ranks.
marker = os.path.join(os.environ["MARKER_DIR"], "interrupted")
if hvd.rank() == 0:
    sent = []
    def interrupt():
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)
    threading.Timer(0.5, interrupt).start()
    try:
        hvd.allreduce_(x, op=hvd.Sum, name="late")
        out["interrupted"] = False
    except KeyboardInterrupt:
        out["interrupted"] = True
        out["waited"] = time.monotonic() - sent[0]  # from the signal to the exception
    open(marker, "w").close()
else:
    deadline = time.monotonic() + 30
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    hvd.allreduce_(x, op=hvd.Sum, name="late")
# The interrupted allreduce was still in flight on rank 0 and completed once
# rank 1 submitted it: into x, which hvd kept alive.
after = hvd.allreduce(np.ones(1, np.float32), op=hvd.Sum, name="after")
out["x"] = x.tolist()
out["after"] = after.tolist()
print(json.dumps(out))
''', timeout=60, env={"MARKER_DIR": str(tmp_path)})
    assert results[0]["interrupted"] is True
    assert results[0]["waited"] < 1.0, results[0]
    for res in results:
        assert res["x"] == [1.0, 3.0, 5.0, 7.0]
        assert res["after"] == [2.0]


def test_alarm_handler_exception_ends_a_wait_and_shutdown_cleans_up():
    results = ranks.run(2, '''
import signal
hvd.init()
if hvd.rank() == 0:
    class Alarm(Exception):
        pass
    def on_alarm(signum, frame):
        raise Alarm()
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    buf = np.ones(1 << 16, np.float32)
    handle = hvd.allreduce_async_(buf, name="never")  # rank 1 never submits it
    start = time.monotonic()
    try:
        hvd.synchronize(handle)
        print("no alarm")
    except Alarm:
        print("alarm after %.2f s" % (time.monotonic() - start))
    # The handle is still pending; shutdown fails it and frees what it held.
    hvd.shutdown()
    print("shut down")
else:
    time.sleep(3)
    hvd.shutdown()
    print("shut down")
''', timeout=60)
    assert all(r.returncode == 0 for r in results), "\n".join(map(str, results))
    lines = results[0].stdout.split("\n")
    waited = float(lines[0].split()[2])
    assert lines[0].startswith("alarm after") and waited < 1.5, results[0]
    assert "shut down" in results[0].stdout and "shut down" in results[1].stdout
