"""The combined calibrated call of a finished real-anatomy audit, per kind of synthetic volume (issue 43):
how many of each kind the workflow's own `calibrated_calls.tsv` called, and how many held-out scans the
same rule calls when each is left out (`copies.json`).

    python bench/real_anatomy/combined_calls.py --workspace WS [--cohort data/real_anatomy/cohort]
        [--dataset audit] --out results/bench/real_anatomy_combined_calls.json
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from synthaudit.io import read_tsv, write_json

ROOT = Path(__file__).resolve().parents[2]


def tally(workspace: Path, cohort: Path, dataset: str) -> dict:
    truth = {r["synthetic_id"]: r["kind"] for r in read_tsv(cohort / "truth.tsv")}
    rows = read_tsv(workspace / f"results/relict/{dataset}/calibrated_calls.tsv")
    n, called = Counter(), Counter()
    for r in rows:
        kind = truth[r["synthetic_id"]]
        n[kind] += 1
        called[kind] += r["combined_replica"] == "1"
    summary = json.loads((workspace / f"results/relict/{dataset}/copies.json").read_text())
    return {"workspace": str(workspace), "cohort": str(cohort.relative_to(ROOT) if cohort.is_relative_to(ROOT)
                                                        else cohort),
            "rate": summary["rate"], "n_heldout": summary["n_heldout"],
            # the measures calibrated against the held-out scans degraded like the samples (none: as they are)
            "matched_null": summary.get("matched_null"),
            "heldout_called": summary.get("combined_heldout_called"),
            "kinds": {k: {"n": n[k], "called": called[k]} for k in sorted(n)},
            "specificity": 1 - called["new"] / n["new"] if n["new"] else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", type=Path, required=True)
    ap.add_argument("--cohort", type=Path, default=ROOT / "data/real_anatomy/cohort")
    ap.add_argument("--dataset", default="audit")
    ap.add_argument("--out", type=Path, default=ROOT / "results/bench/real_anatomy_combined_calls.json")
    args = ap.parse_args(argv)
    res = tally(args.workspace, args.cohort, args.dataset)
    write_json(args.out, res)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
