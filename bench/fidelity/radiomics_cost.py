"""What FRD's PyRadiomics features cost per volume, by the volume's extent at FRD's 2 mm grid: the
numbers behind init's estimate (synthaudit.workspace.estimate.RADIOMICS_SECONDS_*), measured in one
process on volumes the script makes (smooth noise in a head-sized ellipsoid).

Usage: python bench/fidelity/radiomics_cost.py [--repeats 2] --out results/bench/radiomics_cost.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import nibabel as nib
import numpy as np
from scipy import ndimage

# (shape, spacing mm): a TOF slab, the demo's 3 mm head, the real-anatomy 1.5 mm head, RELICT's 1 mm grid
GRIDS = [((128, 128, 32), 0.62), ((61, 73, 61), 3.0), ((121, 145, 121), 1.5), ((182, 218, 182), 1.0)]


def volume(shape, rng) -> np.ndarray:
    idx = np.indices(shape).astype(np.float32)
    r = sum(((idx[k] - (n - 1) / 2) / (0.45 * n)) ** 2 for k, n in enumerate(shape))
    v = ndimage.gaussian_filter(rng.normal(size=shape).astype(np.float32), 2) * 200 + 40
    return np.where(r <= 1, v, -1000).astype(np.float32)


def main(argv=None) -> int:
    from synthaudit.fidelity.radiomics import extractor, features_of
    from synthaudit.io import write_json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("results/bench/radiomics_cost.json"))
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    ex = extractor()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape, sp in GRIDS:
            path = Path(tmp) / "v.nii.gz"
            nib.save(nib.Nifti1Image(volume(shape, rng), np.diag([sp, sp, sp, 1.0])), str(path))
            times = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                features_of(path, ex)
                times.append(time.perf_counter() - t)
            voxels_2mm = float(np.prod([n * sp / 2 for n in shape]))
            rows.append({"shape": list(shape), "spacing_mm": sp, "voxels_2mm": round(voxels_2mm),
                         "seconds": round(min(times), 2)})
            print(rows[-1], flush=True)
    a = np.array([[1.0, r["voxels_2mm"] / 1e6] for r in rows])
    fixed, per_mvoxel = np.linalg.lstsq(a, np.array([r["seconds"] for r in rows]), rcond=None)[0]
    write_json(args.out, {"rows": rows, "fit": {"seconds_fixed": round(float(fixed), 2),
                                                "seconds_per_mvoxel_2mm": round(float(per_mvoxel), 2)}})
    print(f"fit: {fixed:.2f} s + {per_mvoxel:.2f} s per million voxels at 2 mm")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
