"""The feature level's extraction job on a cohort, as ``init`` configures it (issue 47).

Why: the issue measured the embedding of 130 volumes of 85^3 at 1.5 mm (Astra's I3D ResNet-152) at
770 s on shared cores, the largest part of that audit, and asks for it at least 2x faster, old and
new measured on one idle machine. This bench does what the ``embed`` job does (workflow/scripts/embed.py)
for every volume of a cohort: read the NIfTI file, smooth, encode, pool, on the job's threads, with
``relict.features`` as ``init`` writes it (the Astra encoder, grid 4, input smoothing 1 voxel). The
cohort is simulated (seeded smooth volumes in [0, 1]): a dense network's cost does not depend on what
the voxels hold.

``torch_default`` gives every convolution torch's own dispatch (the path before
``features.conv.OneDnnConv3d``), so one checkout times both, one after the other in one process, and
writes results/bench/extraction_job.json with their embeddings compared.

    python bench/features/extraction_job.py [--volumes 130]
    python bench/features/extraction_job.py doc [--write]     # docs/benchmarks_levels.md's table from the JSON
"""

from __future__ import annotations

import synthaudit  # noqa: F401  first: portable numerics before numpy and torch load
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench"), str(Path(__file__).parent)]  # doc_table; encoder_cost.torch_default
import doc_table  # noqa: E402  the docs page's table from the JSON

RESULT = "results/bench/extraction_job.json"
PAGE = "docs/benchmarks_levels.md"
MARKERS = ("<!-- extraction_job: bench/features/extraction_job.py doc --write -->", "<!-- /extraction_job -->")
CONFIG = {"extractor": "astra_resnet152", "grid": 4, "smoothing_voxels": 1.0}


def cohort(folder: Path, n: int, shape: tuple[int, int, int], spacing_mm: float) -> list[Path]:
    """``n`` seeded smooth volumes as NIfTI files (written once, then reused)."""
    import nibabel as nib
    from scipy.ndimage import gaussian_filter

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(n):
        path = folder / f"v{k:04d}.nii.gz"
        if not path.exists():
            rng = np.random.default_rng(k)
            v = gaussian_filter(rng.random(shape, np.float32), 2.0)
            v = (v - v.min()) / (v.max() - v.min())
            tmp = path.with_name(f"v{k:04d}.tmp.nii.gz")
            nib.save(nib.Nifti1Image(v.astype(np.float32), np.diag([spacing_mm] * 3 + [1.0])), tmp)
            tmp.replace(path)
        paths.append(path)
    return paths


def extract(paths: list[Path], conv: str, threads: int, batch_size: int) -> tuple[np.ndarray, dict]:
    """The embed job's work on ``paths`` with ``conv``'s convolutions; the embeddings and the seconds."""
    from synthaudit.features import extractor_from_config
    from synthaudit.io import load_volume

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    extractor = extractor_from_config(CONFIG, device="cpu")
    if conv == "torch_default":
        from encoder_cost import torch_default

        encoder = getattr(extractor, "inner", extractor)
        encoder.model = torch_default(encoder.model)
    loaded = time.perf_counter()
    emb = extractor.embed_many((load_volume(p)[0] for p in paths), batch_size=batch_size)
    done = time.perf_counter()
    return emb, {"load_s": round(loaded - t0, 2), "extraction_s": round(done - loaded, 2),
                 "per_volume_s": round((done - loaded) / len(paths), 3)}


def markdown(res: dict) -> str:
    a, b = res["runs"]["workflow"], res["runs"]["torch_default"]
    shape = " x ".join(map(str, res["shape"]))
    return "\n".join([
        f"{res['volumes']} volumes of {shape} at {res['spacing_mm']:g} mm, {res['threads']} threads, "
        f"batch size {res['batch_size']} ({res['machine']}, numerics {res['numerics']}):", "",
        "| convolutions | extraction, seconds | per volume | encoder load |", "|---|---|---|---|",
        f"| torch's own dispatch (before) | {b['extraction_s']:.1f} | {b['per_volume_s']:.2f} | {b['load_s']:.1f} |",
        f"| oneDNN for every convolution (now) | {a['extraction_s']:.1f} | {a['per_volume_s']:.2f} | {a['load_s']:.1f} |",
        "", f"{res['speedup']:.2f}x faster; the embeddings differ by at most {res['max_rel_diff']:.1e} of the "
        "largest (relative)."])


def doc(write: bool) -> int:
    return doc_table.doc(PAGE, RESULT, MARKERS, markdown, write, "bench/features/extraction_job.py doc --write")


def main(argv=None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["doc"]:
        return doc("--write" in argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--volumes", type=int, default=130)
    ap.add_argument("--shape", type=int, default=85, help="voxels a side")
    ap.add_argument("--spacing-mm", type=float, default=1.5)
    ap.add_argument("--threads", type=int, default=2, help="the embed rule's threads")
    ap.add_argument("--batch-size", type=int, default=1, help="compute.embed_batch_size")
    ap.add_argument("--cohort", type=Path, default=Path("/tmp/synthaudit-extraction-cohort"))
    ap.add_argument("--out", type=Path, default=ROOT / RESULT)
    args = ap.parse_args(argv)
    from synthaudit.io import write_json
    from synthaudit.numerics import provenance
    from synthaudit.workspace.timing import machine

    shape = (args.shape,) * 3
    paths = cohort(args.cohort / f"{args.shape}_{args.spacing_mm:g}mm", args.volumes, shape, args.spacing_mm)
    runs, embs = {}, {}
    for conv in ("torch_default", "workflow"):
        embs[conv], runs[conv] = extract(paths, conv, args.threads, args.batch_size)
        print(conv, runs[conv], flush=True)
    a, b = embs["workflow"], embs["torch_default"]
    result = {"machine": machine(), **provenance(), "torch": torch.__version__, "config": CONFIG,
              "volumes": args.volumes, "shape": list(shape), "spacing_mm": args.spacing_mm, "threads": args.threads,
              "batch_size": args.batch_size, "runs": runs,
              "speedup": round(runs["torch_default"]["extraction_s"] / runs["workflow"]["extraction_s"], 2),
              "max_rel_diff": float(np.max(np.abs(a - b)) / np.max(np.abs(b)))}
    write_json(args.out, result)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
