# checklist.py - runs a rank program's independent checks one after another
# in one process and records each outcome, so one failing check does not
# hide the others (a TF process start costs seconds, so tests launch few).
# A failure keeps its traceback, which names the check's file and line.
"""Run a rank program's independent checks and collect their outcomes."""

import traceback


def run_checks(checks, *args):
    """Calls each function of `checks` with `args`, in order; returns {function name: outcome}.

    The outcome is "ok" when the function returned None, what it returned
    otherwise, or "FAILED" and the traceback when it raised.
    """
    report = {}
    for check in checks:
        try:
            result = check(*args)
            report[check.__name__] = "ok" if result is None else result
        except Exception:
            report[check.__name__] = "FAILED\n" + traceback.format_exc()
    return report
