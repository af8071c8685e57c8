"""Files in the DVC-tracked output folders that no rule of the demo writes (run before `make lock`).

Why: dvc.lock hashes whole folders (results/relict, ...). A file an older version of a rule
wrote, and no rule writes any more, stays in a developer's folder, enters the committed hash,
and is absent from CI's clean checkout: the committed baseline then fails CI for a file nobody
sees (issue 43's stop: 15 stale held-out matrices). Snakemake's ``--list-untracked`` names the
files its DAG (the demo and the feature-level study) does not produce; those under a DVC
output that DVC does not ignore are stale. ``--delete`` removes them (they are outputs, never
inputs); without it, the script lists them and exits 1.

Usage: python .ci/stale_outputs.py [--delete]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def dvc_outputs() -> list[str]:
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    outs = []
    for stage in stages.values():
        for out in stage.get("outs", []):
            outs.append(next(iter(out)) if isinstance(out, dict) else str(out))
    return outs


def ignored(paths: list[str]) -> set[str]:
    """The paths .dvcignore leaves out of the hashes (times, checkpoints)."""
    if not paths:
        return set()
    proc = subprocess.run([str(BIN / "dvc"), "check-ignore", *paths], cwd=ROOT, capture_output=True, text=True)
    return set(proc.stdout.split())


def _snakemake(*args: str) -> str:
    proc = subprocess.run([str(BIN / "snakemake"), "--workflow-profile", "workflow/profiles/demo", *args,
                           "all", "feature_study_all"], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"snakemake {' '.join(args)} failed:\n{proc.stderr[-2000:]}")
    return proc.stdout


def stale() -> list[str]:
    outs = tuple(o.rstrip("/") + "/" for o in dvc_outputs())
    # the DAG's outputs, directory() outputs among them: --list-untracked lists the files inside those too
    produced = {line.split("\t")[0].rstrip("/") for line in _snakemake("--summary").splitlines()[1:] if line.strip()}
    found = []
    for line in _snakemake("--list-untracked").splitlines():
        path = line.strip()
        if path.startswith(outs) and not any(str(a) in produced for a in Path(path).parents):
            found.append(path)
    skip = set()
    for i in range(0, len(found), 200):
        skip |= ignored(found[i:i + 200])
    return [p for p in found if p not in skip and (ROOT / p).is_file()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--delete", action="store_true", help="remove them")
    args = ap.parse_args(argv)
    files = stale()
    if not files:
        print("stale outputs: none (every file in the DVC output folders is written by a rule)")
        return 0
    for p in files:
        if args.delete:
            (ROOT / p).unlink()
        print(("removed " if args.delete else "stale: ") + p)
    if args.delete:
        return 0
    print(f"{len(files)} file(s) in DVC output folders that no rule writes: they would enter dvc.lock's hash and "
          "fail CI's clean run; remove them (python .ci/stale_outputs.py --delete)")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
