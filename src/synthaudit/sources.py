"""Where each dataset's volumes come from: the embedded demo, a manifest, or nnU-Net raw.

Why: Snakemake needs every scan id when it builds the DAG (no checkpoints), so the
list of training, held-out and synthetic volumes is computed here from params and
from the users' manifests/folders, with every problem reported against the file and
line it comes from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .config import default_of
from .io import read_tsv

ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
ROLES = ("train", "heldout")
NIFTI_SUFFIXES = (".nii.gz", ".nii")
MIN_TRAINING = 2  # the distance ratio needs a closest and at least one next training volume


class SourceError(ValueError):
    """A dataset's inputs are inconsistent; the message names the file."""


@dataclass
class Scan:
    """A real scan: ``image``/``label`` are the raw input paths (None: made by the workflow)."""

    id: str
    patient_id: str
    role: str
    image: str | None = None
    label: str | None = None
    session: str = ""


@dataclass
class SyntheticVolume:
    id: str
    image: str | None = None
    label: str | None = None


@dataclass
class DatasetPlan:
    name: str
    scans: list[Scan]
    synthetic: list[SyntheticVolume]
    spiked: list[dict] = field(default_factory=list)

    @property
    def train(self) -> list[Scan]:
        return [s for s in self.scans if s.role == "train"]

    @property
    def heldout(self) -> list[Scan]:
        return [s for s in self.scans if s.role == "heldout"]

    def scan(self, scan_id: str) -> Scan:
        for s in self.scans:
            if s.id == scan_id:
                return s
        raise KeyError(f"dataset {self.name}: no scan {scan_id!r}")

    def synthetic_volume(self, syn_id: str) -> SyntheticVolume:
        for s in self.synthetic:
            if s.id == syn_id:
                return s
        raise KeyError(f"dataset {self.name}: no synthetic volume {syn_id!r}")


def strip_nifti(name: str) -> str:
    for suf in NIFTI_SUFFIXES:
        if name.endswith(suf):
            return name[: -len(suf)]
    return name


def _resolve(base: Path, p: str) -> str:
    path = Path(p)
    return str(path if path.is_absolute() else (base / path))


def _check_id(value: str, where: str) -> str:
    if not ID_PATTERN.match(value):
        raise SourceError(
            f"{where}: id {value!r} may only contain letters, digits, '.', '_' and '-' "
            "and must start with a letter or digit"
        )
    return value


def _check_unique(ids: list[str], where: str) -> None:
    seen, dup = set(), []
    for i in ids:
        if i in seen:
            dup.append(i)
        seen.add(i)
    if dup:
        raise SourceError(f"{where}: duplicate id(s) {sorted(set(dup))}")
    check_case_collisions(ids, where)


def check_case_collisions(ids, where: str) -> None:
    """Refuse ids that differ only in case: every id becomes a file name under results/, and on
    the case-insensitive file systems of macOS and Windows (and some cluster mounts) the two
    files would be one, silently."""
    by_folded: dict[str, list[str]] = {}
    for i in ids:
        by_folded.setdefault(i.casefold(), []).append(i)
    clashes = [sorted(set(v)) for v in by_folded.values() if len(set(v)) > 1]
    if clashes:
        shown = "; ".join(" and ".join(c) for c in clashes[:5])
        raise SourceError(f"{where}: ids differ only in case ({shown}): their result files would collide on a "
                          "case-insensitive file system; rename one of each")


def read_manifest(path: str | Path) -> list[Scan]:
    """Read a training manifest TSV: columns ``id, image`` and optional ``label, patient_id, role``.

    Paths are relative to the manifest's folder. ``role`` is ``train`` (default) or
    ``heldout``; rows with role ``synthetic`` are skipped here (see read_synthetic_manifest).
    A missing patient_id means one patient per scan.
    """
    path = Path(path)
    if not path.is_file():
        raise SourceError(f"{path}: manifest not found")
    rows = read_tsv(path)
    if not rows:
        raise SourceError(f"{path}: manifest has no rows")
    for col in ("id", "image"):
        if col not in rows[0]:
            raise SourceError(f"{path}: missing column {col!r} (columns: {list(rows[0])})")
    base = path.parent
    scans = []
    for line, row in enumerate(rows, start=2):
        where = f"{path}:{line}"
        role = (row.get("role") or "train").strip()
        if role == "synthetic":
            continue
        if role not in ROLES:
            raise SourceError(f"{where}: role {role!r} is not one of {list(ROLES) + ['synthetic']}")
        sid = _check_id(row["id"].strip(), where)
        image = _resolve(base, row["image"].strip())
        if not Path(image).is_file():
            raise SourceError(f"{where}: image {image} not found")
        label = (row.get("label") or "").strip()
        label = _resolve(base, label) if label and label != "NA" else None
        if label and not Path(label).is_file():
            raise SourceError(f"{where}: label {label} not found")
        pid = (row.get("patient_id") or "").strip() or sid
        scans.append(Scan(id=sid, patient_id=_check_id(pid, where), role=role, image=image, label=label))
    _check_unique([s.id for s in scans], str(path))
    if not any(s.role == "train" for s in scans):
        raise SourceError(f"{path}: no scan has role 'train'")
    return scans


