"""Fault injection for tests/test_faults.py: a disk that fills up, a crash after an output lands.

Python imports a module named ``sitecustomize`` from its path at start-up. The fault tests
put this folder first on the PYTHONPATH of one Snakemake run, so every Python process of
that run (Snakemake and its jobs' scripts) loads this file; elsewhere it is never on the
path, and even there it does nothing unless one of these is set:

``SYNTHAUDIT_FAULT_ENOSPC=<glob>``
    A file opened for writing whose absolute path matches ``<glob>`` takes ``ROOM`` bytes;
    then every write raises ``OSError(ENOSPC)``, as on a disk that fills up mid-write.
``SYNTHAUDIT_FAULT_ONCE=<file>`` (with ENOSPC)
    Only the first matching file fills up: it creates ``<file>``, and while that exists the
    disk has room again (a transient fault: tests/test_slurm.py's job that a retry completes).
``SYNTHAUDIT_FAULT_HOLD=<glob>`` with ``SYNTHAUDIT_FAULT_HOLD_FLAG=<file>``
    Right after ``os.replace`` has put a file onto a path matching ``<glob>`` (an atomic
    write has landed; the job has not finished), the process writes its pid to ``<file>``
    and waits for the test to kill the run (failing after ``HOLD_S`` seconds).

Why here and not in the workflow: the production code carries no test hook, and neither
needs root, a small tmpfs or LD_PRELOAD, which CI runners lack. tests/test_faults.py also
loads this file under another name and uses :func:`filling_open` in-process.
"""

import builtins
import errno
import fnmatch
import io
import os
import time

ROOM = 100  # bytes a matching file takes before the disk is full: part of the file gets written
HOLD_S = 120


class FillingFile:
    """A file opened for writing on a disk with ``room`` bytes left."""

    def __init__(self, raw, room: int):
        self._raw, self._room = raw, room

    def write(self, data):
        if not isinstance(data, str):
            data = memoryview(data).cast("B")
        if len(data) > self._room:
            self._raw.write(data[: self._room])
            self._room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._room -= len(data)
        return self._raw.write(data)

    def __getattr__(self, name):
        return getattr(self._raw, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._raw.close()


def _matches(path, pattern: str) -> bool:
    return isinstance(path, (str, bytes, os.PathLike)) and fnmatch.fnmatch(os.path.abspath(os.fsdecode(path)), pattern)


def _first_time(marker: str | None) -> bool:
    """True once per marker file (created atomically); always True without a marker."""
    if not marker:
        return True
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def filling_open(real_open, pattern: str, room: int = ROOM, once: str | None = None):
    """``open`` whose files matching ``pattern``, opened for writing, fill up after ``room`` bytes
    (only the first such file when ``once`` names a marker file)."""

    def open_(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        if any(c in mode for c in "wax+") and _matches(file, pattern) and _first_time(once):
            return FillingFile(f, room)
        return f

    return open_


def holding_replace(real_replace, pattern: str, flag: str):
    """``os.replace`` that, onto a path matching ``pattern``, replaces, then reports and waits."""

    def replace(src, dst, *args, **kwargs):
        real_replace(src, dst, *args, **kwargs)
        if _matches(dst, pattern):
            with open(f"{flag}.tmp", "w") as f:
                f.write(str(os.getpid()))
            real_replace(f"{flag}.tmp", flag)  # whole or absent: the test reads the pid at once
            time.sleep(HOLD_S)
            raise RuntimeError(f"fault injection: held {HOLD_S} s after writing {dst}, and no one killed the run")

    return replace


if __name__ == "sitecustomize":
    if os.environ.get("SYNTHAUDIT_FAULT_ENOSPC"):
        builtins.open = io.open = filling_open(io.open, os.environ["SYNTHAUDIT_FAULT_ENOSPC"],
                                               once=os.environ.get("SYNTHAUDIT_FAULT_ONCE"))
    if os.environ.get("SYNTHAUDIT_FAULT_HOLD"):
        os.replace = holding_replace(os.replace, os.environ["SYNTHAUDIT_FAULT_HOLD"],
                                     os.environ["SYNTHAUDIT_FAULT_HOLD_FLAG"])
