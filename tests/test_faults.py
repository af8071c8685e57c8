"""Faults during the all-pairs measures (issue 29): a disk that fills up while a measure's
matrix is written, and a crash of the whole run while the shards are gathered.

Why: at the paper's scale a measure is hours of CPU, so these faults happen, and what
matters afterwards is that the user is told what went wrong and what to do, that no partial
output passes for a result, and that running the same command again gives the values of a
run that never failed, bit for bit. The faults are injected by tests/faults/sitecustomize.py
(see there why not by a hook in the workflow, a tmpfs or LD_PRELOAD).
"""

import errno
import glob
import importlib.util
import io
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from synthaudit.io import DiskFullError, atomic_directory, atomic_path
from synthaudit.relict import matrix
from synthaudit.relict.matrix import MeasureMatrix
from test_workflow import _user_dataset
from workflow_helpers import BIN, ROOT, env, kill_group_when, snakemake, write_params

FAULTS = Path(__file__).parent / "faults"
_spec = importlib.util.spec_from_file_location("fault_injection", FAULTS / "sitecustomize.py")
injection = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(injection)  # under another name: installs nothing in this process

MEASURE = "rmse"  # the one relict.recall reads: the smallest valid choice of relict.measures
GATHERED = f"results/relict/mydata/measures/{MEASURE}.npz"
RANKING = f"results/relict/mydata/ranking_{MEASURE}.tsv"
SHARD = f"results/relict/mydata/shards/{MEASURE}/s0-t0.npz"


# -- the library: every atomic writer says "disk full" and names its output ------------------


@pytest.mark.parametrize("code, what", [(errno.ENOSPC, "disk full (ENOSPC)"),
                                        (errno.EDQUOT, "disk quota exceeded (EDQUOT)")])
@pytest.mark.parametrize("at", ["write", "rename"])
def test_atomic_path_on_a_full_disk_names_the_output_and_keeps_the_old_one(tmp_path, monkeypatch, code, what, at):
    """A bare ``[Errno 28] No space left on device`` names no file (or a temporary one) and no
    remedy; the writer's error must name the output and what to do, remove its partly written
    temporary file, and leave an earlier complete output untouched."""
    target = tmp_path / "out" / "table.tsv"
    target.parent.mkdir()
    target.write_text("earlier result\n")
    full = OSError(code, os.strerror(code))
    if at == "rename":
        def no_room(*args):
            raise full
        monkeypatch.setattr(os, "replace", no_room)
    with pytest.raises(DiskFullError) as info:
        with atomic_path(target) as tmp:
            tmp.write_text("half a tab")
            if at == "write":
                raise full
    message = str(info.value)
    assert message.startswith(f"{what} while writing {target}: free space") and "run again" in message
    assert isinstance(info.value, OSError) and info.value.errno == code and info.value.filename == str(target)
    assert info.value.__cause__ is full
    assert os.listdir(target.parent) == ["table.tsv"] and target.read_text() == "earlier result\n"


def test_full_disk_found_behind_another_error_and_other_errors_pass_unchanged(tmp_path):
    """Writers raise something else while cleaning up after a full disk (zipfile's close
    writes again); the cause is still the disk. Any other error is the writer's business and
    passes as it was raised. Folders written atomically behave as files."""
    with pytest.raises(DiskFullError, match=r"^disk full \(ENOSPC\) while writing .*labels: free space"):
        with atomic_directory(tmp_path / "labels") as tmp:
            (tmp / "a.nii.gz").write_bytes(b"\0")
            try:
                raise OSError(errno.ENOSPC, "No space left on device")
            except OSError:
                raise ValueError("I/O operation on closed file")
    denied = PermissionError(errno.EACCES, "Permission denied")
    with pytest.raises(PermissionError) as info:
        with atomic_path(tmp_path / "x.json"):
            raise denied
    assert info.value is denied and not isinstance(info.value, DiskFullError)
    assert os.listdir(tmp_path) == []


def test_matrix_save_on_a_full_disk_leaves_nothing_and_a_retry_equals_a_clean_save(tmp_path, monkeypatch):
    """The real writer (np.savez through zipfile) on a disk that fills up mid-file: the
    error names the matrix, nothing is left in its folder, and once there is space the same
    save gives the matrix a save that never failed gives."""
    rng = np.random.default_rng(0)
    m = MeasureMatrix(rng.random((3, 4)), "mae", ["s1", "s2", "s3"], ["t1", "t2", "t3", "t4"], 1.5,
                      extras={"data_range": 2.0})
    clean = tmp_path / "clean" / "mae.npz"
    m.save(clean)
    path = tmp_path / "run" / "mae.npz"
    full_disk = injection.filling_open(io.open, glob.escape(str(path.parent)) + "/.tmp-mae-*.npz")
    monkeypatch.setattr(io, "open", full_disk)
    monkeypatch.setattr("builtins.open", full_disk)
    with pytest.raises(DiskFullError, match=rf"^disk full \(ENOSPC\) while writing {re.escape(str(path))}: free"):
        m.save(path)
    monkeypatch.undo()
    assert os.listdir(path.parent) == []
    m.save(path)
    _assert_same_matrix(matrix.load(path), matrix.load(clean))


