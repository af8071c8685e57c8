"""Keep Snakemake's scheduler from polling itself ever faster (a workaround; issue 19).

Why: with the job rate limiter on (Snakemake's default ``--max-jobs-per-timespan 100/1s``),
every scheduling round of ``JobScheduler.schedule`` ends by starting a
``threading.Timer`` that wakes the scheduler after the timespan, and that wake-up is
itself a round which starts the next timer. Every job completion also wakes the
scheduler, and its round starts one more timer: after N completions, N timer chains
wake it N times a second, and each round re-reads the size of every ready job's input
files. In ``make demo`` (536 jobs, Snakemake 9.27) the master process so took 37-46 % of
a core (``make bench-loop``; py-spy: ``_schedule_reevalutation``, ``Thread.start``,
``update_input_sizes``), time the jobs did not get on a 2-core machine.

The fix keeps one pending timer per scheduler: a round that finds one pending starts no
other. The pending mark is cleared before the timer wakes the scheduler, so the round
it causes starts the next one: the scheduler is still re-evaluated once per timespan,
as the rate limiter intends, and never more often because of old completions. The
timer thread is a daemon, so a finished run does not wait for it.

It replaces one private method, so it checks that the method exists and takes the
arguments it expects, and otherwise leaves Snakemake as it is (and says so).
"""

from __future__ import annotations

import inspect
import threading

_MARK = "_synthaudit_single_timer"


def keep_one_reevaluation_timer() -> str:
    """Patch ``JobScheduler._schedule_reevalutation`` once; returns what was done, for the log."""
    try:
        from snakemake.scheduling.job_scheduler import JobScheduler
    except ImportError:
        return "not applied: snakemake.scheduling.job_scheduler.JobScheduler not found"
    original = getattr(JobScheduler, "_schedule_reevalutation", None)
    if original is None:
        return "not applied: this Snakemake has no JobScheduler._schedule_reevalutation"
    if getattr(original, _MARK, False):
        return "already applied"
    if list(inspect.signature(original).parameters) != ["self", "delay"]:
        return f"not applied: unexpected signature {inspect.signature(original)}"
    lock = threading.Lock()

    def _schedule_reevalutation(self, delay) -> None:
        with lock:
            if getattr(self, "_synthaudit_timer", None) is not None:
                return  # one is pending: it will wake the scheduler

            def wake() -> None:
                with lock:
                    self._synthaudit_timer = None
                self._open_jobs.release()

            timer = threading.Timer(delay, wake)
            timer.daemon = True
            self._synthaudit_timer = timer
            timer.start()

    setattr(_schedule_reevalutation, _MARK, True)
    JobScheduler._schedule_reevalutation = _schedule_reevalutation
    return "applied"
