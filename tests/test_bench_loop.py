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


def test_add_before_puts_another_clones_demo_beside_the_file(tmp_path):
    import json
    import subprocess

    from synthaudit_bench.loop import main

    clone = tmp_path / "clone"
    (clone / ".snakemake/log").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "x"], check=True)
    commit = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    log = clone / ".snakemake/log/run.snakemake.log"
    log.write_text(LOG)
    out = tmp_path / "loop.json"
    out.write_text(json.dumps({"commit": "after", "figures": {"demo_s": 1.0}}))
    assert main(["--add-before", str(log), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["figures"] == {"demo_s": 1.0} and report["commit"] == "after"  # the file's own run is kept
    before = report["before"]
    assert before["commit"] == commit and before["log_wall_s"] == 10.0 and before["jobs"] == 4
    assert before["job_seconds"] == 14 and before["seconds_with_k_jobs"] == {"1": 6.0, "2": 4.0}
    assert {r["rule"] for r in before["rules"]} == {"a", "b", "c"}


def test_the_pages_loop_table_equals_the_committed_loop_json():
    import json
    import sys

    from synthaudit_bench import loop
    from workflow_helpers import ROOT

    sys.path.insert(0, str(ROOT / "bench"))
    import doc_table

    page = (ROOT / loop.PAGE).read_text()
    table = loop.page_table(json.loads((ROOT / "results/bench/loop.json").read_text()))
    assert doc_table.page_with_table(page, loop.MARKERS, table) == page, (
        f"{loop.PAGE}'s before/after table differs from results/bench/loop.json: run `{loop.MARKERS[0][17:-4]}`")
