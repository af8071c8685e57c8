"""The real-anatomy cohort at several generator blurs: calibrated calls against the matched null
(the held-out scans degraded like each set's samples) and against the held-out scans as they are.

Why (issue 43): a generator's samples are smoother than scans; calls calibrated on sharp scans
took 11 of 28 new patients at blur 0.6 voxel (the workflow's real-anatomy audit). The cohorts
are built with the same recipe and seeds and differ in the samples' blur. Each set goes
through the workflow's own library functions: the texture and the degradation fit
(``relict.texture.compare_sets``, ``matched_degradation``, ``degrade``, with the workflow's
seeds), the plain image measures (``all_pairs_image_measures``: MAE, RMSE, SSIM, NCC), RELICT's
ratio with n = ``n_closest``, the calibration per measure and the combined call
(``relict.calibration``) at the workflow's rate. The aligned and feature levels are left out:
their jobs take about half an hour per set on 2 cores; the workflow's own run at blur 0.6, with
both, is ``run.sh audit``.

Usage:
  blur_table.py compute --set COHORT ... [--n-closest 50] [--rate 0.05] --out results/bench/real_anatomy_blur_cohort.json
  blur_table.py doc [--write]       docs/matched_null.md's table from the committed JSON (tests check it)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import synthaudit  # noqa: F401  first: portable numerics before numpy loads
import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "bench/real_anatomy")]
import doc_table  # noqa: E402  the docs page's table from the JSON
from fidelity_table import load_folder  # noqa: E402

from synthaudit.io import read_tsv  # noqa: E402

RESULT = "results/bench/real_anatomy_blur_cohort.json"
PAGE = "docs/matched_null.md"
MARKERS = ("<!-- blur_table: bench/real_anatomy/blur_table.py doc --write -->", "<!-- /blur_table -->")
MEASURES = ("mae", "rmse", "ssim", "ncc")
AUGMENTED = ("flipped", "shifted", "rotated")
KINDS = ("exact", "deformed") + AUGMENTED


def distances(queries: np.ndarray, training: np.ndarray, data_range: float) -> dict[str, np.ndarray]:
    """Every plain image measure as a distance (similarities through the registry, as the workflow)."""
    from synthaudit import registry
    from synthaudit.relict.image_measures import all_pairs_image_measures

    raw = all_pairs_image_measures(queries, training, list(MEASURES), data_range=data_range, device="cpu")
    return {m: registry.to_distance(m, raw[m]) for m in MEASURES}


def calls(syn: dict, held: dict, held_patients: list[str], training_patients: list[str], training_ids: list[str],
          n: int, rate: float) -> dict:
    """Per measure and combined: the synthetic volumes' calls against this null, and the held-out
    scans' own (leave-patient-out) calls, exactly as relict_ratio and relict_copies make them."""
    from synthaudit.relict import calibration
    from synthaudit.relict.ratio import distance_ratio

    scores, null_scores, per, null = {}, {}, {}, None
    for m in MEASURES:
        null = calibration.heldout_null(held[m], [str(i) for i in range(len(held_patients))], held_patients,
                                        training_ids, training_patients, n)[0]
        scores[m] = distance_ratio(syn[m], n, warn=lambda _: None).ratio
        per[m] = calibration.calibrate(scores[m], null, rate)["called"]
        null_scores[m] = null.scores
    both = calibration.combined(scores, null_scores, null, rate)
    held_called = calibration.combined_heldout_check(null_scores, null, rate)["called"]
    return {"combined": both["called"], "per_measure": per, "heldout_called": int(held_called.sum())}


def tally(called: np.ndarray, kinds: list[str]) -> dict:
    kinds = np.asarray(kinds)
    out = {k: {"n": int((kinds == k).sum()), "called": int(called[kinds == k].sum())} for k in KINDS + ("new",)}
    aug, new, copy = np.isin(kinds, AUGMENTED), kinds == "new", kinds != "new"
    out["augmented_sensitivity"] = float(called[aug].mean()) if aug.any() else None
    out["sensitivity"] = float(called[copy].mean()) if copy.any() else None
    out["specificity"] = float(1 - called[new].mean()) if new.any() else None
    return out


