"""Seconds per volume of the feature level's encoders (``make bench`` / ``bench-quick``).

Why a separate benchmark: the feature level's cost is one forward pass per volume (the
all-pairs comparison of stored embeddings is cheap, see the engine benchmark), and it
depends on the encoder, the grid the volumes lie on and the device. Volumes: nilearn's
MNI152 CT-like head resampled to ``--spacing`` and cut to RELICT's 182 x 218 x 182 mm box
(1 mm: RELICT's NCCT grid), windowed as the demo windows it. Each extractor is timed on
``--volumes`` volumes after one warm-up pass, in this process, with the configured number
of torch threads.

    python -m synthaudit_bench.embedding --spacing 1 --out results/bench/embedding_1mm.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path

import numpy as np

# name -> relict.features block (the default first)
CANDIDATES = {
    "untrained_resnet50_s1 (default)": {"extractor": "medicalnet_resnet50", "seed": 0, "grid": 4,
                                        "smoothing_voxels": 1.0},
    "untrained_resnet50 (RELICT)": {"extractor": "medicalnet_resnet50", "seed": 0, "grid": 4},
    "astra": {"extractor": "astra_resnet152", "grid": 4},
}
RELICT_BOX = (182, 218, 182)  # voxels at 1 mm


def _volume(spacing: float, seed: int) -> np.ndarray:
    from synthaudit.anatomy import mni_ct_template

    ct, _ = mni_ct_template(spacing)
    box = [int(round(n / spacing)) for n in RELICT_BOX]
    start = [max(0, (s - b) // 2) for s, b in zip(ct.shape, box)]
    ct = ct[tuple(slice(a, a + b) for a, b in zip(start, box))]
    rng = np.random.default_rng(seed)
    return np.clip((ct + 100.0) / 300.0 + rng.normal(0, 0.01, ct.shape), 0.0, 1.0).astype(np.float32)


def run(spacing: float, n_volumes: int, threads: int, names: list[str] | None = None) -> dict:
    import torch

    from synthaudit.features import extractor_from_config

    torch.set_num_threads(threads)
    volumes = [_volume(spacing, seed) for seed in range(n_volumes + 1)]
    out = {"spacing_mm": spacing, "shape": list(volumes[0].shape), "threads": threads,
           "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                       "torch": torch.__version__, "load_average": os.getloadavg()[0]},
           "extractors": {}}
    for name, cfg in CANDIDATES.items():
        if names and not any(n in name for n in names):
            continue
        ex = extractor_from_config(cfg, device="cpu")
        ex(volumes[0])  # warm-up (allocations, first-call dispatch)
        start = time.perf_counter()
        for v in volumes[1:]:
            emb = ex(v)
        seconds = (time.perf_counter() - start) / n_volumes
        info = ex.describe(volumes[0].shape)
        out["extractors"][name] = {"label": ex.label, "seconds_per_volume": round(seconds, 3),
                                   "grid_used": info["grid_used"], "dim": int(emb.size)}
        print(f"{name:34s} {seconds:7.2f} s / volume  ({ex.label}; grid {info['grid_used']})", flush=True)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spacing", type=float, default=1.0, help="voxel spacing in mm (1: RELICT's NCCT grid)")
    ap.add_argument("--volumes", type=int, default=2, help="volumes timed per extractor (after a warm-up)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--only", nargs="*", help="substrings of the extractor names to time")
    ap.add_argument("--out", default="results/bench/embedding.json")
    args = ap.parse_args(argv)
    result = run(args.spacing, args.volumes, args.threads, args.only)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
