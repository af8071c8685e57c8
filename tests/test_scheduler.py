"""Snakemake's scheduler: no more threads than --cores, and no ever faster polling.

1. Snakemake must not start more threads than --cores (snakemake/snakemake#3913, fixed in 9.27).

Every all-pairs and training rule asks for ``threads: 2``; on a 2-core machine two such
jobs at once halve each other's speed and double the peak memory. Six independent
``threads: 2`` jobs under ``--cores 2`` must therefore run one at a time: each records
when it ran, and no two intervals may overlap.

2. The scheduler must wake about once per rate-limit timespan (1 s), not once per job that
has finished so far (``synthaudit.scheduler_fix``, which the workflow applies): 40 jobs
finish, then one ``threads: 2`` job runs 4 s while 40 more jobs wait for a core; the
scheduling rounds during those 4 s are counted in the master process. Without the fix
Snakemake 9.27 runs 168 of them here (one timer chain per finished job), with it 4.
"""

import subprocess
import sys
from pathlib import Path

import pytest

SNAKEFILE = """
rule all:
    input: expand("done/{i}.txt", i=range(6))

rule prepare:  # a job before them all: the case where 9.10-9.26 start two at once
    output: "common"
    threads: 2
    shell: "touch {output}"

rule job:
    input: "common"
    output: "done/{i}.txt"
    threads: 2
    # a shell job, as the workflow's rules are scripts: Snakemake 9.27 polls a run: job's
    # thread about every 10 s, which made this test take 75 s for 4 s of work
    shell:
        "date +%s.%N > {output}; sleep 0.6; date +%s.%N >> {output}"
"""


@pytest.mark.parametrize("scheduler", ["greedy", "ilp"])
def test_jobs_never_use_more_threads_than_cores(tmp_path, scheduler):
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    snakemake = Path(sys.executable).parent / "snakemake"
    run = subprocess.run([str(snakemake), "--cores", "2", "--quiet", "--scheduler", scheduler, "all"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    spans = sorted(tuple(map(float, p.read_text().split())) for p in (tmp_path / "done").glob("*.txt"))
    assert len(spans) == 6
    overlaps = [(a, b) for a, b in zip(spans, spans[1:]) if b[0] < a[1]]
    assert not overlaps, f"{len(overlaps)} pairs of threads: 2 jobs ran at once under --cores 2"


POLLING_SNAKEFILE = """
import sys, time
from synthaudit.scheduler_fix import keep_one_reevaluation_timer
FIX = keep_one_reevaluation_timer()
from snakemake.scheduling import job_scheduler
_schedule = job_scheduler.JobScheduler._schedule_reevalutation
ROUNDS = []
def counted(self, delay):
    ROUNDS.append(time.time())
    return _schedule(self, delay)
job_scheduler.JobScheduler._schedule_reevalutation = counted

rule all:
    input: "long.txt", expand("later/{{i}}.txt", i=range(40))

rule first:
    output: "first/{{i}}.txt"
    priority: 20
    shell: "touch {{output}}"

rule long:  # both cores: the 40 later jobs wait, ready, while it runs
    input: expand("first/{{i}}.txt", i=range(40))
    output: "long.txt"
    priority: 10
    threads: 2
    shell: "date +%s.%N > {{output}}; sleep 4; date +%s.%N >> {{output}}"

rule later:
    output: "later/{{i}}.txt"
    shell: "touch {{output}}"

onsuccess:
    start, end = map(float, open("long.txt").read().split())
    open("rounds.txt", "w").write(f"{{FIX}} {{sum(start <= r <= end for r in ROUNDS)}}")
"""


def test_scheduler_wakes_once_per_timespan_not_once_per_finished_job(tmp_path):
    (tmp_path / "Snakefile").write_text(POLLING_SNAKEFILE.format())
    snakemake = Path(sys.executable).parent / "snakemake"
    run = subprocess.run([str(snakemake), "--cores", "2", "--quiet"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    fix, rounds = (tmp_path / "rounds.txt").read_text().split()
    assert fix == "applied"
    # about one round per second of the 4-s job (the timespan of --max-jobs-per-timespan 100/1s):
    # 4 on an idle machine, 11 once while other jobs loaded both cores; 164-168 without the fix
    assert int(rounds) <= 20, f"{rounds} scheduling rounds during a 4-s job"
