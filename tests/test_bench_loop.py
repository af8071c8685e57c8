"""The loop benchmark's reading of a Snakemake log (synthaudit_bench.loop)."""

from synthaudit_bench.loop import parse_snakemake_log, rule_table, summarise_profile, timeline

LOG = """Select jobs to execute...
[Tue Nov 24 04:00:00 2026]
localrule a:
    jobid: 1
    threads: 2
[Tue Nov 24 04:00:00 2026]
rule b:
    jobid: 2
[Tue Nov 24 04:00:04 2026]
Finished jobid: 1 (Rule: a)
[Tue Nov 24 04:00:04 2026]
rule b:
    jobid: 3
[Tue Nov 24 04:00:04 2026]
Finished jobid: 3 (Rule: b)
[Tue Nov 24 04:00:06 2026]
Finished job 2.
[Tue Nov 24 04:00:06 2026]
localrule c:
    jobid: 4
    threads: 2
[Tue Nov 24 04:00:10 2026]
Finished jobid: 4 (Rule: c)
"""


def test_jobs_threads_and_concurrency(tmp_path):
    log = tmp_path / "run.snakemake.log"
    log.write_text(LOG)
    jobs = {j.jobid: j for j in parse_snakemake_log(log)}
    assert {k: (j.rule, j.threads, j.seconds) for k, j in jobs.items()} == {
        1: ("a", 2, 4.0), 2: ("b", 1, 6.0), 3: ("b", 1, 0.0), 4: ("c", 2, 4.0)}
    t = timeline(list(jobs.values()))
    # a (2 threads) and b ran together: 3 threads declared at once; job 3 started after a
    # finished, in the same second (the log's order decides); c starts when b has finished
    assert t["max_declared_threads"] == 3
    assert t["seconds_with_k_jobs"] == {"1": 6.0, "2": 4.0}
    rows = {r["rule"]: r for r in rule_table(list(jobs.values()))}
    assert rows["c"]["alone_seconds"] == 4.0 and rows["b"]["alone_seconds"] == 2.0
    assert rows["a"]["alone_seconds"] == 0.0 and rows["b"]["jobs"] == 2


def test_profile_summary(tmp_path):
    raw = tmp_path / "p.txt"
    raw.write_text("main (/x/snakemake/cli.py:10);select (/x/snakemake/scheduler.py:50) 30\n"
                   "main (/x/snakemake/cli.py:10);wait (/x/snakemake/jobs.py:7) 10\n")
    s = summarise_profile(raw)
    assert s["samples"] == 40
    assert s["own"][0] == ["select (scheduler.py:50)", 30]
    assert s["inclusive"][0] == ["main (cli.py:10)", 40]


def test_machine_speed_is_recorded_or_explained(monkeypatch):
    from synthaudit_bench import floor, loop

    monkeypatch.setattr(floor, "machine_rates", lambda threads: {"threads": threads, "gemm_gflops": 1.0,
                                                                 "copy_gb_s": 2.0})
    assert loop.machine_speed(2) == {"threads": 2, "gemm_gflops": 1.0, "copy_gb_s": 2.0}

    def broken(threads):
        raise RuntimeError("no torch here")

    monkeypatch.setattr(floor, "machine_rates", broken)
    assert loop.machine_speed(2) == {"error": "RuntimeError: no torch here"}
