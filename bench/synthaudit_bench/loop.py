"""The loop benchmark: a fresh clone's ``make demo`` and ``make test``, timed (``make bench-loop``).

Why a benchmark of its own: the developer's loop (clone, set up, run the demo, run the
tests) is what a new user and CI pay, and it is lost in pieces: pip, Snakemake's own
process, job start-up, the jobs. This command measures them on this machine and writes
one file with the targets and whether each is met:

* environment creation (``make install`` in a fresh clone; pip's wheel cache as it is);
* ``make demo`` wall time, environment included (target: 10 minutes);
* ``make test`` wall time, environment included (target: 12 minutes);
* the Snakemake master process's CPU, as a share of one core over the demo (target:
  below 5 %), optionally profiled with py-spy (``--profile-master``: where it goes);
* concurrency: the threads the scheduler declared running at once, from the run's
  Snakemake log (at most ``--cores``), and the runnable threads of the job processes
  sampled from ``/proc`` (what the jobs really ran: a job starting more threads than it
  declared shows here);
* where the demo's time goes: per rule, jobs, job-seconds and seconds while it was the
  only job running, from the Snakemake log.

    python -m synthaudit_bench.loop --out results/bench/loop.json [--profile-master]

The clone is of the committed HEAD (uncommitted changes are not measured; the file says
which commit). Run it on an otherwise idle machine: the file records the load average and the
machine's GEMM and copy rates before and after (a shared host's speed varies).
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from synthaudit.io import write_json
from synthaudit.numerics import cpu_model

TARGETS = {
    "demo_wall_s": 600.0,          # fresh clone: make install + make demo, at most 10 minutes
    "test_wall_s": 720.0,          # fresh clone: make install + make test, at most 12 minutes
    "master_cpu_share": 0.05,      # Snakemake's own process: below 5 % of one core over the demo
}
POLL_S = 0.5                       # sampling period of the process monitor
WORKDIR = "/tmp/synthaudit-loop"   # where the fresh clone of this checkout's HEAD goes (replaced)


@dataclass
class Job:
    """One job of a Snakemake run, as its log reports it (timestamps to the second; the
    positions of its start and finish lines in the log order events within a second)."""

    jobid: int
    rule: str
    threads: int
    start: dt.datetime
    end: dt.datetime | None = None
    start_line: int = 0
    end_line: int = 0

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds() if self.end else 0.0


_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ [\d:]+ \d{4})\]")
_RULE = re.compile(r"^(?:local)?(?:check)?rule (\S+):")
_JOBID = re.compile(r"^\s+jobid: (\d+)")
_THREADS = re.compile(r"^\s+threads: (\d+)")
_DONE = re.compile(r"^Finished job(?:id:)? (\d+)")


def parse_snakemake_log(path: str | Path) -> list[Job]:
    """The jobs of one Snakemake log with rule, declared threads, start and end."""
    jobs: dict[int, Job] = {}
    stamp = rule = current = None
    for number, line in enumerate(Path(path).read_text().splitlines()):
        if m := _STAMP.match(line):
            stamp = dt.datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y")
        elif m := _RULE.match(line):
            rule, current = m.group(1), None
        elif (m := _JOBID.match(line)) and rule is not None:
            current = jobs[int(m.group(1))] = Job(int(m.group(1)), rule, 1, stamp, start_line=number)
            rule = None
        elif (m := _THREADS.match(line)) and current is not None:
            current.threads = int(m.group(1))
        elif m := _DONE.match(line):
            if (job := jobs.get(int(m.group(1)))) is not None:
                job.end, job.end_line = stamp, number
    return [j for j in jobs.values() if j.end is not None]


def timeline(jobs: list[Job]) -> dict:
    """Declared concurrency over the run: the most threads at once, seconds at each count of jobs.

    Events are taken in the log's order (the scheduler writes a job's start before it
    runs and its finish after), so jobs that start and end within one second of the
    log's timestamps are not counted as running together.
    """
    events = sorted([(j.start_line, j.start, 1, j.threads) for j in jobs]
                    + [(j.end_line, j.end, -1, -j.threads) for j in jobs])
    running = threads = peak = 0
    by_jobs: collections.Counter = collections.Counter()
    previous = events[0][1] if events else None
    for _, when, step, dthreads in events:
        by_jobs[running] += max(0.0, (when - previous).total_seconds())
        previous = max(previous, when)
        running += step
        threads += dthreads
        peak = max(peak, threads)
    return {"max_declared_threads": peak,
            "seconds_with_k_jobs": {str(k): v for k, v in sorted(by_jobs.items()) if v}}


def rule_table(jobs: list[Job]) -> list[dict]:
    """Per rule: jobs, job-seconds, and the seconds during which it ran alone (the serial part)."""
    alone: collections.Counter = collections.Counter()
    edges = sorted({j.start for j in jobs} | {j.end for j in jobs})
    for a, b in zip(edges, edges[1:]):
        live = [j for j in jobs if j.start <= a and j.end >= b]
        if len(live) == 1:
            alone[live[0].rule] += (b - a).total_seconds()
    rows = collections.defaultdict(lambda: {"jobs": 0, "job_seconds": 0.0, "threads": 1})
    for j in jobs:
        row = rows[j.rule]
        row["jobs"] += 1
        row["job_seconds"] += j.seconds
        row["threads"] = max(row["threads"], j.threads)
    out = [{"rule": r, **v, "alone_seconds": alone[r]} for r, v in rows.items()]
    return sorted(out, key=lambda r: -r["job_seconds"] * r["threads"])


class Monitor(threading.Thread):
    """Samples a process tree: the Snakemake master's CPU and the jobs' runnable threads."""

    def __init__(self, root_pid: int, profile_to: Path | None = None):
        super().__init__(daemon=True)
        self.root_pid, self.profile_to = root_pid, profile_to
        self.stop = threading.Event()
        self.masters: dict[int, float] = {}      # pid -> last seen CPU seconds (user + system)
        self.runnable: list[int] = []            # runnable job threads per sample
        self.spy: subprocess.Popen | None = None

    def run(self) -> None:
        import psutil

        root = psutil.Process(self.root_pid)
        while not self.stop.is_set():
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.Error:
                break
            masters = {p.pid for p in tree if _is_master(p)}  # _is_master never raises
            runnable = 0
            for p in tree:
                try:
                    if p.pid in masters:
                        times = p.cpu_times()
                        self.masters[p.pid] = times.user + times.system
                        self._profile(p.pid)
                    elif not _is_tool(p):
                        runnable += _runnable_threads(p.pid)
                except psutil.Error:
                    continue
            self.runnable.append(runnable)
            time.sleep(POLL_S)

    def _profile(self, pid: int) -> None:
        """py-spy on the first master (the run; the second one writes the report)."""
        if self.profile_to is None or self.spy is not None:
            return
        spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        self.spy = subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", "20", "--format", "raw",
                                     "--nonblocking", "--output", str(self.profile_to)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _is_master(p) -> bool:
    import psutil

    try:
        cmd = p.cmdline()
    except psutil.Error:
        return False
    return len(cmd) >= 2 and Path(cmd[1]).name == "snakemake" and "--report" not in cmd


def _is_tool(p) -> bool:
    return p.name() in {"py-spy", "make"}


def _runnable_threads(pid: int) -> int:
    """Threads of a process in state R (running or ready to run)."""
    count = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:  # the process has just exited: a crash here would end the sampling
        return 0
    for task in tasks:
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        if stat[stat.rfind(")") + 2] == "R":
            count += 1
    return count


def summarise_profile(path: Path, top: int = 15) -> dict:
    """Top functions of a py-spy raw (collapsed-stack) file: by own and by inclusive samples."""
    own: collections.Counter = collections.Counter()
    inclusive: collections.Counter = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [re.sub(r" \(.*?/([^/]+:\d+)\)$", r" (\1)", f) for f in stack.split(";")]
        n = int(count)
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            inclusive[f] += n
    return {"samples": total,
            "own": [[f, n] for f, n in own.most_common(top)],
            "inclusive": [[f, n] for f, n in inclusive.most_common(top)]}


def _timed(cmd: list[str], cwd: Path, log: Path, monitor: Monitor | None = None) -> tuple[float, int]:
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        if monitor is not None:
            monitor.root_pid = proc.pid
            monitor.start()
        rc = proc.wait()
    if monitor is not None:
        monitor.stop.set()
        monitor.join()
        if monitor.spy is not None:  # py-spy writes its file when its target has exited
            try:
                monitor.spy.wait(timeout=60)
            except subprocess.TimeoutExpired:
                monitor.spy.send_signal(signal.SIGINT)
                monitor.spy.wait()
    return time.perf_counter() - start, rc


def log_figures(log: Path) -> dict:
    """What a finished demo's Snakemake log says: its wall time (first start to last finish), jobs,
    job-seconds, concurrency and the rule table, as the loop records its own demo."""
    jobs = parse_snakemake_log(log)
    if not jobs:
        raise ValueError(f"{log}: no finished job in this Snakemake log")
    wall = (max(j.end for j in jobs) - min(j.start for j in jobs)).total_seconds()
    return {"log": str(log), "log_wall_s": wall, "jobs": len(jobs), "job_seconds": round(sum(j.seconds for j in jobs)),
            **timeline(jobs), "rules": rule_table(jobs)}


def add_before(log: Path, out: Path) -> int:
    """``--add-before``: the other clone's demo beside this file's, with that clone's commit."""
    import json

    report = json.loads(out.read_text())
    clone = log.resolve().parents[2]  # <clone>/.snakemake/log/<file>
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout.strip()
    report["before"] = {"commit": commit, "clone": str(clone), **log_figures(log)}
    write_json(out, report)
    print(f"{out}: before = {commit[:10]}, {report['before']['log_wall_s']:.0f} s of log, "
          f"{report['before']['jobs']} jobs")
    return 0


