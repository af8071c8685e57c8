"""Membership inference validated on real anatomy (issue 64, item 4): the stage's attacks on synthetic sets
with no leak, a graded leak (samples crowding the training patients without copying them) and a share of
copies, over several draws each (docs/membership.md's validation tables).

What is real and what is made: the anatomy is the real-anatomy benchmark's five real heads (fetch.sh; each
registered to MNI as bench/real_anatomy/build_cohort.py does), and the patients, their scans and the
"generator" follow that cohort's recipe (cohort.yaml: a patient is a head under its own 6 mm smooth
deformation and intensity bias; two scans of a patient differ by 0.7 mm of deformation, a gain and noise;
every synthetic volume is blurred and noised alike). Hundreds of volumes through the 3D encoder would take
hours on 2 cores, so everything is made at 3 mm (the heads' 1.5 mm block means) and the embedding attacks
read the image at 6 mm instead of an encoder's embedding (block means, divided by their length as
relict.features.scaling does). The attacks and their evaluation are the workflow's own functions
(synthaudit.membership.audit with the shipped params.yaml's ``membership`` settings).

Members: 30 training patients with 2 scans each; non-members: 20 held-out patients with 1 scan each (the
cohort's sizes). Synthetic sets of 50:
  no leak       50 new patients (patients of the same five heads, never in training or held out); 10 draws
  crowding f    each sample a training patient's anatomy under a further deformation of f x 6 mm (the
                deformation that makes a new patient), f = 1.5, 1, 0.75, 0.5, 0.25; 3 draws each
  copies q      a share q of the samples are a training scan (then degraded), the rest new patients;
                q = 5, 10, 20 %; 3 draws each

    python bench/membership/real_anatomy.py compute --nifti data/real_anatomy/nifti  # fetch.sh's; minutes
    python bench/membership/real_anatomy.py doc [--write]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

import synthaudit  # noqa: F401  first: portable numerics before numpy loads
import numpy as np
import yaml
from scipy import ndimage

from synthaudit.features.compare import standardise
from synthaudit.membership import audit
from synthaudit.relict.image_measures import all_pairs_image_measures
from synthaudit.synthetic.spiked import smooth_displacement, warp

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "bench" / "real_anatomy"))
import doc_table  # noqa: E402  the docs page's tables from the JSON
from build_cohort import log, scanned  # noqa: E402  bench/real_anatomy: the cohort's scans

RESULT = "results/bench/membership_real_anatomy.json"
PAGE = "docs/membership.md"
MARKERS = {"none": ("<!-- membership_no_leak: bench/membership/real_anatomy.py doc --write -->",
                    "<!-- /membership_no_leak -->"),
           "graded": ("<!-- membership_graded: bench/membership/real_anatomy.py doc --write -->",
                      "<!-- /membership_graded -->")}
COHORT = ROOT / "bench" / "real_anatomy" / "cohort.yaml"
SEED, N_SAMPLES, NO_LEAK_DRAWS, DRAWS = 64, 50, 10, 3
CROWDING, COPIES = [1.5, 1.0, 0.75, 0.5, 0.25], [0.05, 0.1, 0.2]


def block_mean(v: np.ndarray, k: int) -> np.ndarray:
    s = [n // k * k for n in v.shape]
    v = v[: s[0], : s[1], : s[2]]
    return v.reshape(s[0] // k, k, s[1] // k, k, s[2] // k, k).mean(axis=(1, 3, 5), dtype=np.float64).astype(np.float32)


def heads(nifti: Path, cfg: dict, cache: Path) -> dict[str, np.ndarray]:
    """The five real heads on the cohort's 1.5 mm MNI grid (build_cohort.load_base, histograms matched as the
    cohort does), at 3 mm; cached (registration takes a minute)."""
    if cache.is_file():
        with np.load(cache) as z:
            return {k: z[k] for k in z.files}
    from build_cohort import load_base, match_histogram  # noqa: E402  bench/real_anatomy
    from synthaudit.preprocess.pipeline import load_template
    from synthaudit.preprocess.register import reference_grid

    shape = tuple(cfg["grid_vox"])
    grid = reference_grid(cfg["spacing_mm"], shape, cfg["grid_center_mm"])
    template = load_template("mni_t1", 2.0)
    full = {n: load_base(nifti / rel, grid, shape, template) for n, rel in cfg["heads"].items()}
    first = next(iter(full))
    full = {n: (v if n == first else match_histogram(v, full[first])) for n, v in full.items()}
    out = {n: block_mean(v, 2) for n, v in full.items()}
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(cache, **out)
    return out


class Recipe:
    """The real-anatomy cohort's patients, scans and generator at 3 mm (cohort.yaml's settings)."""

    def __init__(self, bases: dict[str, np.ndarray], cfg: dict):
        self.bases, self.cfg, self.names = bases, cfg, list(bases)
        self.sp = [2.0 * float(cfg["spacing_mm"])] * 3
        self.shape = next(iter(bases.values())).shape

    def anatomy(self, k: int) -> np.ndarray:
        """Patient k: its head (k mod 5) under its own smooth deformation and intensity bias."""
        rng = np.random.default_rng([SEED, k])
        c = self.cfg
        disp = smooth_displacement(self.shape, self.sp, c["patient_deformation_mm"], c["patient_smoothness_mm"], rng)
        bias = 1.0 + c["patient_bias"] * smooth_displacement(self.shape, self.sp, 1.0, 80.0, rng)[0] * self.sp[0]
        return (warp(self.bases[self.names[k % len(self.names)]], disp, order=1) * bias).astype(np.float32)

    def scan(self, anatomy: np.ndarray, rng) -> np.ndarray:
        return scanned(anatomy, self.cfg, self.sp, rng)

    def crowd(self, anatomy: np.ndarray, share: float, rng) -> np.ndarray:
        c = self.cfg
        disp = smooth_displacement(self.shape, self.sp, share * c["patient_deformation_mm"],
                                   c["patient_smoothness_mm"], rng)
        return warp(anatomy, disp, order=1).astype(np.float32)

    def generated(self, v: np.ndarray, rng) -> np.ndarray:
        v = ndimage.gaussian_filter(v, self.cfg["generator_blur_vox"] / 2.0)  # its 1.5 mm voxels at 3 mm
        return (v + rng.normal(0, self.cfg["generator_noise"], v.shape)).astype(np.float32)


class Cohort(NamedTuple):
    """The members and non-members at 3 mm, scan for scan the same for this bench and copies_validation.py."""

    recipe: Recipe
    train_anatomy: list[np.ndarray]  # per training patient
    train: list[tuple[str, str, np.ndarray]]  # (scan id, patient, volume)
    held: list[tuple[str, str, np.ndarray]]
    candidates: audit.Candidates
    candidate_volumes: np.ndarray  # in candidates.ids' order


def cohort(nifti: Path) -> Cohort:
    """cohort.yaml's sizes: its training patients with 2 scans each (members), its held-out patients with 1."""
    cfg = yaml.safe_load(COHORT.read_text())
    r = Recipe(heads(nifti, cfg, ROOT / "data" / "real_anatomy" / "membership_heads_3mm.npz"), cfg)
    n_train, n_held = cfg["training_patients"], cfg["heldout_patients"]
    rng = np.random.default_rng([SEED, 1])
    anatomy = [r.anatomy(k) for k in range(n_train)]
    train = [(f"p{k:03d}_s{s}", f"p{k:03d}", r.scan(anatomy[k], rng)) for k in range(n_train) for s in range(2)]
    held = [(f"p{k:03d}_s0", f"p{k:03d}", r.scan(r.anatomy(k), rng)) for k in range(n_train, n_train + n_held)]
    c = audit.candidates([(i, p) for i, p, _ in train], [(i, p) for i, p, _ in held])
    vol = {i: v for i, _, v in train + held}
    log(f"cohort at 3 mm {r.shape}: {n_train} members (2 scans), {n_held} non-members")
    return Cohort(r, anatomy, train, held, c, np.stack([vol[i] for i in c.ids]))