def test_matrix_save_on_a_really_full_tmpfs(tmp_path):
    """The same on a real file system that is full (the kernel's ENOSPC, which buffered
    writers may only meet at flush or close): needs root to mount a 64 KiB tmpfs, so it runs
    where that is allowed and is skipped elsewhere (CI); the injected fault above runs everywhere."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        rng = np.random.default_rng(0)
        m = MeasureMatrix(rng.random((50, 60)), "mae", [f"s{i}" for i in range(50)], [f"t{i}" for i in range(60)], 1.0)
        clean = tmp_path / "clean.npz"
        m.save(clean)
        (disk / "filler").write_bytes(bytes(40_000))  # 24 KiB left; the matrix takes 50 KB
        path = disk / "measures" / "mae.npz"
        with pytest.raises(DiskFullError, match=rf"^disk full \(ENOSPC\) while writing {re.escape(str(path))}: free"):
            m.save(path)
        assert os.listdir(path.parent) == []
        (disk / "filler").unlink()
        m.save(path)
        _assert_same_matrix(matrix.load(path), matrix.load(clean))
    finally:
        subprocess.run(["umount", str(disk)], check=True)


# -- the workflow: a full disk in a measure job, a crash in the gather -----------------------


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A tiny user dataset (tests/test_workflow.py), one measure in two training shards, run to
    its ranking without a fault: what every faulty run must end with."""
    base = tmp_path_factory.mktemp("faults")
    wd, _ = _user_dataset(base, "manifest")
    p = yaml.safe_load((wd / "params.yaml").read_text())
    p["relict"]["measures"] = [MEASURE]
    p["compute"].update(training_shards=2, synthetic_shards=1)
    write_params(wd, p)
    snakemake(wd, RANKING)
    return wd, matrix.load(wd / GATHERED), (wd / RANKING).read_bytes()


def _copy_without_measure(reference, tmp_path) -> Path:
    """The reference run, copied, with the gathered matrix and the ranking gone: the next run
    recomputes the measure's shards (temporary outputs, deleted after the gather), gathers and
    ranks again, from the same preprocessed volumes."""
    wd = shutil.copytree(reference[0], tmp_path / "run", symlinks=True)
    (wd / GATHERED).unlink()
    (wd / RANKING).unlink()
    return wd


def _fault_env(**faults) -> dict:
    e = env()
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(FAULTS), e.get("PYTHONPATH")) if p)
    return {**e, **faults}


def _assert_same_matrix(got: MeasureMatrix, want: MeasureMatrix):
    assert got.values.dtype == want.values.dtype and got.values.tobytes() == want.values.tobytes()
    assert got.distances.tobytes() == want.distances.tobytes()
    assert (got.measure, got.synthetic_ids, got.training_ids) == (want.measure, want.synthetic_ids, want.training_ids)
    assert {k: v.tolist() for k, v in got.extras.items()} == {k: np.asarray(v).tolist() for k, v in want.extras.items()}


def _assert_as_reference(wd, reference):
    _assert_same_matrix(matrix.load(wd / GATHERED), reference[1])
    assert (wd / RANKING).read_bytes() == reference[2]
    assert not list((wd / "results").rglob(".tmp-*"))  # no temporary file of any writer left
    assert not (wd / "results/relict/mydata/shards").exists()  # the shards are temporary
    assert "Nothing to be done" in _output(snakemake(wd, RANKING, extra=["-n"]))  # nothing incomplete left


def _output(proc) -> str:
    return proc.stdout + proc.stderr


