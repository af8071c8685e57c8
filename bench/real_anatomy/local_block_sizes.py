"""The local level's block size and smoothing on real anatomy: one table from local_controls_check.py's runs.

Why: the block size trades the regions the level can find against the number of blocks the
max-statistic calibration has to correct for, and the smoothing trades the noise it removes against
the anatomy it blurs and the recipient it mixes into a pasted region's blocks; relict.local.block_mm's
and smooth_mm's defaults are chosen from this table (docs/local_replicas_real_anatomy.md), so the table is written
from the runs, not typed.

The runs at the defaults are local_controls_check.py's own files (their cohort tables are on the page);
the runs at other settings are one sweep file, ``collect``ed from local_controls_check.py's ``--out`` files:

    python bench/real_anatomy/local_block_sizes.py collect --out results/bench/local_block_sizes.json RUN.json ...
    python bench/real_anatomy/local_block_sizes.py --doc docs/local_replicas_real_anatomy.md \
        results/bench/local_controls_ct.json results/bench/local_controls_ct2.json \
        results/bench/local_controls_mri.json results/bench/local_controls_abdomen.json \
        results/bench/local_block_sizes.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_controls_check import _f, write_doc  # noqa: E402

COHORT = {"ct": "head CT (HU)", "mri": "real-anatomy MRI", "abdomen": "abdominal CT (HU), around the liver"}


def _cohort(r: dict) -> str:
    twice = r.get("noise_source", "").startswith("rescan")  # the held-out patients were scanned twice
    n_heldout = int(r["heldout_called"].rsplit(" of ", 1)[1])
    return (COHORT.get(r["cohort"], r["cohort"]) + (", held-out patients scanned twice" if twice else "")
            + (f", {n_heldout} held-out scans" if n_heldout != 20 else ""))


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


def load_runs(paths: list[Path]) -> list[dict]:
    """The runs of local_controls_check.py ``--out`` files and of ``collect``'s sweep files, in order."""
    runs = []
    for p in paths:
        got = json.loads(Path(p).read_text())
        for name, r in (got["runs"].items() if "runs" in got else [(Path(p).name, got)]):
            if r.get("placement") != "informative":
                raise SystemExit(f"{p}: {name}: placement {r.get('placement')!r}; the table compares block sizes "
                                 "at the default placement")
            runs.append(r)
    return runs


def collect(paths: list[Path], out: Path) -> None:
    """One sweep file of local_controls_check.py's runs, each under its file's name without
    ``local_controls_`` (``ct_b12_s3``): one result file for the table's settings, not one per setting.
    A sweep file among ``paths`` (the last one written, say) gives its runs under their names, so a run
    joins the sweep without the others' files."""
    from synthaudit.io import write_json

    runs = {}
    for p in paths:
        got = json.loads(Path(p).read_text())
        runs.update(got["runs"] if "runs" in got else {Path(p).stem.removeprefix("local_controls_"): got})
    write_json(out, {"about": "local_controls_check.py runs at other settings than relict.local's defaults "
                              "(docs/local_replicas_real_anatomy.md's block-size table)", "runs": runs})


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["collect"]:
        ap = argparse.ArgumentParser(description="one sweep file from local_controls_check.py runs")
        ap.add_argument("runs", nargs="+", type=Path)
        ap.add_argument("--out", type=Path, required=True)
        args = ap.parse_args(argv[1:])
        collect(args.runs, args.out)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="local_controls_check.py --out files, or collect's sweep files")
    ap.add_argument("--doc", type=Path, help="write the table between <!-- local-block-sizes begin/end --> here")
    args = ap.parse_args(argv)
    text = table(load_runs(args.runs))
    if args.doc:
        write_doc(args.doc, "local-block-sizes", text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