def attack_result(co: Cohort, samples: np.ndarray, settings: dict) -> dict:
    """Every attack of the stage on one synthetic set (its membership.json): the image at 3 mm (MAE, RMSE), at
    6 mm for the embedding's."""
    cand = co.candidate_volumes
    distances = all_pairs_image_measures(cand, samples, ["mae", "rmse"], data_range=1.0, threads=2, backend="kernels")
    six = lambda x: np.stack([block_mean(v, 2).ravel() for v in x])  # noqa: E731
    cand6, samples6 = standardise(six(cand), six(samples), "length")
    ref6, _ = standardise(six([v for _, _, v in co.held]), six(samples), "length")
    embedded = {"candidates": cand6, "samples": samples6, "reference": ref6,
                "reference_patients": [p for _, p, _ in co.held]}
    return audit.audit(co.candidates, distances, embedded, settings, len(samples))[0]


def attack(co: Cohort, samples: np.ndarray, settings: dict) -> dict:
    """Each attack's AUC, interval and TPR at FPR 10 % on one synthetic set."""
    result = attack_result(co, samples, settings)
    return {name: {"auc": e["auc"], "auc_ci": e["auc_ci"], "tpr_at_10": e["tpr_at_fpr"][-1]["tpr"],
                   "fpr_used": e["tpr_at_fpr"][-1]["fpr_used"]} for name, e in result["attacks"].items()}