PAGE = "docs/benchmarks_loop.md"
MARKERS = ("<!-- loop_table: PYTHONPATH=bench .venv/bin/python -m synthaudit_bench.loop --doc --write -->",
           "<!-- /loop_table -->")
# the rules whose work issue 62's demo changes moved (the matched null's embeddings, the texture check's held-out
# side, FRD's features on one thread), and the demo's largest
PAGE_RULES = (("embed", "encoder (embed)"), ("radiomics", "FRD whole-volume features (radiomics)"),
              ("radiomics_classes", "FRD within label classes"),
              ("relict_texture", "texture check (relict_texture)"),
              ("relict_heldout_texture", "its held-out side, once per training set (relict_heldout_texture)"),
              ("preprocess_scan_labelled", "registration (preprocess_scan_labelled)"),
              ("privacy_train", "privacy filters' training"))


def page_table(report: dict) -> str:
    """docs/benchmarks_loop.md's before/after table of the demo (``--add-before``'s run against this file's)."""
    before, after = report["before"], report["figures"]

    def span(f: dict) -> float:  # first job's start to last job's end, from the log
        return sum(f["seconds_with_k_jobs"].values())

    def rule(f: dict, name: str) -> str:
        row = next((r for r in f["rules"] if r["rule"] == name), None)
        if row is None:
            return "-"
        return f"{row['job_seconds']:,.0f} ({row['jobs']} jobs, {row['threads']} thread{'s' * (row['threads'] > 1)})"

    rows = [("jobs", f"{before['jobs']}", f"{after['jobs']}"),
            ("first job's start to last job's end (s)", f"{span(before):,.0f}", f"{span(after):,.0f}"),
            ("seconds with one job running", f"{before['seconds_with_k_jobs'].get('1', 0):,.0f}",
             f"{after['seconds_with_k_jobs'].get('1', 0):,.0f}"),
            ("job-seconds, every job", f"{before['job_seconds']:,}", f"{after['job_seconds']:,}"),
            *((f"job-seconds: {label}", rule(before, name), rule(after, name)) for name, label in PAGE_RULES),
            ("`make demo` (s)", "-", f"{after['demo_s']:,.0f}"),
            ("`make test` (s)", "-", f"{after['test_s']:,.0f} ({after['test_summary']})" if "test_s" in after else "-")]
    head = (f"| figure | before ({before['commit'][:7]}) | after ({report['commit'][:7]}) |\n"
            "|---|---|---|\n")
    return head + "\n".join(f"| {a} | {b} | {c} |" for a, b, c in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m synthaudit_bench.loop", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results/bench/loop.json", help="the figures (default: %(default)s)")
    parser.add_argument("--profile-master", action="store_true",
                        help="py-spy the Snakemake master during the demo (raw stacks beside --out)")
    parser.add_argument("--add-before", metavar="LOG",
                        help="run nothing: add the demo of another clone (its Snakemake LOG, its commit from that "
                             "clone) to --out as 'before', for a before/after of one change on one host")
    parser.add_argument("--doc", action="store_true", help=f"run nothing: check {PAGE}'s before/after table against "
                                                          "results/bench/loop.json (--write: write it)")
    parser.add_argument("--write", action="store_true", help="with --doc: write the table")
    args = parser.parse_args(argv)
    if args.add_before:
        return add_before(Path(args.add_before), Path(args.out))
    if args.doc:
        import doc_table  # bench/doc_table.py, beside this package

        return doc_table.doc(PAGE, "results/bench/loop.json", MARKERS, page_table, args.write, MARKERS[0][17:-4])

    repo, out = Path(".").resolve(), Path(args.out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)  # the logs go beside the figures from the start
    work = Path(WORKDIR)
    clone = work / repo.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(repo), str(clone)], check=True)
    if (repo.parent / "shared").is_dir():  # CI's layout: ../shared beside the checkout
        (work / "shared").symlink_to(repo.parent / "shared")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                           capture_output=True, text=True).stdout.strip()
    cores = os.cpu_count()
    report: dict = {"when": dt.datetime.now().isoformat(timespec="seconds"), "commit": commit,
                    "uncommitted_changes_not_measured": bool(dirty), "clone": str(clone),
                    "machine": {"cpu": cpu_model(), "cores": cores, "python": platform.python_version(),
                                "load_average_before": os.getloadavg(), "rates_before": machine_speed(cores)},
                    "targets": dict(TARGETS, max_threads=cores), "figures": {}, "met": {}}
    figures, met = report["figures"], report["met"]

    def say(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)

    say(f"fresh clone of {commit[:10]} in {clone}; make install")
    install_s, rc = _timed(["make", "install"], clone, out.with_name("loop_install.log"))
    figures["install_s"] = round(install_s, 1)
    if rc:
        figures["install_error"] = f"make install exited {rc}"
        write_json(out, report)
        return 1
    say(f"make install {install_s:.0f} s; make demo")
    spy_file = out.with_name("loop_master_pyspy.txt") if args.profile_master else None
    monitor = Monitor(0, spy_file)
    demo_s, rc = _timed(["make", "demo"], clone, out.with_name("loop_demo.log"), monitor)
    logs = sorted((clone / ".snakemake" / "log").glob("*.snakemake.log"), key=lambda p: p.stat().st_size)
    jobs = parse_snakemake_log(logs[-1]) if logs else []
    master_cpu = max(monitor.masters.values(), default=0.0)
    figures.update({
        "demo_s": round(demo_s, 1), "demo_exit": rc, "demo_with_install_s": round(demo_s + install_s, 1),
        "jobs": len(jobs), "job_seconds": round(sum(j.seconds for j in jobs)),
        "master_cpu_s": round(master_cpu, 1), "master_cpu_share": round(master_cpu / demo_s, 4),
        **timeline(jobs),
        "runnable_job_threads": _quantiles(monitor.runnable, cores),
        "rules": rule_table(jobs)})
    if spy_file is not None and spy_file.exists():
        figures["master_profile"] = summarise_profile(spy_file)
    met["demo_wall_s"] = rc == 0 and figures["demo_with_install_s"] <= TARGETS["demo_wall_s"]
    met["master_cpu_share"] = figures["master_cpu_share"] < TARGETS["master_cpu_share"]
    met["max_threads"] = figures["max_declared_threads"] <= cores
    failed = rc != 0
    say(f"make demo {demo_s:.0f} s (exit {rc}); master {master_cpu:.0f} CPU-s")
    write_json(out, report)
    say("make test")
    test_s, rc = _timed(["make", "test"], clone, out.with_name("loop_test.log"))
    summary = [line.strip("= ") for line in out.with_name("loop_test.log").read_text().splitlines()
               if re.search(r"\d+ (passed|failed)", line)]
    figures.update({"test_s": round(test_s, 1), "test_exit": rc, "test_with_install_s": round(test_s + install_s, 1),
                    "test_summary": summary[-1] if summary else ""})
    met["test_wall_s"] = rc == 0 and figures["test_with_install_s"] <= TARGETS["test_wall_s"]
    failed |= rc != 0
    say(f"make test {test_s:.0f} s (exit {rc}): {figures['test_summary']}")
    report["machine"]["load_average_after"] = os.getloadavg()
    report["machine"]["rates_after"] = machine_speed(cores)
    write_json(out, report)
    say(f"written: {out}")
    for key, ok in met.items():
        print(f"  {key:18s} {'met' if ok else 'MISSED'}")
    return 1 if failed else 0


def machine_speed(cores: int | None) -> dict:
    """GEMM and copy rates (``bench.floor.machine_rates``) at the start and end of a run.

    Why: on a shared host the same commit's demo and tests took 17 % longer one afternoon
    than the same morning, while this machine's GEMM rate had fallen from 183 to 124-129
    GFLOP/s and its copy bandwidth from 31 to 21 GB/s: a loop figure means little without
    the speed of the machine it was taken on.
    """
    try:
        from .floor import machine_rates

        return machine_rates(cores or 1)
    except Exception as error:  # noqa: BLE001 - a figure for the record; never fail the bench
        return {"error": f"{type(error).__name__}: {error}"}


def _quantiles(samples: list[int], cores: int | None) -> dict:
    if not samples:
        return {}
    s = sorted(samples)
    return {"samples": len(s), "mean": round(sum(s) / len(s), 2), "p95": s[int(0.95 * (len(s) - 1))],
            "max": s[-1], "share_above_cores": round(sum(v > (cores or 1) for v in s) / len(s), 4)}


if __name__ == "__main__":
    sys.exit(main())