@dataclass
class NnunetDataset:
    """What an nnU-Net raw dataset's ``dataset.json`` says that an audit needs (all optional there)."""

    channels: dict[str, str]
    classes: list[str] | None  # names of the label values 1, 2, ... (None: no names, or region-based)
    note: str = ""  # why there are no class names, where dataset.json has labels


NNUNET_CHANNEL = re.compile(r"^(?P<case>.+)_(?P<channel>\d{4})$")


def nnunet_dataset(folder: str | Path) -> NnunetDataset:
    """The channels and class names of an nnU-Net raw dataset (v2 ``dataset.json``: ``channel_names``,
    ``labels`` name -> value, ``file_ending``; v1: ``modality``, ``labels`` value -> name).

    Refuses, naming the file, what an audit of one image per case cannot read: more than one
    channel (an audit compares one volume per scan; which channel would be a guess) and image
    files other than NIfTI. Region-based labels (a name -> list of values, nnU-Net's BraTS style)
    give no class names: the values are still integers, named class1, class2, ... by the caller.
    """
    import json

    folder = Path(folder)
    path = folder / "dataset.json"
    meta = {}
    if path.is_file():
        try:
            meta = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as e:
            raise SourceError(f"{path}: not readable JSON ({e})") from None
        if not isinstance(meta, dict):
            raise SourceError(f"{path}: not an nnU-Net dataset.json (a JSON object with channel_names, labels)")
    channels = {str(k): str(v) for k, v in (meta.get("channel_names") or meta.get("modality") or {}).items()}
    found = sorted({m["channel"] for d in ("imagesTr", "imagesTs") if (folder / d).is_dir()
                    for p in (folder / d).iterdir() if (m := NNUNET_CHANNEL.match(strip_nifti(p.name)))})
    if len(channels) > 1 or len(found) > 1:
        named = ", ".join(f"{k} ({v})" for k, v in sorted(channels.items())) or ", ".join(f"_{c}" for c in found)
        raise SourceError(f"{folder}: an nnU-Net dataset of {max(len(channels), len(found))} channels ({named}); "
                          "an audit compares one image per scan: give one channel as a folder of NIfTI "
                          "(--training) or a manifest")
    ending = meta.get("file_ending", ".nii.gz")
    if ending not in NIFTI_SUFFIXES:
        raise SourceError(f"{path}: file_ending {ending!r}; synthaudit reads NIfTI (.nii.gz, .nii): convert the "
                          "images (e.g. SimpleITK) or give a manifest")
    labels = meta.get("labels") or {}
    classes, note = None, ""
    if labels and all(str(k).isdigit() for k in labels):  # v1: {"0": "background", "1": "liver"}
        labels = {str(v): int(k) for k, v in labels.items()}
    if any(isinstance(v, (list, tuple)) for v in labels.values()):
        note = f"{path}: region-based labels ({', '.join(labels)}): the label values are named class1, class2, ..."
    elif labels:
        try:
            by_value = {int(v): str(k) for k, v in labels.items() if int(v) > 0}
        except (TypeError, ValueError):
            raise SourceError(f"{path}: labels must map names to integer values, got {labels}") from None
        if by_value:
            classes = [by_value.get(v, f"class{v}") for v in range(1, max(by_value) + 1)]
    return NnunetDataset(channels=channels, classes=classes, note=note)


def read_nnunet(folder: str | Path) -> list[Scan]:
    """nnU-Net v2 raw layout: ``imagesTr/{case}_0000.nii.gz`` (+ ``labelsTr/{case}.nii.gz``).

    Training cases come from imagesTr; cases in imagesTs (if present) are held out (labels from
    labelsTs where present). Single-channel datasets only (:func:`nnunet_dataset` refuses others).
    Each case is its own patient (nnU-Net has no patient ids).
    """
    folder = Path(folder)
    images_tr = folder / "imagesTr"
    if not images_tr.is_dir():
        raise SourceError(f"{folder}: not an nnU-Net raw dataset (no imagesTr/ folder)")
    nnunet_dataset(folder)
    scans = []
    for sub, role in (("imagesTr", "train"), ("imagesTs", "heldout")):
        d = folder / sub
        if not d.is_dir():
            continue
        for img in sorted(d.iterdir()):
            name = strip_nifti(img.name)
            if name == img.name or not name.endswith("_0000"):
                continue
            case = _check_id(name[: -len("_0000")], str(img))
            label = folder / sub.replace("images", "labels") / f"{case}{img.name[len(name):]}"
            scans.append(
                Scan(id=case, patient_id=case, role=role, image=str(img),
                     label=str(label) if label.is_file() else None)
            )
    if not any(s.role == "train" for s in scans):
        raise SourceError(f"{images_tr}: no '*_0000.nii.gz' images found")
    _check_unique([s.id for s in scans], str(folder))
    return scans


