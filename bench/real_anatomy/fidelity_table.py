"""Fidelity on real anatomy (issue 45): each measure of synthaudit.fidelity against graded synthetic
sets made from the real-anatomy cohort's held-out scans (docs/fidelity.md's table).

Why: a fidelity measure is only useful if it moves with what a generator gets wrong. The sets are the
20 held-out scans themselves (degradation 0: the floor, by construction) and the same scans with white
noise, Gaussian blur (the issue's 0.5 / 1 / 2 voxels), an intensity shift and a smooth deformation, and
mixtures in which 1, 2 or 4 of the 20 (5, 10, 20 %) are replaced by copies of training scans (the
training scan with a fresh scan noise; 2 % is less than one volume of 20 and is not measurable here).
Each set goes through the workflow's own functions: the configured feature extractor
(``relict.features`` of the shipped params.yaml, or ``--extractor``), the fidelity audit
(``fidelity.audit.audit`` with the shipped ``fidelity`` settings: CIs, the held-out floor, C_T) and
FRD's PyRadiomics features (``fidelity.radiomics``). Volumes that several sets share are embedded
and featurised once.

Usage:
  fidelity_table.py compute --cohort data/real_anatomy/cohort [--extractor astra_resnet152] [--workers 2]
                            --out results/bench/real_anatomy_fidelity_cohort.json
  fidelity_table.py doc [--write]     docs/fidelity.md's table from the committed JSON
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "bench"))
import doc_table  # noqa: E402  the docs page's table from the JSON

RESULT = "results/bench/real_anatomy_fidelity_cohort.json"
PAGE = "docs/fidelity.md"
MARKERS = ("<!-- fidelity_table: bench/real_anatomy/fidelity_table.py doc --write -->", "<!-- /fidelity_table -->")
SEED = 45
# (name, kind, level): the degradations of the held-out scans (intensities: the head's 99th percentile is 1)
SETS = [("held-out scans", "none", 0.0),
        ("noise SD 0.05", "noise", 0.05), ("noise SD 0.1", "noise", 0.1),
        ("blur 0.5 voxel", "blur", 0.5), ("blur 1 voxel", "blur", 1.0), ("blur 2 voxels", "blur", 2.0),
        ("intensity +0.1", "shift", 0.1),
        ("deformation 4 mm", "deform", 4.0),
        ("5 % copies", "copies", 1), ("10 % copies", "copies", 2), ("20 % copies", "copies", 4)]
COLUMNS = [("frechet_distance", "FD"), ("frd", "FRD"), ("precision", "precision"), ("recall", "recall"),
           ("coverage", "coverage"), ("authenticity", "authenticity")]


def load_folder(folder: Path) -> tuple[list[str], np.ndarray, np.ndarray]:
    """A cohort folder's volumes (build_cohort.py's: one grid), sorted by id: ids, stacked volumes, the affine."""
    import nibabel as nib

    files = sorted(folder.glob("*.nii.gz"))
    if not files:
        raise SystemExit(f"{folder}: no volumes (build the cohort: bench/real_anatomy/run.sh audit)")
    affine = nib.load(str(files[0])).affine
    return [f.name.removesuffix(".nii.gz") for f in files], np.stack(
        [np.asarray(nib.load(str(f)).dataobj, np.float32) for f in files]), affine


def degraded(vols: list[np.ndarray], kind: str, level: float, spacing: list[float], seed: int) -> list[np.ndarray]:
    from scipy import ndimage

    sys.path.insert(0, str(HERE))
    from build_cohort import deformed  # the cohort's own smooth deformation

    out = []
    for k, v in enumerate(vols):
        rng = np.random.default_rng([seed, k])
        if kind == "noise":
            v = v + rng.normal(0, level, v.shape)
        elif kind == "blur":
            v = ndimage.gaussian_filter(v, level)
        elif kind == "shift":
            v = v + level
        elif kind == "deform":
            v = deformed(v, spacing, level, 30.0, rng)
        out.append(np.asarray(v, np.float32))
    return out


def compute(cohort: Path, extractor: str | None, workers: int, scratch: Path) -> dict:
    import nibabel as nib
    import yaml

    from synthaudit import resources
    from synthaudit.config import fill_defaults
    from synthaudit.features import extractor_from_config
    from synthaudit.features.compare import standardise
    from synthaudit.fidelity.audit import Embedded, audit, pooled
    from synthaudit.fidelity.radiomics import LABEL, extract_many

    t0 = time.perf_counter()
    params = fill_defaults(yaml.safe_load(resources.default_params().read_text()))
    fcfg = dict(params["relict"]["features"])
    if extractor:
        fcfg["extractor"] = extractor
    settings = params["fidelity"]
    train_ids, train, affine = load_folder(cohort / "training")
    held_ids, held, _ = load_folder(cohort / "heldout")
    spacing = [float(x) for x in np.sqrt((affine[:3, :3] ** 2).sum(axis=0))]
    patient = lambda i: i.split("_")[0]  # noqa: E731 - the cohort's ids: <patient>_s<k>

    # every distinct volume once: name -> array (training, held-out, degraded, copies)
    volumes = {f"train/{i}": v for i, v in zip(train_ids, train)}
    volumes.update({f"held/{i}": v for i, v in zip(held_ids, held)})
    members: dict[str, list[str]] = {}
    rng = np.random.default_rng(SEED)
    copy_sources = [int(j) for j in rng.choice(len(train), 4, replace=False)]
    for name, kind, level in SETS:
        if kind == "none":
            members[name] = [f"held/{i}" for i in held_ids]
        elif kind == "copies":  # the first n held-out scans replaced by copies of training scans
            keys = []
            for c in range(int(level)):
                key = f"copy/{train_ids[copy_sources[c]]}"
                if key not in volumes:
                    crng = np.random.default_rng([SEED, 7, c])
                    v = train[copy_sources[c]]
                    volumes[key] = np.asarray(v + crng.normal(0, 0.02, v.shape), np.float32)  # a fresh scan noise
                keys.append(key)
            members[name] = keys + [f"held/{i}" for i in held_ids[int(level):]]
        else:
            keys = [f"{kind}{level:g}/{i}" for i in held_ids]
            volumes.update(zip(keys, degraded(held, kind, level, spacing, SEED)))
            members[name] = keys
    names = list(volumes)
    print(f"{len(names)} distinct volumes ({time.perf_counter() - t0:.0f} s)", flush=True)

    ex = extractor_from_config(fcfg)
    emb = ex.embed_many((volumes[n] for n in names), batch_size=1)
    meta = ex.describe(volumes[names[0]].shape)
    row = {n: k for k, n in enumerate(names)}
    print(f"embedded with {ex.label} ({time.perf_counter() - t0:.0f} s)", flush=True)

    scratch.mkdir(parents=True, exist_ok=True)  # PyRadiomics reads files, as the workflow's rule does
    paths = []
    for k, n in enumerate(names):
        p = scratch / f"v{k:04d}.nii.gz"
        if not p.exists():
            nib.save(nib.Nifti1Image(volumes[n], affine), str(p))
        paths.append(p)
    feat_names, feats = extract_many(paths, workers=workers)
    print(f"{len(feat_names)} radiomic features ({time.perf_counter() - t0:.0f} s)", flush=True)

    def split(keys: list[str], patients: list[str]) -> Embedded:
        rows = [row[k] for k in keys]
        x = emb[rows]
        near = standardise(x, emb[[row[f"train/{i}"] for i in train_ids]], fcfg["scaling"])[0]
        return Embedded(keys, pooled(x, meta)[0], near, patients, feats[rows])

    tr = split([f"train/{i}" for i in train_ids], [patient(i) for i in train_ids])
    ho = split([f"held/{i}" for i in held_ids], [patient(i) for i in held_ids])
    out = {"cohort": str(cohort.relative_to(ROOT) if cohort.is_relative_to(ROOT) else cohort),
           "n_training": len(train_ids), "n_heldout": len(held_ids), "extractor": ex.label,
           "scaling": fcfg["scaling"], "frd": LABEL, "frd_features": len(feat_names),
           "bootstrap": settings["bootstrap"], "sets": {}}
    for name, kind, level in SETS:
        keys = members[name]
        syn = split(keys, keys)
        res = audit(tr, ho, syn, settings, "mean of grid cells", fcfg["scaling"])
        out["sets"][name] = {"kind": kind, "level": level, "n": len(keys),
                             "measures": {k: res["synthetic"][k] for k in res["synthetic"]},
                             "c_t": res["c_t"]["value"], "c_t_cells": res["c_t"]["n_cells"]}
        out["floor"] = {k: res["floor"][k] for k in res["floor"]}
        m = res["synthetic"]
        print(f"{name}: FD {m['frechet_distance']['value']:.4g}, FRD {m['frd']['value']:.4g}, "
              f"authenticity {m['authenticity']['value']:.3g}, C_T {res['c_t']['value']:.3g} "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def _cell(v: dict) -> str:
    ci = v.get("ci")
    return f"{v['value']:.3g} [{ci[0]:.3g}, {ci[1]:.3g}]" if ci else f"{v['value']:.3g}"


def markdown(res: dict) -> str:
    head = "| set | " + " | ".join(label for _, label in COLUMNS) + " | C_T |"
    lines = [head, "|---" * (len(COLUMNS) + 2) + "|"]
    lines.append("| **floor** (held-out vs training) | " + " | ".join(
        _cell(res["floor"][k]) if k in res["floor"] else "" for k, _ in COLUMNS) + " | |")
    for name, s in res["sets"].items():
        m = s["measures"]
        ct = "" if s["c_t"] is None else f"{s['c_t']:.3g}"
        lines.append(f"| {name} | " + " | ".join(_cell(m[k]) if k in m else "" for k, _ in COLUMNS) + f" | {ct} |")
    lines.append("")
    lines.append(f"{res['n_training']} training and {res['n_heldout']} held-out scans of `{res['cohort']}`; "
                 f"embeddings: {res['extractor']} (scaling {res['scaling']}); FRD on {res['frd_features']} "
                 f"PyRadiomics features; 95 % CIs from {res['bootstrap']['n']} patient bootstrap replicates; "
                 f"{res['seconds']:.0f} s on 2 cores.")
    return "\n".join(lines)


def doc(write: bool) -> int:
    return doc_table.doc(PAGE, RESULT, MARKERS, markdown, write, "bench/real_anatomy/fidelity_table.py doc --write")


def main(argv=None) -> int:
    def options(c):
        c.add_argument("--cohort", type=Path, required=True)
        c.add_argument("--extractor", help="relict.features.extractor (default: the shipped params.yaml's)")
        c.add_argument("--workers", type=int, default=2, help="PyRadiomics processes")
        c.add_argument("--scratch", type=Path, help="where the degraded volumes are written for PyRadiomics")

    return doc_table.cli(argv, __doc__.splitlines()[0], RESULT, markdown, doc, options, lambda a: compute(
        a.cohort.resolve(), a.extractor, a.workers,
        a.scratch or a.cohort.resolve().parent / f"fidelity_scratch_{a.cohort.name}"))


if __name__ == "__main__":
    raise SystemExit(main())
