"""One synthetic set's fidelity: every measure of :mod:`.measures` on the feature level's embeddings,
with a bootstrap CI and the real-vs-real floor (the held-out scans measured against the training
scans the same way: what a generator as good as a new patient's scan would score on this data).

Embeddings: the feature level's stored ones (relict.features). The Fréchet distance is defined on
globally pooled features: the mean of each channel over the pooling grid's cells (where the feature
map does not divide evenly into the grid, adaptive pooling's cells overlap and the mean of cells is
close to, not exactly, the global average; ``pooling`` says which). The nearest-neighbour measures
(PRDC, α/β, authenticity) and C_T compare what the feature level compares: the grid embeddings with
relict.features.scaling. On the demo, globally pooled embeddings found 4 of its 12 spiked replicas
unauthentic and C_T +0.8; the grid embeddings 8 of 12 (every replica rated 4 among them, no held-out
scan) and C_T -3.0.

Patients (issue 63): a scan's nearest real neighbours leave its own patient out, on both sides: the
training scans' nearest-real distance (authenticity, β-coverage) and k-NN radii (PRDC), and the held-out
scans' k-NN radii when they are the floor's samples. The training sets hold baselines and follow-ups, and
with the patient's rescan as the neighbour a blurred copy counted as authentic and β-recall sat at its
floor. Synthetic volumes are each their own patient; with one scan per patient nothing changes, to the
bit. C_T compares samples and held-out scans with the training scans, never a real scan with another of
its set: it has nothing to leave out.

Uncertainty: ``n`` bootstrap replicates resample the training and held-out scans by patient and the
synthetic volumes one by one. The nearest-neighbour measures (PRDC, α/β, authenticity) take each
replicate's distinct samples against every training scan (a repeated volume would be its own nearest
neighbour at distance 0; a copy whose source scan a replicate left out would look new). The
percentile intervals are re-centred on the value: a replicate holds fewer distinct volumes, and every
measure here moves with the sample's size (on a toy set the Fréchet distance's percentile interval
lay wholly above the value, the basic bootstrap's wholly below, coverage's wholly below). C_T is a
test statistic with its own null (Z): reported without a CI.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import measures as fm
from .radiomics import LABEL as FRD_LABEL
from .radiomics import dominant_features, frd, robust_frd
from .slices import LABEL as FD_2P5D_LABEL
from .slices import PLANES, fd_2p5d


@dataclass
class Embedded:
    """One split: ids, globally pooled rows ``x`` (the Fréchet distance's), the rows the feature level
    compares ``near`` (the nearest-neighbour measures'), each row's patient (synthetic: its id), and
    where FRD runs, each row's radiomic features (:mod:`.radiomics`), and where it runs per label class
    too, each row's features per class region (rows x classes x features; NaN: the class is absent); where
    the 2.5D FD runs, each row's slices' features per plane (:mod:`.slices`)."""

    ids: list[str]
    x: np.ndarray
    near: np.ndarray
    patients: list[str]
    radiomics: np.ndarray | None = None
    radiomics_names: list[str] | None = None
    radiomics_classes: np.ndarray | None = None
    class_names: list[str] | None = None
    slices: dict[str, list[np.ndarray]] | None = None


def pooled(embeddings: np.ndarray, meta: dict) -> tuple[np.ndarray, str]:
    """Globally pooled embeddings from the stored grid-pooled ones (channel-major: C x cells)."""
    grid = meta.get("grid_used")
    cells = int(np.prod(grid)) if grid else 1
    x = np.asarray(embeddings, np.float64)
    if cells == 1:
        return x, "global average (grid 1)"
    if x.shape[1] % cells:
        raise ValueError(f"embeddings of length {x.shape[1]} are not {cells} cells of channels (grid {grid})")
    return x.reshape(len(x), -1, cells).mean(axis=2), f"mean of the {'x'.join(map(str, grid))} grid's cells per channel"


# the values each measure can take (a re-centred interval is clipped to them)
BOUNDS = {"frechet_distance": (0.0, np.inf), "fd_2p5d": (0.0, np.inf), **{f"fd_2p5d_{p}": (0.0, np.inf) for p in PLANES},
          "density": (0.0, np.inf), "precision": (0.0, 1.0), "recall": (0.0, 1.0),
          "coverage": (0.0, 1.0), "authenticity": (0.0, 1.0), "alpha_precision": (-np.inf, 1.0),
          "beta_recall": (-np.inf, 1.0)}


def _distributions(real: Embedded, other: Embedded, s: dict, t=slice(None), o=slice(None)) -> dict:
    """The measures between the sets' distributions, of rows ``t`` and ``o``: the Fréchet distance, FRD
    where it runs, and FRD within each label class's region (``frd_<class>``) where that runs, each FRD
    also without the features constant over the training scans (``frd_robust``, ``frd_robust_<class>``:
    ``fidelity.frd_min_sd``)."""
    out = {"frechet_distance": fm.frechet_distance(real.x[t], other.x[o])}
    min_sd = float(s["frd_min_sd"])
    if real.radiomics is not None:
        out.update(_frd("frd", real.radiomics[t], other.radiomics[o]))
        out.update(_frd("frd_robust", real.radiomics[t], other.radiomics[o], min_sd))
    for k, name in enumerate(real.class_names or []):
        out.update(_frd(f"frd_{name}", real.radiomics_classes[t, k], other.radiomics_classes[o, k]))
        out.update(_frd(f"frd_robust_{name}", real.radiomics_classes[t, k], other.radiomics_classes[o, k], min_sd))
    if real.slices is not None:  # the 2.5D FD: a replicate's volumes take all their slices
        out.update(fd_2p5d(real.slices, other.slices, None if isinstance(t, slice) else t,
                           None if isinstance(o, slice) else o))
    return out


def _point(real: Embedded, other: Embedded, s: dict, d: dict, o=slice(None), whole: bool = True) -> dict:
    """Every measure of ``other`` (rows ``o``) against ``real`` (training), one number each; ``d``: the
    sets' :func:`~.measures.distances` (``rr``, ``ff``, ``rf``), ``other``'s rows in float64, the real
    side's :class:`~.measures.RealSet` (``real``) and each row's distance to its mean (``to_centre``),
    computed once, not per replicate;
    ``whole``: with the distributions' measures (a replicate resamples those itself)."""
    out = _distributions(real, other, s, o=o) if whole else {}
    g = d["other"][o]
    rf = d["rf"][:, o]
    k = int(s["prdc_k"])
    if min(len(real.near), len(g)) > k:
        try:  # leave-patient-out radii need k scans of other patients on each side
            out.update(fm.prdc(d["real"].x, g, k=k, rr=d["rr"], ff=d["ff"][o][:, o], rf=rf,
                               real_patients=real.patients, fake_patients=d["patients"][o]))
        except ValueError:
            pass
    ab = fm.alpha_beta_authenticity(d["real"], g, rf=rf, fake_to_centre=d["to_centre"][o])
    out.update({key: ab[key] for key in ("alpha_precision", "beta_recall", "authenticity")})
    return out


def _frd(key: str, reference: np.ndarray, other: np.ndarray, min_sd: float | None = None) -> dict:
    """``{key: FRD}`` (``min_sd``: the robust FRD's), or nothing where too few volumes have features
    (PyRadiomics cannot describe a constant volume or a class a volume lacks; FRD leaves such volumes out,
    and needs two in each set)."""
    try:
        return {key: frd(reference, other) if min_sd is None else robust_frd(reference, other, min_sd)["value"]}
    except ValueError:
        return {}


def _groups(patients: Sequence[str]) -> list[np.ndarray]:
    """Row indices of each patient's scans, patients in sorted order."""
    rows: dict[str, list[int]] = {}
    for i, p in enumerate(patients):
        rows.setdefault(p, []).append(i)
    return [np.array(rows[p]) for p in sorted(rows)]


def _by_patient(rng: np.random.Generator, groups: list[np.ndarray]) -> np.ndarray:
    """Row indices of a patient-level bootstrap replicate (every scan of each drawn patient)."""
    drawn = rng.choice(len(groups), len(groups), replace=True)
    return np.concatenate([groups[j] for j in drawn])


def _replicate(train: Embedded, other: Embedded, s: dict, d: dict, groups: tuple, rng: np.random.Generator) -> dict:
    t = _by_patient(rng, groups[0])
    o = _by_patient(rng, groups[1])
    out = _distributions(train, other, s, t, o)
    # the nearest-neighbour measures: the replicate's distinct samples against the whole training
    # set (a copy whose source scan a replicate left out would look new)
    o = np.unique(o)
    if len(o) >= 2:
        out.update(_point(train, other, s, d, o, whole=False))
    return out


def with_ci(train: Embedded, other: Embedded, s: dict, seed: int, rr: np.ndarray | None = None) -> dict:
    """``{measure: {"value", "ci": [lo, hi], "n_replicates"}}`` of ``other`` against ``train``
    (``rr``: the training scans' distances, where the caller has them)."""
    d = {"rr": fm.distances(train.near, train.near) if rr is None else rr,
         "ff": fm.distances(other.near, other.near), "rf": fm.distances(train.near, other.near),
         "other": np.asarray(other.near, np.float64)}
    # what the real side and each sample's distance to its mean give every replicate (measures.RealSet)
    d["real"] = fm.real_set(train.near, int(s["alpha_steps"]), rr=d["rr"], patients=train.patients)
    d["patients"] = np.asarray([str(p) for p in other.patients])
    d["to_centre"] = d["real"].to_centre(d["other"])
    point = _point(train, other, s, d)
    boot = s["bootstrap"]
    rng = np.random.default_rng(seed)
    groups = (_groups(train.patients), _groups(other.patients))
    reps = [_replicate(train, other, s, d, groups, rng) for _ in range(int(boot["n"]))]
    tail = (1 - float(boot["level"])) / 2
    out = {}
    for key, value in point.items():
        vals = np.array([r[key] for r in reps if key in r], np.float64)
        ci = [float(np.quantile(vals, tail)), float(np.quantile(vals, 1 - tail))] if len(vals) else None
        if ci:
            # a replicate holds fewer distinct volumes than the sets, and every measure here moves
            # with the sample's size (the Fréchet distance up, recall and coverage down): the
            # percentile interval would sit beside the value. Re-centred on it (the replicates'
            # median shift taken out), it keeps their spread.
            shift = float(np.median(vals)) - float(value)
            lo, hi = BOUNDS.get(key, (-np.inf, np.inf))
            ci = [float(np.clip(ci[0] - shift, lo, hi)), float(np.clip(ci[1] - shift, lo, hi))]
        out[key] = {"value": float(value), "ci": ci, "n_replicates": int(len(vals))}
    return out


def per_volume(train: Embedded, synthetic: Embedded, s: dict) -> list[dict]:
    """Each synthetic volume: authentic or not (Alaa et al.), its nearest training volume and patient,
    the distance, and that training volume's distance to its nearest scan of another patient (what it had
    to exceed; leave-patient-out, :func:`.measures.real_set`)."""
    rf = fm.distances(train.near, synthetic.near)
    real = fm.real_set(train.near, int(s["alpha_steps"]), rr=fm.distances(train.near, train.near),
                       patients=train.patients)
    ab = fm.alpha_beta_authenticity(real, synthetic.near, rf=rf)
    d = rf.T
    real_nn = real.nn
    rows = []
    for j, sid in enumerate(synthetic.ids):
        i = ab["nearest_real"][j]
        rows.append({"id": sid, "authentic": bool(ab["authentic"][j]), "nearest_training_id": train.ids[i],
                     "nearest_training_patient": train.patients[i], "distance": float(d[j, i]),
                     "training_nearest_other_patient_distance": float(real_nn[i])})
    return rows


def audit(train: Embedded, heldout: Embedded, synthetic: Embedded, settings: dict, pooling: str,
          scaling: str) -> dict:
    """The set's fidelity.json: each measure for the synthetic set and for the held-out scans (the
    floor), with CIs; C_T for the synthetic set (held-out scans as Meehan et al.'s test sample)."""
    s = settings
    seed = int(s["bootstrap"]["seed"])
    ct = s["c_t"]
    rr = fm.distances(train.near, train.near)  # shared by the synthetic set's numbers and the floor's
    result = fm.c_t(train.near, heldout.near, synthetic.near, n_cells=int(ct["cells"]), min_generated=int(ct["min_generated"]),
                    pca_components=int(ct["pca_components"]), seed=int(ct["seed"]))
    return {"n_training": len(train.ids), "n_heldout": len(heldout.ids), "n_synthetic": len(synthetic.ids),
            "embedding_dim": int(train.x.shape[1]), "pooling": pooling,
            "nearest_neighbour_embeddings": f"the feature level's ({train.near.shape[1]} features, scaling {scaling})",
            "frd": _frd_info(train, heldout, synthetic, s),
            "fd_2p5d": ({"definition": FD_2P5D_LABEL,
                         "slices": {name: {p: int(sum(len(r) for r in e.slices[p])) for p in PLANES}
                                    for name, e in (("training", train), ("held-out", heldout), ("synthetic", synthetic))}}
                        if train.slices is not None else None),
            "synthetic": with_ci(train, synthetic, s, seed, rr),
            "floor": with_ci(train, heldout, s, seed + 1, rr),
            "c_t": {"value": result.c_t, "n_cells": result.n_cells, "tau": result.tau, "copy_z": float(ct["copy_z"]),
                    "power": fm.c_t_power(len(heldout.ids), len(synthetic.ids), result.n_cells,
                                          float(ct["power_copy_share"]), float(ct["copy_z"])),
                    "min_power": float(ct["min_power"]),
                    "copying_cells": [c["cell"] for c in result.cells if c["counted"] and c["z_u"] is not None
                                      and c["z_u"] < -float(ct["copy_z"])],
                    "cells": result.cells}}


def _frd_info(train: Embedded, heldout: Embedded, synthetic: Embedded, s: dict) -> dict | None:
    """FRD's definition, the features that drive it for the samples and for the floor, and the robust
    FRD's: its SD floor, the features it keeps and leaves out, its largest feature's share."""
    if train.radiomics is None:
        return None
    names = train.radiomics_names or [f"feature{k}" for k in range(train.radiomics.shape[1])]
    sets = (("training", train), ("held-out", heldout), ("synthetic", synthetic))
    out = {"features": int(train.radiomics.shape[1]), "definition": FRD_LABEL,
           "volumes_without_features": {name: int(np.isnan(s.radiomics).any(axis=1).sum()) for name, s in sets}}
    if train.class_names:  # per class: the label maps the segmentation level compares, each class's region the mask
        out["classes"] = {c: {name: int((~np.isnan(s.radiomics_classes[:, k]).any(axis=1)).sum()) for name, s in sets}
                          for k, c in enumerate(train.class_names)}
        out["classes_definition"] = ("FRD within each label class's region (label value k + 1 for class k) of the "
                                     "label maps the segmentation level compares, as PyRadiomics' mask; the same "
                                     "settings; volumes without the class (or too little of it at 2 mm) left out; "
                                     "'classes' counts the volumes with features")
    for key, other in (("dominant", synthetic), ("floor_dominant", heldout)):
        try:
            out[key] = dominant_features(train.radiomics, other.radiomics, names)
        except ValueError as e:  # too few volumes with features: FRD is left out (_frd)
            out[key], out["not_computed"] = None, str(e)
    min_sd = float(s["frd_min_sd"])
    out["robust"] = {"min_sd": min_sd, "definition": (
        f"FRD over the features whose SD over the training scans is at least {min_sd:g} (fidelity.frd_min_sd); "
        "the rest as FRD v1")}
    for key, other in (("synthetic", synthetic), ("floor", heldout)):
        try:
            r = robust_frd(train.radiomics, other.radiomics, min_sd, names)
            out["robust"][key] = {k: r[k] for k in ("features", "left_out", "largest_share", "largest_feature")}
        except ValueError as e:
            out["robust"][key] = {"not_computed": str(e)}
    return out


def summary_lines(f: dict) -> list[str]:
    """The verdict's fidelity lines: each measure, its CI, and the held-out scans' floor."""
    lines = [f"  fidelity ({f['n_synthetic']} synthetic, {f['n_heldout']} held-out against {f['n_training']} "
             f"training embeddings; the floor: held-out scans measured the same way)"]
    classes = [(f"frd_{c}", f"FRD within {c}", "lower") for c in (f.get("frd") or {}).get("classes", {})]
    robust = (f.get("frd") or {}).get("robust") or {}
    robust_label = f"FRD without features constant over the training scans (SD < {robust.get('min_sd', 0):g})"
    for key, label, better in (("frechet_distance", "Fréchet distance", "lower"),
                               ("fd_2p5d", "2.5D FD (RadImageNet ResNet-50, mean of 3 planes)", "lower"),
                               ("frd", "FRD (radiomics)", "lower"), ("frd_robust", robust_label, "lower"),
                               *classes, ("precision", "precision", "higher"),
                               ("recall", "recall", "higher"), ("density", "density", "higher"),
                               ("coverage", "coverage", "higher"), ("alpha_precision", "α-precision", "higher"),
                               ("beta_recall", "β-recall", "higher"), ("authenticity", "authenticity", "higher")):
        v, floor = f["synthetic"].get(key), f["floor"].get(key)
        if key.startswith("frd_") and key != "frd_robust" and (v is None or floor is None):  # a class too few volumes hold
            held = f["frd"]["classes"][key[4:]]
            lines.append(f"    {label}: not computed (held by {held['synthetic']} synthetic and {held['held-out']} "
                         "held-out volume(s); FRD needs 2 in each set)")
        if v is None or floor is None:
            continue
        ci = f" [{v['ci'][0]:.3g}, {v['ci'][1]:.3g}]" if v.get("ci") else ""
        fci = f" [{floor['ci'][0]:.3g}, {floor['ci'][1]:.3g}]" if floor.get("ci") else ""
        lines.append(f"    {label}: {v['value']:.3g}{ci}; held-out floor {floor['value']:.3g}{fci} ({better} is better)")
        top = (f.get("frd") or {}).get("dominant") if key == "frd" else None
        if top and top[0]["share"] is not None and top[0]["share"] > 0.5:
            lines.append(f"      {top[0]['share']:.0%} of it from one feature, {top[0]['feature']} (SD "
                         f"{top[0]['reference_sd']:.2g} over the training scans: FRD's z-scoring by the training "
                         "scans magnifies it; fidelity.json lists the next)")
        kept = (robust.get("synthetic") or {}) if key == "frd_robust" else {}
        if kept.get("features") and kept.get("largest_share") is not None:
            lines.append(f"      {kept['features']} features kept, {kept['left_out']} left out; the largest kept "
                         f"feature gives {kept['largest_share']:.0%} of it ({kept['largest_feature']})")
    c = f["c_t"]
    if c["value"] is not None:
        power = c.get("power")
        weak = power is not None and power["probability"] < c.get("min_power", 0.0)
        if c["value"] < -c["copy_z"]:
            verdict = f"copying (below -{c['copy_z']:g})"
        elif weak:  # a test that could not have seen copying does not say there is none
            verdict = "cannot tell at this size"
        else:
            verdict = "no sign of copying at the model level"
        lines.append(f"    C_T (Meehan et al.): {c['value']:.3g} over {c['n_cells']} cell(s): {verdict}"
                     + (f"; copying cells {c['copying_cells']}" if c["copying_cells"] else ""))
        if power is not None:
            lines.append(f"      at {power['n_synthetic']} samples and {power['n_heldout']} held-out scans, C_T detects "
                         f"{power['copy_share']:.0%} copying with probability {power['probability']:.2f} (closed form, "
                         "docs/fidelity.md)" + (f"; below {c['min_power']:g}" if weak else ""))
    return lines