def compute(nifti: Path) -> dict:
    settings = yaml.safe_load((ROOT / "params.yaml").read_text())["membership"]
    settings = {**settings, "fpr": [0.1]}
    co = cohort(nifti)
    r, train, train_anat, n_train = co.recipe, co.train, co.train_anatomy, len(co.train_anatomy)
    fresh = iter(range(10_000, 100_000))  # new patients' indices, never a member's or a non-member's

    def new_patient(grng):
        return r.generated(r.anatomy(next(fresh)), grng)

    rows = []

    def run(kind: str, level: float, draw: int, samples: list[np.ndarray]) -> None:
        got = attack(co, np.stack(samples), settings)
        rows.append({"kind": kind, "level": level, "draw": draw, "attacks": got})
        log(f"{kind} {level:g} draw {draw}: " + ", ".join(f"{k} {e['auc']:.2f} [{e['auc_ci'][0]:.2f}, "
                                                           f"{e['auc_ci'][1]:.2f}]" for k, e in got.items()))

    for d in range(NO_LEAK_DRAWS):
        grng = np.random.default_rng([SEED, 2, d])
        run("none", 0.0, d, [new_patient(grng) for _ in range(N_SAMPLES)])
    for f in CROWDING:
        for d in range(DRAWS):
            grng = np.random.default_rng([SEED, 3, int(f * 100), d])
            who = grng.integers(n_train, size=N_SAMPLES)
            run("crowding", f, d, [r.generated(r.crowd(train_anat[k], f, grng), grng) for k in who])
    for q in COPIES:
        for d in range(DRAWS):
            grng = np.random.default_rng([SEED, 4, int(q * 100), d])
            n_copies = int(round(q * N_SAMPLES))
            copied = grng.choice(len(train), size=n_copies, replace=False)
            samples = [r.generated(train[k][2], grng) for k in copied]
            run("copies", q, d, samples + [new_patient(grng) for _ in range(N_SAMPLES - n_copies)])
    return {"grid_mm": r.sp[0], "members": n_train, "nonmembers": len(co.held), "samples": N_SAMPLES,
            "level": settings["bootstrap"]["level"], "rows": rows}


def _attacks(res: dict) -> list[str]:
    return list(res["rows"][0]["attacks"])


def markdown_none(res: dict) -> str:
    none = [r for r in res["rows"] if r["kind"] == "none"]
    names = _attacks(res)
    above = {a: sum(r["attacks"][a]["auc_ci"][0] > 0.5 for r in none) for a in names}
    below = {a: sum(r["attacks"][a]["auc_ci"][1] < 0.5 for r in none) for a in names}
    lines = ["| attack | AUC over the draws (min-max) | draws whose interval lies above 0.5 | below 0.5 |",
             "|---|---|---|---|"]
    for a in names:
        aucs = [r["attacks"][a]["auc"] for r in none]
        lines.append(f"| {a} | {np.mean(aucs):.2f} ({min(aucs):.2f}-{max(aucs):.2f}) | {above[a]} of {len(none)} | "
                     f"{below[a]} of {len(none)} |")
    any_above = sum(any(r["attacks"][a]["auc_ci"][0] > 0.5 for a in names) for r in none)
    lines.append(f"| any of the {len(names)} (family-wise) | | {any_above} of {len(none)} | |")
    return "\n".join(lines)


def markdown_graded(res: dict) -> str:
    names = _attacks(res)
    lines = ["| synthetic set | " + " | ".join(f"{a}: AUC (TPR at FPR 10 %); intervals above 0.5" for a in names)
             + " |", "|---|" + "---|" * len(names)]
    sets = [("none", 0.0, "no leak")] + [("crowding", f, f"crowding, {f:g} x a new patient's deformation")
                                         for f in CROWDING] + [("copies", q, f"{q:.0%} copies") for q in COPIES]
    for kind, level, label in sets:
        rows = [r for r in res["rows"] if r["kind"] == kind and r["level"] == level]
        cells = []
        for a in names:
            aucs = [r["attacks"][a]["auc"] for r in rows]
            tprs = [r["attacks"][a]["tpr_at_10"] for r in rows]
            hits = sum(r["attacks"][a]["auc_ci"][0] > 0.5 for r in rows)
            cells.append(f"{np.mean(aucs):.2f} ({np.mean(tprs):.2f}); {hits} of {len(rows)}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def doc(write: bool) -> int:
    bad = 0
    for key, render in (("none", markdown_none), ("graded", markdown_graded)):
        bad |= doc_table.doc(PAGE, RESULT, MARKERS[key], render, write, "bench/membership/real_anatomy.py doc --write")
    return bad


def main(argv=None) -> int:
    def options(c):
        c.add_argument("--nifti", type=Path, default=ROOT / "data" / "real_anatomy" / "nifti",
                       help="fetch.sh's nifti folder")

    return doc_table.cli(argv, __doc__.splitlines()[0], RESULT, lambda res: markdown_none(res) + "\n\n"
                         + markdown_graded(res), doc, options, lambda a: compute(a.nifti))


if __name__ == "__main__":
    raise SystemExit(main())