def compute(cohorts: list[Path], n: int, rate: float, seed: int, percentiles: list[float]) -> dict:
    """Each cohort on its own (its training, held-out and synthetic scans): build_cohort.py is seeded
    but not bit-exact between builds (one head's registration moved a voxel by 8 % of the range), so
    the training side is not shared between sets, only the recipe."""
    from synthaudit.relict import texture

    t0 = time.perf_counter()
    out = {"n_closest": n, "rate": rate, "matched_seed": seed, "measures": list(MEASURES), "sets": {}}
    for cohort in cohorts:
        train_ids, training, _ = load_folder(cohort / "training")
        held_ids, heldout, _ = load_folder(cohort / "heldout")
        patient = lambda i: i.split("_")[0]  # noqa: E731 - the cohort's ids: <patient>_s<k>
        train_patients, held_patients = [patient(i) for i in train_ids], [patient(i) for i in held_ids]
        data_range = float(training.max() - training.min())
        cfg = json.loads((cohort / "cohort.json").read_text())["config"]
        truth = {r["synthetic_id"]: r for r in read_tsv(cohort / "truth.tsv")}
        syn_ids, synthetic, _ = load_folder(cohort / "synthetic")
        kinds = [truth[s]["kind"] for s in syn_ids]
        summary = texture.compare_sets([texture.volume_texture(v) for v in synthetic],
                                       [texture.volume_texture(v) for v in heldout], texture.blur_curve(list(heldout)),
                                       percentiles)
        fit = texture.matched_degradation(summary, list(heldout), seed)
        matched = np.stack([texture.degrade(v, fit["blur_vox"], fit["noise_sd"], seed + i)
                            for i, v in enumerate(heldout)])
        syn_d = distances(synthetic, training, data_range)
        res = {"as_they_are": calls(syn_d, distances(heldout, training, data_range), held_patients, train_patients,
                                    train_ids, n, rate),
               "matched": calls(syn_d, distances(matched, training, data_range), held_patients, train_patients,
                                train_ids, n, rate)}
        out["n_training"], out["n_heldout"] = len(train_ids), len(held_ids)
        out["sets"][cohort.name] = {
            "generator_blur_vox": cfg["generator_blur_vox"], "generator_noise": cfg["generator_noise"],
            "fitted": {k: fit[k] for k in ("blur_vox", "noise_sd")}, "fit_reason": fit["reason"],
            "differs": summary["differs"],
            **{null: {"combined": tally(r["combined"], kinds), "heldout_called": r["heldout_called"],
                      "per_measure": {m: tally(r["per_measure"][m], kinds) for m in MEASURES}}
               for null, r in res.items()}}
        print(f"{cohort.name}: fitted blur {fit['blur_vox']:.2f}, noise {fit['noise_sd']:.3f}; new patients called "
              f"{out['sets'][cohort.name]['as_they_are']['combined']['new']['called']} (as they are), "
              f"{out['sets'][cohort.name]['matched']['combined']['new']['called']} (matched); "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
    return out


def markdown(res: dict) -> str:
    lines = ["| generator blur (voxel) | fitted blur / added noise | null | exact | deformed | flipped | shifted | "
             "rotated | augmented found | new patients called | specificity | held-out called (left out) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in sorted(res["sets"].values(), key=lambda s: s["generator_blur_vox"]):
        for null in ("as_they_are", "matched"):
            c = s[null]["combined"]
            lines.append(
                f"| {s['generator_blur_vox']} | {s['fitted']['blur_vox']:.2f} / {s['fitted']['noise_sd']:.3f} | "
                f"{'matched' if null == 'matched' else 'as they are'} | "
                + " | ".join(f"{c[k]['called']}/{c[k]['n']}" for k in KINDS)
                + f" | {c['augmented_sensitivity']:.2f} | {c['new']['called']}/{c['new']['n']} | "
                  f"{c['specificity']:.3f} | {s[null]['heldout_called']}/{res['n_heldout']} |")
    measures = res.get("measures") or []
    if measures:  # per measure: new patients called against each null
        lines += ["", "| generator blur (voxel) | " + " | ".join(f"{m}: new called, as they are → matched"
                                                               for m in measures) + " |",
                  "|---|" + "---|" * len(measures)]
        for s in sorted(res["sets"].values(), key=lambda s: s["generator_blur_vox"]):
            lines.append(f"| {s['generator_blur_vox']} | " + " | ".join(
                f"{s['as_they_are']['per_measure'][m]['new']['called']} → {s['matched']['per_measure'][m]['new']['called']}"
                for m in measures) + " |")
    return "\n".join(lines) + "\n"


def page_table(res: dict) -> str:
    """The page's table: :func:`markdown` without its last line break (doc_table adds one)."""
    return markdown(res).rstrip("\n")


def doc(write: bool) -> int:
    return doc_table.doc(PAGE, RESULT, MARKERS, page_table, write, "bench/real_anatomy/blur_table.py doc --write")


def main(argv=None) -> int:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())["relict"]

    def options(c):
        c.add_argument("--set", action="append", default=[], type=Path, help="a cohort folder (build_cohort.py)")
        c.add_argument("--n-closest", type=int, help="default: what `synthaudit init` writes for the cohort "
                       "(RELICT's 50, at most the training set)")
        c.add_argument("--rate", type=float, default=params["calibration"]["rate"])
        c.add_argument("--seed", type=int, default=params["calibration"]["matched_seed"])

    def run(args) -> dict:
        from synthaudit.workspace import RELICT_N

        n = args.n_closest or min(RELICT_N, len(list((args.set[0] / "training").glob("*.nii.gz"))))
        res = compute([c.resolve() for c in args.set], n, args.rate, args.seed,
                      params["calibration"]["texture_range_percentiles"])
        Path(args.out).with_suffix(".md").write_text(markdown(res))  # the table beside the JSON
        return res

    return doc_table.cli(argv, __doc__.splitlines()[0], RESULT, page_table, doc, options, run)


if __name__ == "__main__":
    raise SystemExit(main())
