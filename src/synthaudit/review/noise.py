"""Which changes of a ``dvc metrics diff`` are the noise of one training, and which are real.

Why: with portable numerics (synthaudit.numerics) the demo gives the same bits on every
machine, so an unchanged commit shows no difference at all. A change to the code or the
parameters moves numbers for two reasons: what it changes, and, where it touches a trained
model's random stream (one more random number drawn, another patch order), a new draw of
that model. The second is no more a finding than another seed would be. The seed-spread
benchmark (``bench/synthaudit_bench/seed_spread.py``, results/bench/seed_spread.json) gives,
for every metric a trained model moves, its SD over seeds; a change within ``k`` SDs is
marked *seed noise*, a change beyond them *beyond noise*. A metric no trained model moves
is deterministic: any change is real.

    python -m synthaudit.review.noise [A_REV [B_REV]] [--spread results/bench/seed_spread.json] [--k 2]

(``dvc metrics diff`` compares HEAD with the workspace by default, as here.)
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

DEFAULT_SPREAD = Path("results/bench/seed_spread.json")
DEFAULT_K = 2.0


def noise_sd(spread: Mapping) -> dict[tuple[str, str], tuple[float, str]]:
    """``(metrics file, key) -> (largest SD over seeds, the estimate it comes from)``."""
    out: dict[tuple[str, str], tuple[float, str]] = {}
    for estimate, entry in spread.get("estimates", {}).items():
        for file, keys in entry.get("metrics", {}).items():
            for key, summary in keys.items():
                sd = summary.get("sd")
                if sd is None:
                    continue
                if sd > out.get((file, key), (-1.0, ""))[0]:
                    out[(file, key)] = (float(sd), estimate)
    return out


def _path_key(path: str, key: str) -> tuple[str, str]:
    """dvc's ``results/metrics/relict.json`` and key ``a.b.c`` -> (``relict.json``, ``a.b.c``)."""
    return Path(path).name, key


def classify(diff: Mapping, spread: Mapping, k: float = DEFAULT_K) -> list[dict]:
    """Rows ``{file, key, old, new, change, sd, estimate, verdict}`` for every changed number of a
    ``dvc metrics diff --json`` result (``{path: {key: {"old", "new", "diff"}}}``)."""
    sds = noise_sd(spread)
    rows = []
    for path, keys in diff.items():
        for key, d in keys.items():
            old, new = d.get("old"), d.get("new")
            change = d.get("diff")
            if change is None and isinstance(old, (int, float)) and isinstance(new, (int, float)):
                change = new - old
            if old == new:
                verdict, sd, estimate = "unchanged", None, None
            elif change is None or (isinstance(change, float) and math.isnan(change)):
                verdict, sd, estimate = ("added or removed" if old is None or new is None else "changed"), None, None
            else:
                sd, estimate = sds.get(_path_key(path, key), (None, None))
                if sd is None:
                    verdict = "deterministic: real change"
                elif abs(change) <= k * sd:
                    verdict = f"seed noise (within {k:g} SD of {estimate})"
                else:
                    verdict = f"beyond seed noise ({abs(change) / sd:.1f} SD of {estimate})" if sd > 0 else \
                        "beyond seed noise"
            rows.append({"file": _path_key(path, key)[0], "key": key, "old": old, "new": new, "change": change,
                         "sd": sd, "estimate": estimate, "verdict": verdict})
    return rows


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("revs", nargs="*", help="revisions for dvc metrics diff (default: HEAD against the workspace)")
    ap.add_argument("--spread", type=Path, default=DEFAULT_SPREAD, help="seed-spread JSON (default %(default)s)")
    ap.add_argument("--k", type=float, default=DEFAULT_K, help="SDs of seed noise (default %(default)s)")
    ap.add_argument("--diff-json", type=Path, help="a saved `dvc metrics diff --json` instead of running dvc")
    args = ap.parse_args(argv)
    if not args.spread.is_file():
        print(f"{args.spread}: no seed-spread file (PYTHONPATH=bench python -m synthaudit_bench.seed_spread)",
              file=sys.stderr)
        return 2
    if args.diff_json:
        diff = json.loads(args.diff_json.read_text())
    else:
        proc = subprocess.run([sys.executable, "-m", "dvc", "metrics", "diff", "--json", *args.revs],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stderr.strip(), file=sys.stderr)
            return 2
        diff = json.loads(proc.stdout or "{}")
    rows = classify(diff, json.loads(args.spread.read_text()), args.k)
    changed = [r for r in rows if r["verdict"] != "unchanged"]
    if not changed:
        print("no metric changed")
        return 0
    for r in changed:
        print(f"{r['file']}  {r['key']}: {_fmt(r['old'])} -> {_fmt(r['new'])} ({_fmt(r['change'])}): {r['verdict']}")
    real = sum(not r["verdict"].startswith("seed noise") for r in changed)
    print(f"{len(changed)} changed: {real} real or beyond seed noise, {len(changed) - real} within seed noise")
    return 0


if __name__ == "__main__":
    sys.exit(main())