# a tiny audit, then a rerun (80 s): make test-e2e (CI runs both)
@pytest.mark.e2e
@pytest.mark.workflow
def test_disk_full_while_a_shard_is_written_then_a_rerun_completes(reference, tmp_path):
    """ENOSPC while a relict_measure job writes its shard: the job's log and the terminal
    name the shard and say "disk full"; neither the shard nor a temporary file is left; run
    again (space available), the run completes with the values of a run that never failed."""
    wd = _copy_without_measure(reference, tmp_path)
    tmp_of_shard = glob.escape(str(wd / Path(SHARD).parent)) + f"/.tmp-{Path(SHARD).stem}-*.npz"
    proc = subprocess.run(_command(wd, RANKING), cwd=wd, env=_fault_env(SYNTHAUDIT_FAULT_ENOSPC=tmp_of_shard),
                          capture_output=True, text=True)
    assert proc.returncode != 0
    message = f"disk full (ENOSPC) while writing {SHARD}: free space on the disk"
    assert message in (wd / f"logs/relict_measure/mydata/{MEASURE}/s0-t0.log").read_text()
    assert message in _output(proc)
    assert not (wd / SHARD).exists() and not (wd / GATHERED).exists()
    assert not list((wd / "results").rglob(".tmp-*"))
    snakemake(wd, RANKING)
    _assert_as_reference(wd, reference)


@pytest.mark.workflow
@pytest.mark.e2e
def test_crash_during_gather_then_unlock_and_rerun_equals_an_uninterrupted_run(reference, tmp_path):
    """SIGKILL to Snakemake, the gather job and its script at once (a node crash, the OOM
    killer, a closed session) right after the gathered matrix landed but before Snakemake
    recorded the job done: the matrix looks complete, yet must stay marked incomplete; the
    lock stays; after ``--unlock`` the same command redoes the gather (the profile's
    rerun-incomplete) and ends with the uninterrupted run's matrix and ranking."""
    wd = _copy_without_measure(reference, tmp_path)
    flag = tmp_path / "held"
    faults = _fault_env(SYNTHAUDIT_FAULT_HOLD=glob.escape(str(wd / GATHERED)), SYNTHAUDIT_FAULT_HOLD_FLAG=str(flag))
    log = tmp_path / "killed_run.log"
    with open(log, "w") as out:
        run = subprocess.Popen(_command(wd, RANKING), cwd=wd, env=faults, stdout=out, stderr=subprocess.STDOUT,
                               start_new_session=True)  # its own process group, which the kill takes whole
    kill_group_when(run, flag.exists, 120, log, "the gather was held", poll_s=0.05)
    _wait_until_dead(int(flag.read_text()))

    assert matrix.load(wd / GATHERED).shape == (4, 6)  # landed whole: it would pass for a result
    locked = snakemake(wd, RANKING, check=False)  # not -n: a dry run takes no lock
    assert locked.returncode != 0 and "Directory cannot be locked" in _output(locked)
    snakemake(wd, RANKING, extra=["--unlock"])
    # Snakemake's record: without the profile's rerun-incomplete it refuses to trust the file
    bare = subprocess.run(_command(wd, "-n", RANKING, profile=False), cwd=wd, env=env(), capture_output=True,
                          text=True)
    assert bare.returncode != 0 and "seem to be incomplete" in _output(bare) and GATHERED in _output(bare)
    planned = _output(snakemake(wd, RANKING, extra=["-n"]))  # with it: the gather alone is redone
    assert re.search(r"^relict_gather\s+1$", planned, re.M) and "relict_measure" not in planned
    assert "rule relict_gather:" in _output(snakemake(wd, RANKING))
    _assert_as_reference(wd, reference)


def _command(wd, *args, profile: bool = True) -> list[str]:
    """The command of workflow_helpers.snakemake, which waits for the end and sets its own environment."""
    profile_args = ["--workflow-profile", str(ROOT / "workflow" / "profiles" / "default")] if profile else []
    return [str(BIN / "snakemake"), "-s", str(ROOT / "Snakefile"), "-d", str(wd), *profile_args, "--cores", "2",
            "--max-threads", "1", *args]


def _wait_until_dead(pid: int, timeout_s: float = 10.0):
    """Until ``pid`` is gone or a zombie: a killed writer must not write after the test looks."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return
        if state in ("Z", "X"):  # killed; its parent (Snakemake) is dead too, so no one reaps it at once
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} still runs {timeout_s} s after SIGKILL")


def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(tmp_path):
    # SIGKILL runs no cleanup: the temporary file stays beside the output until it is written again
    target = tmp_path / "ranking.tsv"
    stale = tmp_path / ".tmp-ranking-ab12cd_9.tsv"
    stale.write_text("half")
    other = tmp_path / ".tmp-ranking-x-ab12cd_9.tsv"  # another output's (ranking-x) live temporary file
    other.write_text("another job")
    with atomic_path(target) as tmp:
        tmp.write_text("done")
    assert target.read_text() == "done"
    assert not stale.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp-ranking-x-ab12cd_9.tsv", "ranking.tsv"]
