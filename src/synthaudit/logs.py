"""Logging for rule scripts: to the rule's log file and to the terminal at once.

Why: long stages must show progress where the user is looking (the terminal) and
keep it where they will look later (``logs/``); a failure ends with one clear line
naming the problem rather than only a traceback.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from pathlib import Path


@contextlib.contextmanager
def logged(log_path: str | None, name: str = "synthaudit"):
    """Log to ``log_path`` and stderr for the duration of a rule script.

    Exceptions are logged with their message (and traceback in the file) and re-raised.
    """
    logger = logging.getLogger(name)
    logger.setLevel(logging.INFO)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S")
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_path, mode="w"))
    for h in handlers:
        h.setFormatter(fmt)
        logger.addHandler(h)
    try:
        yield logger
    except Exception as e:
        logger.error("%s: %s", type(e).__name__, e)
        if log_path:
            logger.handlers[-1].stream.write(_traceback())
        raise
    finally:
        for h in handlers:
            logger.removeHandler(h)
            h.close()


def _traceback() -> str:
    import traceback

    return traceback.format_exc()


class Progress:
    """Logs ``label: done/total (eta)`` at most every ``every_s`` seconds, and at the end."""

    def __init__(self, logger: logging.Logger, label: str, total: int | None, every_s: float = 5.0):
        self.logger, self.label, self.total, self.every_s = logger, label, total, every_s
        self.start = self.last = time.monotonic()

    def __call__(self, done: int, total: int | None = None) -> None:
        total = total if total is not None else self.total
        now = time.monotonic()
        if done != 1 and now - self.last < self.every_s and (total is None or done < total):
            return  # the first unit always: a long training says its duration after one epoch
        self.last = now
        elapsed = now - self.start
        if total:
            eta = elapsed / max(done, 1) * (total - done)
            self.logger.info("%s: %d/%d (%.0f%%, %.1fs elapsed, ~%.1fs left)", self.label, done, total,
                             100.0 * done / total, elapsed, eta)
        else:
            self.logger.info("%s: %d done (%.1fs elapsed)", self.label, done, elapsed)
