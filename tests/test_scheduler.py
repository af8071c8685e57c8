"""Snakemake must not start more threads than --cores (snakemake/snakemake#3913, fixed in 9.27).

Every all-pairs and training rule asks for ``threads: 2``; on a 2-core machine two such
jobs at once halve each other's speed and double the peak memory. Six independent
``threads: 2`` jobs under ``--cores 2`` must therefore run one at a time: each records
when it ran, and no two intervals may overlap.
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
    run:
        import time
        start = time.time()
        time.sleep(0.6)
        with open(output[0], "w") as fh:
            fh.write(f"{start} {time.time()}")
"""


@pytest.mark.parametrize("scheduler", ["greedy", "ilp"])
def test_jobs_never_use_more_threads_than_cores(tmp_path, scheduler):
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    snakemake = Path(sys.executable).parent / "snakemake"
    run = subprocess.run([str(snakemake), "--cores", "2", "--quiet", "all"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    spans = sorted(tuple(map(float, p.read_text().split())) for p in (tmp_path / "done").glob("*.txt"))
    assert len(spans) == 6
    overlaps = [(a, b) for a, b in zip(spans, spans[1:]) if b[0] < a[1]]
    assert not overlaps, f"{len(overlaps)} pairs of threads: 2 jobs ran at once under --cores 2"