def read_synthetic_folder(folder: str | Path, pattern: str = "*.nii*") -> list[SyntheticVolume]:
    """Every NIfTI file in a folder is a synthetic volume; the file name is its id."""
    folder = Path(folder)
    if not folder.is_dir():
        raise SourceError(f"{folder}: synthetic folder not found")
    files = sorted(p for p in folder.glob(pattern) if p.is_file() and strip_nifti(p.name) != p.name)
    if not files:
        raise SourceError(f"{folder}: no NIfTI files matching {pattern!r}")
    vols = [SyntheticVolume(id=_check_id(strip_nifti(p.name), str(p)), image=str(p)) for p in files]
    _check_unique([v.id for v in vols], str(folder))
    return vols


def read_synthetic_manifest(path: str | Path) -> list[SyntheticVolume]:
    """A TSV with ``id, image`` (optional ``label``); with a ``role`` column only role=synthetic rows."""
    path = Path(path)
    if not path.is_file():
        raise SourceError(f"{path}: synthetic manifest not found")
    rows = read_tsv(path)
    if rows and "role" in rows[0]:
        rows = [r for r in rows if r["role"].strip() == "synthetic"]
    if not rows:
        raise SourceError(f"{path}: no synthetic volumes listed")
    base, vols = path.parent, []
    for line, row in enumerate(rows, start=2):
        where = f"{path}:{line}"
        image = _resolve(base, row["image"].strip())
        if not Path(image).is_file():
            raise SourceError(f"{where}: image {image} not found")
        label = (row.get("label") or "").strip()
        vols.append(SyntheticVolume(id=_check_id(row["id"].strip(), where), image=image,
                                    label=_resolve(base, label) if label and label != "NA" else None))
    _check_unique([v.id for v in vols], str(path))
    return vols


