"""The tiny audit through a real one-node SLURM cluster (issue 31): a job that failed once
resubmitted (the profile's ``retries``), then the master killed mid-run and the run finished after
``--unlock``, with results identical to a local run. One SLURM run for both: each costs minutes.

Why a real cluster: the SLURM profile is what users on HPC run, and what it asks of sbatch
(partitions, GPUs, threads, memory, log folders) is only checked by a scheduler. The test needs
one: ``tests/slurm/up.sh`` (root) brings up slurm-wlm on this machine; ``make test-slurm`` does
both. Without ``sinfo`` answering it is skipped, and ``make test`` deselects it (marker).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from test_workspace import _folders
from workflow_helpers import BIN, ROOT, env, init_labelled_audit, kill_group_when

FAULTS = Path(__file__).parent / "faults"


def _node() -> dict | None:
    """The cluster's node (name, CPUs, memory in MB, partition), or None without a cluster."""
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %c %m %P %T"], capture_output=True, text=True,
                             timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    rows = [line.split() for line in out.stdout.splitlines() if line.strip()]
    up = [r for r in rows if r[4].rstrip("*~#") in ("idle", "mixed", "allocated")]
    if out.returncode != 0 or not up:
        return None
    name, cpus, mem, partition, _ = up[0]
    return {"name": name, "cpus": int(cpus), "mem_mb": int(mem), "partition": partition.rstrip("*")}


NODE = _node()
pytestmark = [pytest.mark.slurm,
              pytest.mark.skipif(NODE is None, reason="no SLURM cluster answers sinfo (tests/slurm/up.sh, as root)")]
RESULTS = ["results/relict/audit/ranking_mae.tsv", "results/relict/audit/ranking_ssim.tsv",
           "results/relict/audit/ranking_emb_cosine.tsv", "results/relict/audit/ranking_dice_binary.tsv",
           "results/relict/audit/ranking_mae_aligned.tsv", "results/relict/audit/copies.tsv",
           "results/metrics/relict.json", "results/metrics/copies.json", "results/metrics/recall.json"]


def _slurm_profile(folder: Path) -> Path:
    """The shipped SLURM profile, run where this test runs: the jobs use this environment (no
    conda here), the cluster's partition, no accounting database (squeue for the status), and
    no job asking for more CPUs or memory than the node has (it would stay pending)."""
    p = yaml.safe_load((ROOT / "workflow/profiles/slurm/config.yaml").read_text())
    p.pop("software-deployment-method")
    p.pop("conda-frontend")
    p["default-resources"]["slurm_partition"] = NODE["partition"]
    p["slurm-status-command"] = "squeue"
    p["slurm-no-account"] = True
    p["slurm-init-seconds-before-status-checks"] = 2
    p["seconds-between-status-checks"] = 2
    p["set-threads"] = {rule: min(n, NODE["cpus"]) for rule, n in p["set-threads"].items()}
    for rule, res in p["set-resources"].items():
        if "mem_mb" in res:
            res["mem_mb"] = min(res["mem_mb"], NODE["mem_mb"] // 2)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(p))
    return folder


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    """The tiny labelled audit: an init workspace (privacy filters off: minutes of training that
    prove nothing about the scheduler), run locally once as the reference."""
    tmp = tmp_path_factory.mktemp("slurm")
    folders = _folders(tmp / "in")
    template = tmp / "template"
    init = init_labelled_audit(template, folders, env())
    assert init.returncode == 0, init.stderr
    params = yaml.safe_load((template / "params.yaml").read_text())
    params["privacy"]["training_sets"] = []
    (template / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    local = shutil.copytree(template, tmp / "local")
    run = subprocess.run([str(BIN / "snakemake"), "--cores", "2", *RESULTS], cwd=local, env=env(),
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return tmp, template, local


def _slurm_command(profile: Path) -> list[str]:
    """The compared results as targets: every level's measures, the alignment, the local level, the
    calibrated copies and recall (54 jobs through sbatch, 18 light ones on this host); FRD, the figures
    and the review pages add jobs of the same kind, each a Snakemake start, and nothing for the scheduler
    to get wrong that these do not."""
    return [str(BIN / "snakemake"), "--workflow-profile", str(profile), *RESULTS]


def _assert_same_results(ws: Path, local: Path):
    for rel in RESULTS:
        assert (ws / rel).read_bytes() == (local / rel).read_bytes(), f"{rel} differs from the local run"


def _queue_empty(timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip():
        assert time.monotonic() < deadline, "SLURM jobs still queued after the master was killed"
        time.sleep(2)


def test_failed_job_resubmitted_then_master_killed_unlock_and_rerun_equals_the_local_run(audit):
    """Every job through sbatch, in one audit (one SLURM run of the tiny audit costs minutes: each job
    starts its own Snakemake):

    1. one shard's first attempt hits a full disk (fault injection, once) and the profile's
       ``retries: 1`` resubmits it;
    2. after that, once a measure has been gathered, the Snakemake process submitting the jobs is
       killed (a login node's session ends) while jobs are queued or running;
    3. after they drain, ``--unlock`` and the same command finish the audit with the local run's
       results."""
    tmp, template, local = audit
    ws = shutil.copytree(template, tmp / "slurm_run")
    profile = _slurm_profile(tmp / "profile_run")
    e = env()
    e["PYTHONPATH"] = os.pathsep.join(p for p in (str(FAULTS), e.get("PYTHONPATH")) if p)  # SLURM exports it
    e["SYNTHAUDIT_FAULT_ENOSPC"] = str(ws / "results/relict/audit/shards/mae") + "/.tmp-*.npz"
    e["SYNTHAUDIT_FAULT_ONCE"] = str(tmp / "mae_shard_failed_once")
    log = tmp / "killed_master.log"
    with open(log, "w") as out:
        master = subprocess.Popen(_slurm_command(profile), cwd=ws, env=e, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    measures = ws / "results/relict/audit/measures"

    def resubmitted_and_gathered() -> bool:  # the retry seen, some jobs done, more to come
        return ("Trying to restart job" in log.read_text(errors="replace") and measures.is_dir()
                and any(measures.glob("*.npz")))

    kill_group_when(master, resubmitted_and_gathered, 900, log, "a failed job resubmitted and a measure gathered")
    first = log.read_text(errors="replace")
    assert (tmp / "mae_shard_failed_once").exists(), "the fault was not injected: no mae shard was written"
    assert "Error in rule relict_measure" in first, first[-6000:]
    assert "disk full (ENOSPC)" in first  # the failed attempt's log, shown by the profile's show-failed-logs
    submitted = {d.name.removeprefix("rule_") for d in (ws / ".snakemake/slurm_logs").iterdir()}
    assert "relict_measure" in submitted, "no measure shard went through sbatch"
    # the light rules (localrule: tables, gathers, ratios, metrics) run on the submitting host: each
    # sbatch job costs a Snakemake start here and a queue wait on a real cluster
    assert not submitted & {"relict_ratio", "relict_gather", "relict_metrics", "recall_metrics"}, sorted(submitted)
    assert not (ws / "results/metrics/relict.json").exists(), "killed too late: the audit had finished"
    _queue_empty()
    subprocess.run(_slurm_command(profile) + ["--unlock"], cwd=ws, env=env(), check=True, capture_output=True)
    rerun = subprocess.run(_slurm_command(profile), cwd=ws, env=env(), capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, (rerun.stdout + rerun.stderr)[-6000:]
    _assert_same_results(ws, local)
