"""The robust FRD's SD floor (``fidelity.frd_min_sd``, issue 63), measured on a finished demo's features: per
set and floor, the robust FRD of the samples and of the held-out scans, the features kept and left out, and
the share and name of the largest kept feature.

    make demo                                            # the features: results/fidelity/radiomics/
    python bench/fidelity/frd_floor.py compute [--root .]  # -> results/bench/frd_floor.json
    python bench/fidelity/frd_floor.py doc [--write]       # docs/fidelity.md's table from that JSON

Why: an absolute floor has to leave out the features constant up to rounding over the training scans
(which rule FRD v1 after z-scoring) and keep the features whose real variation is small; the demo holds
both (its NCCT heads' empty background, its TOF slabs' homogeneous tissue).
"""

from __future__ import annotations

import sys
from pathlib import Path

import synthaudit  # noqa: F401  first: portable numerics before numpy loads
from synthaudit.fidelity.radiomics import frd, load_features, robust_frd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import doc_table  # noqa: E402  the docs page's tables from the JSON

RESULT = "results/bench/frd_floor.json"
PAGE = "docs/fidelity.md"
MARKERS = ("<!-- frd_floor: bench/fidelity/frd_floor.py doc --write -->", "<!-- /frd_floor -->")
FLOORS = [1e-6, 1e-5, 1e-4, 1e-3]
# (synthetic set, its training set): the demo's spiked NCCT set, its generator's samples, its TOF set
SETS = [("ncct_demo", "ncct_demo"), ("ncct_ldm", "ncct_demo"), ("tof_demo", "tof_demo")]


def compute(root: Path) -> dict:
    base = root / "results/fidelity/radiomics"
    rows = []
    for dataset, training in SETS:
        names, train = load_features(base / training / "train.npz")
        _, held = load_features(base / training / "heldout.npz")
        _, samples = load_features(base / dataset / "synthetic.npz")
        for floor in FLOORS:
            r, h = robust_frd(train, samples, floor, names), robust_frd(train, held, floor, names)
            rows.append({"dataset": dataset, "min_sd": floor, "frd_v1": frd(train, samples), "robust": r["value"],
                         "floor_v1": frd(train, held), "robust_floor": h["value"], "kept": r["features"],
                         "left_out": r["left_out"], "largest_share": r["largest_share"],
                         "largest_feature": r["largest_feature"]})
    import subprocess

    commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    return {"demo_of_commit": commit or None, "rows": rows}


def markdown(res: dict) -> str:
    lines = ["| set | SD floor | FRD v1 (floor) | robust FRD (floor) | features kept / left out | largest kept feature |",
             "|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['dataset']} | {r['min_sd']:g} | {r['frd_v1']:.2f} ({r['floor_v1']:.2f}) | {r['robust']:.2f} "
                     f"({r['robust_floor']:.2f}) | {r['kept']} / {r['left_out']} | {r['largest_share']:.0%}: "
                     f"`{r['largest_feature']}` |")
    return "\n".join(lines)


def doc(write: bool) -> int:
    return doc_table.doc(PAGE, RESULT, MARKERS, markdown, write, "bench/fidelity/frd_floor.py doc --write")


def main(argv=None) -> int:
    return doc_table.cli(argv, __doc__.splitlines()[0], RESULT, markdown, doc, doc_table.root_option,
                         lambda a: compute(a.root))


if __name__ == "__main__":
    raise SystemExit(main())
