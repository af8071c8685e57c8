"""init's whole estimate against a whole run (issue 47), per workspace: every stage init models, beside the
run's job-seconds, and what the stages it does not model took.

    synthaudit init WS ...                         # times the unit costs on the samples
    (cd WS && snakemake --cores 2)                 # the whole audit, on an otherwise idle machine
    python bench/estimate/whole_run.py compute WS [WS ...] [--estimates E ...]  # -> results/bench/estimate_whole_run.json
    python bench/estimate/whole_run.py doc [--write]          # docs/benchmarks_estimate.md's tables from that JSON

The rows are what the verdict prints (``review.timing.estimate_rows``: data/estimate.json against the
run's ``benchmarks/`` files, job-seconds summed per stage); nothing is recomputed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import synthaudit  # noqa: F401  first: portable numerics before numpy loads
from synthaudit.io import read_tsv
from synthaudit.review.timing import UNESTIMATED_BENCHMARKS, estimate_rows, measured_seconds

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import doc_table  # noqa: E402  the docs page's tables from the JSON

RESULT = "results/bench/estimate_whole_run.json"
PAGE = "docs/benchmarks_estimate.md"
MARKERS = ("<!-- estimate_whole_run: bench/estimate/whole_run.py doc --write -->", "<!-- /estimate_whole_run -->")


def wall_seconds(ws: Path) -> float | None:
    """The last Snakemake run's wall time, first job start to last job end (its log's timestamps)."""
    from datetime import datetime

    logs = sorted((ws / ".snakemake/log").glob("*.snakemake.log"))
    if not logs:
        return None
    stamps = []
    for line in logs[-1].read_text().splitlines():
        try:  # Snakemake's job lines: [Sun Nov 29 00:21:35 2026]
            stamps.append(datetime.strptime(line.strip()[1:-1], "%a %b %d %H:%M:%S %Y"))
        except ValueError:
            continue
    return (stamps[-1] - stamps[0]).total_seconds() if len(stamps) > 1 else None


def workspace_rows(ws: Path, estimate: Path | None = None) -> dict:
    """``estimate``: another init's data/estimate.json of the same folders on the same machine (an estimate
    made by the current code for a run made before it changed); None: the workspace's own."""
    est_path = estimate or ws / "data/estimate.json"
    est = json.loads(Path(est_path).read_text())
    dataset = est["dataset"]
    roles = [r["role"] for r in read_tsv(ws / "data/manifest.tsv")]
    n_syn = len(list((ws / "results/synthetic" / dataset / "images").glob("*.nii.gz")))
    grid = ws / "results/preprocessed" / dataset / "grid.json"
    shape = json.loads(grid.read_text()).get("shape") if grid.is_file() else None
    rows = estimate_rows(ws, dataset, est)
    ranges = est.get("ranges_s") or {}
    for r in rows:
        if r["stage"] in ranges:
            r["estimated_range_s"] = ranges[r["stage"]]
    return {"workspace": str(ws), "estimate": str(est_path), "shape": shape, "n_train": roles.count("train"),
            "n_heldout": roles.count("heldout"), "n_synthetic": n_syn, "how": est["how"], "machine": est["machine"],
            "stages": rows, "not_estimated_s": measured_seconds(ws, dataset, UNESTIMATED_BENCHMARKS),
            "estimated_total_s": sum(r["estimated_s"] for r in rows), "wall_s": wall_seconds(ws)}


def markdown(res: dict) -> str:
    lines = []
    for w in res["workspaces"]:
        shape = " x ".join(map(str, w["shape"])) if w["shape"] else "?"
        lines += [f"{shape}: {w['n_train']} training, {w['n_heldout']} held-out, {w['n_synthetic']} synthetic "
                  f"({w['machine']})", "",
                  "| stage | estimated | measured | measured / estimated |", "|---|---|---|---|"]
        for r in w["stages"]:
            span = r.get("estimated_range_s")
            est = f"{r['estimated_s'] / 60:.1f}" + (f" ({span[0] / 60:.1f}-{span[1] / 60:.1f})" if span else "")
            got = "not run" if r["measured_s"] is None else f"{r['measured_s'] / 60:.1f}"
            ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}"
            lines.append(f"| {r['stage']} | {est} | {got} | {ratio} |")
        if w["wall_s"]:
            lines.append(f"| **the whole run** (`snakemake --cores 2`, wall) | {w['estimated_total_s'] / 60:.1f} | "
                         f"{w['wall_s'] / 60:.1f} | {w['wall_s'] / w['estimated_total_s']:.2f} |")
        if w["not_estimated_s"]:
            lines.append("")
            lines.append("Not in the estimate: " + ", ".join(f"{k} {v / 60:.1f}" for k, v in w["not_estimated_s"].items())
                         + " job-minutes.")
        lines.append("")
    return "\n".join(lines)


def doc(write: bool) -> int:
    return doc_table.doc(PAGE, RESULT, MARKERS, markdown, write, "bench/estimate/whole_run.py doc --write")


def _compute(args) -> dict:
    estimates = args.estimates or [None] * len(args.workspaces)
    if len(estimates) != len(args.workspaces):
        raise SystemExit(f"{len(estimates)} --estimates for {len(args.workspaces)} workspaces")
    return {"workspaces": [workspace_rows(ws, e) for ws, e in zip(args.workspaces, estimates)]}


def main(argv=None) -> int:
    def options(c):
        c.add_argument("workspaces", nargs="+", type=Path)
        c.add_argument("--estimates", nargs="*", type=Path, default=None,
                       help="per workspace, another init's data/estimate.json of the same folders (default: its own)")

    return doc_table.cli(argv, __doc__.splitlines()[0], RESULT, markdown, doc, options, _compute)


if __name__ == "__main__":
    raise SystemExit(main())
