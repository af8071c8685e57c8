"""What FRD's PyRadiomics features cost per volume, by the volume's extent at FRD's 2 mm grid, with
synthaudit's extraction and with PyRadiomics as shipped: the numbers behind init's fallback estimate
(synthaudit.workspace.estimate.RADIOMICS_SECONDS_*) and docs/benchmarks_levels.md's FRD table. Measured in one
process, one thread, on volumes the script makes (smooth noise in a head-sized ellipsoid, air around it),
and on the demo's own volumes where a demo has run (``--demo``); every feature of both paths is compared
bit for bit.

Usage: python bench/fidelity/radiomics_cost.py [--repeats 2] [--demo] [--out results/bench/radiomics_cost.json]
       python bench/fidelity/radiomics_cost.py doc [--write]   (docs/benchmarks_levels.md's table from the JSON)
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

import nibabel as nib
import numpy as np
from scipy import ndimage

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import doc_table  # noqa: E402  the docs page's table from the JSON

RESULT = "results/bench/radiomics_cost.json"
PAGE = "docs/benchmarks_levels.md"
MARKERS = ("<!-- radiomics_cost: bench/fidelity/radiomics_cost.py doc --write -->", "<!-- /radiomics_cost -->")

# (shape, spacing mm): a TOF slab, the demo's 3 mm head, the real-anatomy 1.5 mm head, RELICT's 1 mm grid
GRIDS = [((128, 128, 32), 0.62), ((61, 73, 61), 3.0), ((121, 145, 121), 1.5), ((182, 218, 182), 1.0)]
# a demo NCCT scan and a demo TOF slab, where make demo has run in this checkout
DEMO = ["results/preprocessed/ncct_demo/images/p002_bl.nii.gz", "results/preprocessed/tof_demo/images/s001.nii.gz"]


def volume(shape, rng) -> np.ndarray:
    idx = np.indices(shape).astype(np.float32)
    r = sum(((idx[k] - (n - 1) / 2) / (0.45 * n)) ** 2 for k, n in enumerate(shape))
    v = ndimage.gaussian_filter(rng.normal(size=shape).astype(np.float32), 2) * 200 + 40
    return np.where(r <= 1, v, -1000).astype(np.float32)


def timed(path: Path, ex, repeats: int, shipped: bool) -> tuple[float, np.ndarray]:
    """The best of ``repeats`` extractions' seconds, and the features (shipped: PyRadiomics alone)."""
    from synthaudit.fidelity import radiomics as R

    fast = R._pyradiomics_without_repeated_work
    times, values = [], None
    try:
        if shipped:
            R._pyradiomics_without_repeated_work = contextlib.nullcontext
        for _ in range(repeats):
            t = time.perf_counter()
            feats = R.features_of(path, ex)
            times.append(time.perf_counter() - t)
            values = np.array(list(feats.values()), np.float64)
    finally:
        R._pyradiomics_without_repeated_work = fast
    return min(times), values


def row(path: Path, label: str, shape, spacing: float, ex, repeats: int) -> dict:
    ours, a = timed(path, ex, repeats, shipped=False)
    theirs, b = timed(path, ex, repeats, shipped=True)
    out = {"volume": label, "shape": list(shape), "spacing_mm": spacing,
           "voxels_2mm": round(float(np.prod([n * spacing / 2 for n in shape]))), "seconds": round(ours, 2),
           "shipped_seconds": round(theirs, 2), "speedup": round(theirs / ours, 2),
           "same_bits": bool(a.tobytes() == b.tobytes())}
    print(out, flush=True)
    return out


def markdown(res: dict) -> str:
    """Seconds per volume of each path, the speed-up and whether every feature has the same bits."""
    lines = [f"One process, one thread, best of {res['repeats']}; seconds per volume:", "",
             "| volume | grid | voxels at FRD's 2 mm | PyRadiomics as shipped | synthaudit | speed-up | features |",
             "|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        grid = "x".join(map(str, r["shape"])) + f" at {r['spacing_mm']:g} mm"
        same = "same bits" if r["same_bits"] else "DIFFER"
        lines.append(f"| {r['volume']} | {grid} | {r['voxels_2mm']:,} | {r['shipped_seconds']:.2f} "
                     f"| {r['seconds']:.2f} | {r['speedup']:.2f}x | {same} |")
    fit = res["fit"]
    lines += ["", f"init's fallback (`--no-timing`): {fit['seconds_fixed']:.2f} s + "
              f"{fit['seconds_per_mvoxel_2mm']:.2f} s per million voxels at 2 mm, fitted to the simulated rows."]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["doc"]:
        return doc_table.doc(PAGE, RESULT, MARKERS, markdown, "--write" in argv[1:],
                             "python bench/fidelity/radiomics_cost.py doc --write")
    from synthaudit.fidelity.radiomics import extractor
    from synthaudit.fidelity.texture_matrices import warm
    from synthaudit.io import write_json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--demo", action="store_true", help="also the demo's own volumes (make demo first)")
    ap.add_argument("--out", type=Path, default=ROOT / RESULT)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    ex = extractor()
    warm()  # numba's kernels compiled before the first timing
    rows = []
    with tempfile.TemporaryDirectory() as tmp:  # ITK on one thread (radiomics._execute), numba's kernels serial
        for shape, sp in GRIDS:
            path = Path(tmp) / "v.nii.gz"
            nib.save(nib.Nifti1Image(volume(shape, rng), np.diag([sp, sp, sp, 1.0])), str(path))
            rows.append(row(path, "simulated head" if shape[2] > 32 else "simulated slab", shape, sp, ex,
                            args.repeats))
        for name in DEMO if args.demo else []:
            img = nib.load(name)
            rows.append(row(Path(name), name, img.shape, float(img.header.get_zooms()[0]), ex, args.repeats))
    grid = [r for r in rows if r["volume"].startswith("simulated")]
    a = np.array([[1.0, r["voxels_2mm"] / 1e6] for r in grid])
    fixed, per_mvoxel = np.linalg.lstsq(a, np.array([r["seconds"] for r in grid]), rcond=None)[0]
    write_json(args.out, {"threads": 1, "repeats": args.repeats, "rows": rows,
                          "fit": {"seconds_fixed": round(float(fixed), 2),
                                  "seconds_per_mvoxel_2mm": round(float(per_mvoxel), 2)}})
    print(f"fit: {fixed:.2f} s + {per_mvoxel:.2f} s per million voxels at 2 mm")
    return 0 if all(r["same_bits"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
