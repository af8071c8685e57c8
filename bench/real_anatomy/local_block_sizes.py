"""The local level's block size and smoothing on real anatomy: one table from local_controls_check.py's runs.

Why: the block size trades the regions the level can find against the number of blocks the
max-statistic calibration has to correct for, and the smoothing trades the noise it removes against
the anatomy it blurs and the recipient it mixes into a pasted region's blocks; relict.local.block_mm's
and smooth_mm's defaults are chosen from this table (docs/local_replicas_real_anatomy.md), so the table is written
from the runs, not typed.

    python bench/real_anatomy/local_block_sizes.py --doc docs/local_replicas_real_anatomy.md \
        results/bench/local_controls_ct.json results/bench/local_controls_ct_s3.json ...  (the page names them all)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_controls_check import write_doc  # noqa: E402

COHORT = {"ct": "head CT (HU)", "mri": "real-anatomy MRI"}


def _cohort(r: dict) -> str:
    twice = r.get("noise_source", "").startswith("rescan")  # the held-out patients were scanned twice
    return COHORT.get(r["cohort"], r["cohort"]) + (", held-out patients scanned twice" if twice else "")


def _f(x) -> str:
    return "NA" if x is None else f"{x:.2f}"


def distinctive(r: dict) -> str:
    """The issue-43 target's count: the 30 and 40 mm controls in their size's most distinctive third, called."""
    c = [x for x in r["controls"] if float(x["size_mm"]) in (30.0, 40.0) and x["distinctiveness_tercile"] == "high"]
    return f"{sum(bool(x['called']) for x in c)} of {len(c)}"


def table(runs: list[dict]) -> str:
    """One row per run: cohort, block, the controls called per size (its most distinctive third in
    brackets), held-out scans and new patients called, the level's time (on shared cores: compare
    within a row's cohort only) and peak memory."""
    sizes = sorted({s for r in runs for s in r["by_size_mm"]}, key=float)
    lines = ["| cohort | block | smoothing | " + " | ".join(f"{s} mm (distinctive third)" for s in sizes)
             + " | distinctive 30-40 mm | held-out called | new patients called | seconds | peak MiB |",
             "|---|---|---|" + "---|" * len(sizes) + "---|---|---|---|---|"]
    for r in sorted(runs, key=lambda r: (_cohort(r), float(r["settings"]["block_mm"]),
                                         float(r["settings"]["smooth_mm"]))):
        cells = []
        for s in sizes:
            e = r["by_size_mm"].get(s)
            cells.append("" if e is None else f"{_f(e['sensitivity'])} ({_f(e['by_distinctiveness']['high'])})")
        lines.append(f"| {_cohort(r)} | {float(r['settings']['block_mm']):g} mm | "
                     f"{float(r['settings']['smooth_mm']):g} mm | "
                     + " | ".join(cells)
                     + f" | {distinctive(r)} | {r['heldout_called']} | {r['new_patients_called']} | "
                     f"{r['seconds']:.0f} | {'NA' if r.get('peak_mib') is None else format(r['peak_mib'], '.0f')} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="local_controls_check.py --out files")
    ap.add_argument("--doc", type=Path, help="write the table between <!-- local-block-sizes begin/end --> here")
    args = ap.parse_args(argv)
    runs = []
    for p in args.runs:
        r = json.loads(p.read_text())
        if r.get("placement") != "informative":
            raise SystemExit(f"{p}: placement {r.get('placement')!r}; the table compares block sizes at the default placement")
        runs.append(r)
    text = table(runs)
    if args.doc:
        write_doc(args.doc, "local-block-sizes", text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
