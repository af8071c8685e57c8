"""Is the committed baseline what this commit's demo produces? (run after `make demo`; .ci/run)

Why: `dvc metrics diff` against a stale baseline shows every reviewer differences their change
did not cause. With portable numerics (synthaudit.numerics, the default) the demo gives the
same bits on every x86-64 CPU with AVX2, so numbers are compared exactly (``--rtol`` loosens
that for a native run) and every difference is named (file, key or row and column, both
values). Also checked: no other tracked file changed, no metrics file is missing from Git, the
committed dvc.lock was written for this commit's code and params, every DVC output is the
bytes dvc.lock records (`dvc status`; times and the report are outside the hashed outputs), and
no demo job would rerun for its params, code or environment (Snakemake's dry run: outputs left
by a run with `--rerun-triggers mtime` after a params change once passed here and failed CI's
clean run).

Usage: python .ci/check_baseline.py [--rtol 0] [--ref HEAD] [--targets all feature_study_all]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMPARED = ("results/metrics/", "results/plots/")  # compared by value; everything else tracked: byte for byte
# what make baseline and make demo-check-all run (Makefile: DEMO_PROFILE, demo and feature_study_all);
# CI's make demo-check runs the demo only (--targets all)
DEMO_RUN = ("--workflow-profile", "workflow/profiles/demo")
DEMO_TARGETS = ("all", "feature_study_all")
STALE_TRIGGERS = ("params", "code", "software-env")  # not mtime: a fresh checkout's times say nothing


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def _number(x):
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (int, float)):
        return float(x)
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def differs(a, b, rtol: float, atol: float = 1e-12) -> bool:
    na, nb = _number(a), _number(b)
    if na is None or nb is None:
        return a != b
    if math.isnan(na) or math.isnan(nb):
        return not (math.isnan(na) and math.isnan(nb))
    return abs(na - nb) > atol + rtol * max(abs(na), abs(nb))


def flatten(obj, prefix: str = "") -> dict:
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(obj, list):
        out = {}
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: obj}


def compare_json(path: str, old: str, new: str, rtol: float) -> list[str]:
    a, b = flatten(json.loads(old)), flatten(json.loads(new))
    problems = [f"{path}: {k} is in the committed file only" for k in sorted(set(a) - set(b))]
    problems += [f"{path}: {k} is new (not in the committed file)" for k in sorted(set(b) - set(a))]
    problems += [f"{path}: {k} committed {a[k]!r}, demo {b[k]!r}" for k in sorted(set(a) & set(b))
                 if differs(a[k], b[k], rtol)]
    return problems


def compare_tsv(path: str, old: str, new: str, rtol: float) -> list[str]:
    a = list(csv.DictReader(io.StringIO(old), delimiter="\t"))
    b = list(csv.DictReader(io.StringIO(new), delimiter="\t"))
    if len(a) != len(b) or (a and list(a[0]) != list(b[0])):
        return [f"{path}: {len(a)} committed rows vs {len(b)} from the demo (or other columns)"]
    return [f"{path}: row {i + 2} {col} committed {ra[col]!r}, demo {rb[col]!r}"
            for i, (ra, rb) in enumerate(zip(a, b)) for col in ra if differs(ra[col], rb.get(col), rtol)]


def compare_tracked(ref: str, rtol: float) -> list[str]:
    problems = []
    changed = [line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines()]
    for path in changed:
        if not path.startswith(COMPARED):
            problems.append(f"{path}: a tracked file the demo changed (commit what `make demo` writes)")
            continue
        if not (ROOT / path).is_file():
            problems.append(f"{path}: committed, but the demo no longer writes it")
            continue
        old, new = git("show", f"{ref}:{path}"), (ROOT / path).read_text()
        compare = compare_json if path.endswith(".json") else compare_tsv
        problems += compare(path, old, new, rtol)
    untracked = git("ls-files", "--others", "--exclude-standard", "--", *COMPARED).split()
    problems += [f"{p}: written by the demo but not committed" for p in untracked]
    return problems


def compare_lock() -> list[str]:
    """dvc.lock's code and params against this commit (outputs of a stage are other stages' deps:
    those are outputs, not code, and are not compared)."""
    if not (ROOT / "dvc.lock").is_file() or not git("ls-files", "dvc.lock").strip():
        return ["dvc.lock: not committed (make baseline, then commit it)"]
    proc = subprocess.run([sys.executable, "-m", "dvc", "status", "--json"], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        return [f"dvc.lock: `dvc status` failed: {(proc.stderr or proc.stdout).strip()[-500:]}"]
    status = json.loads(proc.stdout or "{}")
    problems = []
    for stage, changes in status.items():
        for change in changes:
            if isinstance(change, str):  # "changed command", "always changed"
                problems.append(f"dvc.lock: stage {stage}: {change}")
                continue
            for kind in ("changed deps", "changed params"):
                for dep, how in (change.get(kind) or {}).items():
                    if isinstance(how, dict):  # params: file -> {key: how}
                        problems += [f"dvc.lock: stage {stage}: {dep} {key} {h}" for key, h in how.items()]
                    elif not dep.startswith("results/"):
                        problems.append(f"dvc.lock: stage {stage}: {dep} {how}")
            # every output the same bytes as the committed lock records (portable numerics; times are in
            # .dvcignore): a changed output is a result that moved, or something that is not deterministic
            for out, how in (change.get("changed outs") or {}).items():
                problems.append(f"dvc.lock: stage {stage}: output {out} {how} (not the bytes the baseline recorded)")
    return problems


def stale_reasons(dry_run: str) -> list[str]:
    """The jobs a dry run (``--quiet rules``) would run, by reason, from Snakemake's text; empty
    where it has nothing to do."""
    if "Nothing to be done" in dry_run:
        return []
    lines, out = dry_run.splitlines(), []
    for i, line in enumerate(lines):
        text = line.strip()
        if text.endswith(":") and i + 1 < len(lines) and text[:-1] not in ("Reasons", "Job stats"):
            rules = lines[i + 1].strip()
            if rules and not rules.endswith(":") and "(" not in text:
                out.append(f"{text[:-1]}: {rules}")
    return out or ["the dry run would run jobs (reasons not parsed): " + dry_run.strip()[-300:]]


def stale_outputs(targets=DEMO_TARGETS) -> list[str]:
    """Outputs that a rerun with Snakemake's default triggers would replace: the baseline is only
    what this commit produces if no job is due for its params, code or software environment.
    ``targets``: the rules that were run here (a target not run would be due for its missing outputs)."""
    cmd = [sys.executable, "-m", "snakemake", *DEMO_RUN, "--dry-run", "--rerun-triggers", *STALE_TRIGGERS,
           "--quiet", "rules", "--", *targets]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        return [f"snakemake's dry run failed: {text.strip()[-500:]}"]
    return [f"stale demo outputs, {r} (rerun: snakemake {' '.join(DEMO_RUN)} with its default triggers, then make lock)"
            for r in stale_reasons(text)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rtol", type=float, default=0.0,
                    help="relative tolerance per number (default %(default)s: portable numerics give the same bits on "
                         "every x86-64 CPU with AVX2; docs/reproducibility.md)")
    ap.add_argument("--ref", default="HEAD", help="the commit holding the baseline (default %(default)s)")
    ap.add_argument("--no-lock", action="store_true", help="skip the dvc.lock check")
    ap.add_argument("--no-stale", action="store_true", help="skip the dry run for stale outputs")
    ap.add_argument("--targets", nargs="+", default=list(DEMO_TARGETS),
                    help="the demo's rules that were run here, for the dry run (default: %(default)s; CI's make "
                         "demo-check: all, the feature-level study's stage then checked by dvc.lock alone)")
    args = ap.parse_args(argv)
    problems = compare_tracked(args.ref, args.rtol) + ([] if args.no_lock else compare_lock())
    problems += [] if args.no_stale else stale_outputs(tuple(args.targets))
    if problems:
        print(f"the committed baseline is not what this commit's demo produces ({len(problems)} difference(s)):")
        print("\n".join("  " + p for p in problems[:200]))
        if len(problems) > 200:
            print(f"  ... and {len(problems) - 200} more")
        print("regenerate: make baseline, then commit results/metrics, results/plots, dvc.lock and docs/demo_results.md")
        return 1
    print(f"baseline: every tracked metric and plot table within rtol {args.rtol:g} of the committed one; "
          "dvc.lock matches this commit's code and params; no demo job due for its params, code or environment")
    return 0


if __name__ == "__main__":
    sys.exit(main())