def spiked_plan(cfg: dict, train_ids: list[str], heldout_ids: list[str]) -> list[dict]:
    """Which synthetic volume is made from which real scan, at which strength.

    Replicas: training scans (without replacement) perturbed at the graded levels,
    cycled in order; non-replicas: held-out scans; with ``augmented``, further replicas
    of other training scans that also went through a training-time augmentation (their
    ``augmentation`` names it; ``none`` for the rest). Ids are shuffled so that the id
    order says nothing about the truth. Pure and deterministic (seed from params).
    """
    n_rep, n_non = cfg["n_replicas"], cfg["n_nonreplicas"]
    if n_rep > len(train_ids):
        raise SourceError(
            f"synthetic.spiked.n_replicas={n_rep} exceeds the {len(train_ids)} training scans"
        )
    if n_non > len(heldout_ids):
        raise SourceError(
            f"synthetic.spiked.n_nonreplicas={n_non} exceeds the {len(heldout_ids)} held-out scans; "
            "hold out more patients or lower n_nonreplicas"
        )
    if n_rep + n_non == 0:
        raise SourceError("synthetic.spiked: n_replicas + n_nonreplicas must be > 0")
    aug = cfg.get("augmented")
    n_aug = aug["n_per_kind"] * len(aug["kinds"]) if aug else 0
    if n_rep + n_aug > len(train_ids):
        raise SourceError(
            f"synthetic.spiked: n_replicas={n_rep} plus {n_aug} augmented replicas exceed the "
            f"{len(train_ids)} training scans (each replica has its own source scan)")
    rng = np.random.default_rng(cfg["seed"])
    sources = [str(x) for x in rng.choice(sorted(train_ids), size=n_rep, replace=False)]
    levels = cfg["levels"]
    items = [
        {"kind": "replica", "source_id": src, "strength": float(levels[i % len(levels)]["strength"]),
         "likert": int(levels[i % len(levels)]["likert"])}
        for i, src in enumerate(sources)
    ]
    held = [str(x) for x in rng.choice(sorted(heldout_ids), size=n_non, replace=False)]
    items += [{"kind": "heldout", "source_id": h, "strength": 0.0, "likert": 1} for h in held]
    if aug:  # drawn after the rest, so adding them leaves the other volumes' plan unchanged
        for it in items:
            it["augmentation"] = "none"
        rest = sorted(set(train_ids) - set(sources))
        picked = [str(x) for x in rng.choice(rest, size=n_aug, replace=False)]
        for i, src in enumerate(picked):
            items.append({"kind": "replica", "source_id": src, "strength": float(aug["strength"]),
                          "likert": int(aug["likert"]), "augmentation": aug["kinds"][i // aug["n_per_kind"]],
                          # the row describes its volume fully (synthaudit.synthetic.spiked.augment)
                          "flip_axis": int(aug["flip_axis"]), "shift_mm": float(aug["shift_mm"]),
                          "rotation_deg": float(aug["rotation_deg"])})
    order = rng.permutation(len(items))
    width = max(3, len(str(len(items))))
    return [dict(id=f"syn{k:0{width}d}", **items[j]) for k, j in enumerate(order)]


def generator_training_subset(train_ids: list[str], n: int | None, seed: int) -> list[str]:
    """The training volumes an in-workflow generator learns from: all, or ``n`` of them.

    The subset is the first ``n`` of one seeded permutation, so smaller training sets
    are nested in larger ones (a sweep over ``n`` adds volumes, it does not swap them).
    Returned in sorted order.
    """
    ids = sorted(train_ids)
    if n is None:
        return ids
    if not 1 <= n <= len(ids):
        raise SourceError(f"n_training={n}: must be between 1 and the {len(ids)} training volumes")
    order = np.random.default_rng(seed).permutation(len(ids))
    return sorted(ids[i] for i in order[:n])


def plan_dataset(name: str, ds: dict, demo_table=None) -> DatasetPlan:
    """All ids of one dataset, computed from params (and the user's manifests/folders).

    ``demo_table`` is the demo cohort's pure table function (injected to keep this
    module free of the simulation's imports).
    """
    src = ds["source"]
    if src in ("demo_ncct", "demo_tof"):
        if demo_table is None:
            if src == "demo_ncct":
                from .demo.cohorts import ncct_table as demo_table
            else:
                from .demo.cohorts import tof_table as demo_table
        scans = [Scan(id=r["id"], patient_id=r["patient_id"], role=r["role"], session=r["session"])
                 for r in demo_table(ds["demo"])]
    elif src == "manifest":
        scans = read_manifest(ds["manifest"])
    elif src == "nnunet":
        scans = read_nnunet(ds["nnunet_dir"])
    else:  # the schema forbids this; keep the error explicit for library callers
        raise SourceError(f"datasets.{name}.source: unknown source {src!r}")

    syn_cfg = ds["synthetic"]
    spiked: list[dict] = []
    if syn_cfg["source"] == "spiked":
        try:
            spiked = spiked_plan(syn_cfg["spiked"], [s.id for s in scans if s.role == "train"],
                                 [s.id for s in scans if s.role == "heldout"])
        except SourceError as e:
            raise SourceError(f"datasets.{name}.{e}") from None
        synthetic = [SyntheticVolume(id=r["id"]) for r in spiked]
    elif syn_cfg["source"] == "ldm":
        ldm = syn_cfg["ldm"]
        try:
            generator_training_subset([s.id for s in scans if s.role == "train"], ldm.get("n_training"), ldm["seed"])
        except SourceError as e:
            raise SourceError(f"datasets.{name}.synthetic.ldm.{e}") from None
        width = max(3, len(str(ldm["n_samples"])))
        synthetic = [SyntheticVolume(id=f"gen{k:0{width}d}") for k in range(1, ldm["n_samples"] + 1)]
    elif syn_cfg["source"] == "folder":
        synthetic = read_synthetic_folder(syn_cfg["folder"], syn_cfg.get("pattern") or default_of("datasets.*.synthetic.pattern"))
    else:
        synthetic = read_synthetic_manifest(syn_cfg["manifest"])

    clash = sorted({s.id for s in scans} & {v.id for v in synthetic})
    if clash:
        raise SourceError(f"datasets.{name}: ids used for both real and synthetic volumes: {clash[:5]}")
    check_case_collisions([s.id for s in scans] + [v.id for v in synthetic], f"datasets.{name}")
    n_train = sum(1 for s in scans if s.role == "train")
    if n_train < MIN_TRAINING:
        raise SourceError(f"datasets.{name}: {n_train} training volume(s); the distance ratio compares the closest "
                          f"training volume with the next ones and needs at least {MIN_TRAINING} (every ratio "
                          "would be 1)")
    return DatasetPlan(name=name, scans=scans, synthetic=synthetic, spiked=spiked)
