"""`synthaudit init`: one folder per audit, made from the user's folders of NIfTI.

Why: the people synthaudit exists for have folders of scans (training, sometimes held-out,
a generator's samples), not a demo configuration to edit. The Snakemake ecosystem's
convention for using a published workflow (snakemake-workflows, `snakedeploy
deploy-workflow`) is a project folder of its own holding the configuration and a small
Snakefile that uses the workflow as a module; results land there. This module writes that
folder: ``params.yaml`` holding only this audit (stages the data cannot support are off,
each with a comment saying why and what would turn it on), ``data/manifest.tsv`` built from
the folders, a ``Snakefile`` that runs synthaudit's rules, a ``dvc.yaml`` and the profiles.
Everything that can be checked before heavy work is checked here, naming the user's file.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .io import read_tsv, write_tsv
from .sources import ID_PATTERN, MIN_TRAINING, NIFTI_SUFFIXES, SourceError, read_manifest, strip_nifti
from .sources import check_case_collisions as _case_collisions

REPO = Path(__file__).resolve().parents[3]  # workflow/scripts/synthaudit/ -> the repository
MANIFEST_COLUMNS = ["id", "image", "label", "patient_id", "role"]
MIN_HELDOUT_AT_5_PERCENT = 19  # relict.calibration: 1 / (n + 1) <= 0.05
# measured on the 2-core development machine (README, Benchmark): per pair of 182 x 218 x 182
# volumes, the image-level engines (MAE, RMSE, SSIM together), and per volume the embedding
SECONDS_PER_PAIR_1MM = 0.05
SECONDS_PER_EMBEDDING_1MM = 12.7
VOXELS_1MM = 182 * 218 * 182


class WorkspaceError(ValueError):
    """A problem with the user's folders, naming the file."""


def check_case_collisions(ids, where: str) -> None:
    try:
        _case_collisions(ids, where)
    except SourceError as e:
        raise WorkspaceError(str(e)) from None


@dataclass
class Inputs:
    """What the user points `synthaudit init` at (the command's options)."""

    training: Path
    synthetic: Path
    heldout: Path | None = None
    labels: Path | None = None
    synthetic_labels: Path | None = None
    patient_ids: Path | None = None
    patient_pattern: str | None = None
    registered: bool = False
    modality: str = "ct"
    ratings: Path | None = None
    classes: list[str] = field(default_factory=list)
    name: str = "audit"


def nifti_files(folder: Path, what: str) -> dict[str, Path]:
    """id -> file for every NIfTI file in a folder (the id is the name without .nii/.nii.gz)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise WorkspaceError(f"{folder}: {what} folder not found")
    files = {}
    for p in sorted(folder.iterdir()):
        if not p.is_file() or not p.name.endswith(NIFTI_SUFFIXES):
            continue
        i = strip_nifti(p.name)
        if not ID_PATTERN.match(i):
            raise WorkspaceError(f"{p}: file name {i!r} is not a usable id (letters, digits, '.', '_', '-'; "
                                 "starting with a letter or digit)")
        if i in files:
            raise WorkspaceError(f"{folder}: {files[i].name} and {p.name} give the same id {i!r}")
        files[i] = p.resolve()
    if not files:
        raise WorkspaceError(f"{folder}: no NIfTI files (*.nii, *.nii.gz) in the {what} folder")
    return files


def patients(ids: list[str], table: Path | None, pattern: str | None) -> tuple[dict[str, str], str]:
    """Patient of each scan: from a TSV (id, patient_id), a regular expression on the id (its
    first group, or the group named ``patient``), or one patient per scan. Returns the map and
    how it was made (for the plan)."""
    if table is not None:
        rows = read_tsv(table)
        if not rows or not {"id", "patient_id"} <= set(rows[0]):
            raise WorkspaceError(f"{table}: needs columns id and patient_id")
        given = {r["id"].strip(): r["patient_id"].strip() for r in rows}
        missing = [i for i in ids if i not in given]
        if missing:
            raise WorkspaceError(f"{table}: no patient_id for {len(missing)} scan(s), e.g. {missing[:5]}")
        return {i: given[i] for i in ids}, f"from {table}"
    if pattern:
        rx = re.compile(pattern)
        out = {}
        for i in ids:
            m = rx.search(i)
            if not m or not (m.groupdict().get("patient") or (m.groups() and m.group(1))):
                raise WorkspaceError(f"--patient-pattern {pattern!r} finds no patient in the id {i!r}")
            out[i] = m.groupdict().get("patient") or m.group(1)
        return out, f"from the file names (pattern {pattern!r})"
    return {i: i for i in ids}, "one patient per scan (no --patient-ids or --patient-pattern)"


def build_manifest(inp: Inputs) -> tuple[list[dict], str]:
    """Rows of data/manifest.tsv (absolute paths) from the training folder or manifest and the
    held-out folder; labels from the label folder where a file of the same id exists."""
    if Path(inp.training).is_file():  # a manifest the user already has
        try:
            scans = read_manifest(inp.training)
        except SourceError as e:
            raise WorkspaceError(str(e)) from None
        rows = [{"id": s.id, "image": str(Path(s.image).resolve()), "label": s.label or "",
                 "patient_id": s.patient_id, "role": s.role} for s in scans]
        how = f"from {inp.training}"
    else:
        images = nifti_files(inp.training, "training")
        roles = {i: "train" for i in images}
        if inp.heldout:
            held = nifti_files(inp.heldout, "held-out")
            both = sorted(set(held) & set(images))
            if both:
                raise WorkspaceError(f"{inp.heldout}: id(s) also in the training folder: {both[:5]}")
            images.update(held)
            roles.update({i: "heldout" for i in held})
        who, how = patients(list(images), inp.patient_ids, inp.patient_pattern)
        rows = [{"id": i, "image": str(images[i]), "label": "", "patient_id": who[i], "role": roles[i]}
                for i in images]
    if inp.labels:
        labels = nifti_files(inp.labels, "label")
        for r in rows:
            if not r["label"] and r["id"] in labels:
                r["label"] = str(labels[r["id"]])
        missing = [r["id"] for r in rows if r["role"] == "train" and not r["label"]]
        if missing:
            raise WorkspaceError(f"{inp.labels}: no label map for {len(missing)} training scan(s), e.g. "
                                 f"{missing[:5]} (expected <id>.nii.gz beside the others)")
    check_case_collisions([r["id"] for r in rows], str(inp.training))
    n_train = sum(r["role"] == "train" for r in rows)
    if n_train < MIN_TRAINING:
        raise WorkspaceError(f"{inp.training}: {n_train} training scan(s); the distance ratio needs at least "
                             f"{MIN_TRAINING}")
    return rows, how


def _load(path: Path):
    from .io import VolumeError, load_volume

    try:
        return load_volume(path)
    except VolumeError as e:
        raise WorkspaceError(str(e)) from None


def check_volumes(rows: list[dict], synthetic: dict[str, Path], synthetic_labels: dict[str, Path] | None,
                  registered: bool, progress=print) -> dict:
    """Load every volume once, before any job: unreadable files, NaN, label values and grids.

    Returns the grid (shape, spacing) of the training scans, the label values found and
    intensity percentiles of each side (generator samples in other units than the training
    scans would make every distance meaningless). Raises WorkspaceError naming each bad file.
    """
    problems, values, stats = [], set(), {"training": [], "synthetic": []}
    # registered: every volume on the first training scan's grid; otherwise the samples on the
    # output grid that registration will make (params_text writes 91 x 109 x 91 at 2 mm)
    grid: tuple | None = None if registered else ((91, 109, 91), None)
    items = [(r["image"], "image", r["role"]) for r in rows] + \
            [(r["label"], "label", r["role"]) for r in rows if r["label"]] + \
            [(str(p), "image", "synthetic") for p in synthetic.values()] + \
            [(str(p), "label", "synthetic") for p in (synthetic_labels or {}).values()]
    for k, (path, kind, role) in enumerate(items, start=1):
        if k % 25 == 0 or k == len(items):
            progress(f"  checked {k} of {len(items)} files")
        try:
            data, affine = _load(Path(path))
        except WorkspaceError as e:
            problems.append(str(e))
            continue
        if kind == "label":
            v = np.unique(data)
            bad = v[(v != np.round(v)) | (v < 0)]
            if bad.size:
                problems.append(f"{path}: label map holds non-integer or negative values {bad[:5].tolist()}")
            values.update(int(x) for x in v[v == np.round(v)] if x > 0)
        else:
            side = "synthetic" if role == "synthetic" else "training"
            stats[side].append(np.percentile(data[::2, ::2, ::2], [1, 50, 99]))
        if not (registered or role == "synthetic"):
            continue  # raw scans: registration puts them on the grid
        if grid is None:
            grid = (tuple(data.shape), affine)
        elif tuple(data.shape) != grid[0]:
            problems.append(f"{path}: shape {list(data.shape)}, expected {list(grid[0])} "
                            + ("(every volume of a registered audit on one grid)" if registered else
                               "(generator samples on the registered output grid)"))
        elif grid[1] is not None and np.abs(affine - grid[1]).max() > 1e-3:
            problems.append(f"{path}: voxel-to-world mapping differs from {items[0][0]}'s by up to "
                            f"{np.abs(affine - grid[1]).max():.3g} mm (one grid expected)")
    if problems:
        raise WorkspaceError(f"{len(problems)} problem(s) in the input files:\n  " + "\n  ".join(problems[:20]))
    out = {"label_values": sorted(values), "shape": list(grid[0]) if grid else None}
    for side, s in stats.items():
        if s:
            out[f"{side}_intensity"] = np.median(np.stack(s), axis=0).round(3).tolist()
    return out


def intensity_warning(summary: dict) -> str | None:
    """A warning when the samples' intensities are in other units than the training scans'."""
    t, s = summary.get("training_intensity"), summary.get("synthetic_intensity")
    if not t or not s:
        return None
    span_t, span_s = t[2] - t[0], s[2] - s[0]
    if span_t <= 0 or span_s <= 0:
        return None
    if max(span_t, span_s) / min(span_t, span_s) > 3 or abs(t[1] - s[1]) > max(span_t, span_s):
        return (f"the synthetic volumes' intensities (1st/50th/99th percentile {s}) differ from the training "
                f"scans' ({t}): are they in the same units? Every distance compares them voxel by voxel; map "
                "the samples back to the training scans' units (or set preprocess.intensity) first")
    return None


# ---- params.yaml: the repository's file, with its comments, reduced to this audit ----

def _find(lines: list[str], path: str) -> int:
    """Line index of a dotted key in a block-style YAML text (indentation 2)."""
    keys, start, indent = path.split("."), 0, 0
    for depth, key in enumerate(keys):
        pattern = re.compile(rf"^{' ' * indent}{re.escape(key)}:(\s|$)")
        for i in range(start, len(lines)):
            if pattern.match(lines[i]):
                start, indent = i + 1, indent + 2
                break
            if i > start and lines[i].strip() and not lines[i].lstrip().startswith("#") and \
                    len(lines[i]) - len(lines[i].lstrip()) < indent:
                raise KeyError(path)
        else:
            raise KeyError(path)
    return start - 1


def set_value(text: str, path: str, value: str, comment: str) -> str:
    """Replace a key's value (and its block, when it has one) by a flow-style ``value``."""
    lines = text.split("\n")
    i = _find(lines, path)
    indent = len(lines[i]) - len(lines[i].lstrip())
    end = i + 1
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    while end > i + 1 and not lines[end - 1].strip():  # keep the blank lines that follow the block
        end -= 1
    key = lines[i].split(":", 1)[0]
    lines[i:end] = [f"{key}: {value}".ljust(30) + f"  # {comment}"]
    return "\n".join(lines)


def _datasets_block(inp: Inputs, summary: dict, manifest: str, n_heldout: int) -> str:
    name = inp.name
    registered = inp.registered
    lines = [
        "datasets:",
        f"  {name}:",
        "    source: manifest            # written by synthaudit init from your folders (ids, patients, roles, labels)",
        f"    manifest: {manifest}",
    ]
    if registered:
        lines += [
            "    preprocess:",
            "      register: false           # --registered: your scans are on one grid already; only checked",
            "      intensity:",
            "        window: null            # intensities as they are: the synthetic volumes are compared as they are",
            "        rescale: false          # too, so both sides stay in the same units",
        ]
    else:
        template = "mni_ct" if inp.modality == "ct" else "mni_t1"
        window = "[-100.0, 200.0]" if inp.modality == "ct" else "null"
        lines += [
            "    preprocess:                 # RELICT 2.1: affine registration to MNI, resampling, ROI crop",
            "      register: true            # your synthetic volumes must be on the output grid below already",
            f"      template: {template}".ljust(34) + "# mni_ct | mni_t1 | a NIfTI path",
            "      spacing_mm: 2.0           # output voxel spacing (RELICT: 1.0)",
            "      roi:",
            "        size_vox: [91, 109, 91] # RELICT at 1 mm: [182, 218, 182]",
            "        center_mm: [0.5, -17.5, 18.5]",
            "      registration: {histogram_bins: 50, sampling_fraction: 0.25, shrink_factors: [4, 2],",
            "                     smoothing_sigmas_vox: [2, 1], iterations: 200, learning_rate: 1.0, seed: 1,",
            "                     qc_min_correlation: 0.6}",
            "      intensity:",
            f"        window: {window}".ljust(34) + "# clip (HU for CT); null keeps intensities",
            "        rescale: true           # map the window to [0, 1]: your samples must be in those units",
        ]
    lines += ["    synthetic:", "      source: folder            # your generator's samples (--synthetic)",
              f"      folder: {Path(inp.synthetic).resolve()}"]
    if inp.labels:
        classes = inp.classes or [f"class{v}" for v in range(1, max(summary["label_values"] or [1]) + 1)]
        if inp.synthetic_labels:
            lines += ["    segmentation:", "      source: labels            # your label maps for both sets (--labels, "
                      "--synthetic-labels)",
                      f"      classes: [{', '.join(classes)}]".ljust(32) + "# label values 1, 2, ...; others are refused",
                      f"      synthetic_labels: {Path(inp.synthetic_labels).resolve()}"]
        else:
            lines += ["    segmentation:",
                      "      source: unet              # a 3D U-Net trained here on your training labels, run on "
                      "every volume alike",
                      f"      classes: [{', '.join(classes)}]".ljust(32) + "# label values 1, 2, ...; others are refused",
                      "      unet: {epochs: 40, patch_size: [48, 48, 48], batch_size: 2, learning_rate: 0.001,",
                      "             channels: [16, 32, 64, 128], seed: 11}"]
    else:
        lines += ["    # no segmentation level: no --labels (give a folder of <id>.nii.gz label maps to add it)"]
    ratings = f"{Path(inp.ratings).resolve()}" if inp.ratings else "null"
    lines += [f"    ratings: {ratings}".ljust(32) + "# a rating table (synthetic_id, rater, score 1-4); null: none"]
    if n_heldout < MIN_HELDOUT_AT_5_PERCENT:
        lines += [f"    # {n_heldout} held-out scans: calibrated calls need >= {MIN_HELDOUT_AT_5_PERCENT} at the 5 % "
                  "rate (--heldout); the ranking is complete without them"]
    return "\n".join(lines) + "\n"


def params_text(inp: Inputs, summary: dict, rows: list[dict], manifest: str = "data/manifest.tsv") -> str:
    """The repository's params.yaml with its comments, its datasets replaced by this audit and
    every stage that names a demo dataset switched to what this audit's data support."""
    lines = (REPO / "params.yaml").read_text().split("\n")
    start = lines.index("datasets:")
    end = next(i for i in range(start + 1, len(lines)) if re.match(r"^[A-Za-z_]\w*:", lines[i]))
    while lines[end - 1].startswith("#") or not lines[end - 1].strip():  # the next key's comment stays
        end -= 1
    text = "\n".join(lines[:start]) + "\n" + _datasets_block(inp, summary, manifest, sum(r["role"] == "heldout" for r in rows)) + "\n" + \
        "\n".join(lines[end:])
    heldout = [r for r in rows if r["role"] == "heldout"]
    name = inp.name
    per_patient: dict[str, int] = {}
    for r in rows:
        if r["role"] == "train":
            per_patient[r["patient_id"]] = per_patient.get(r["patient_id"], 0) + 1
    repeated = sum(n > 1 for n in per_patient.values())
    text = set_value(text, "generator_sweep.dataset", "null", "off: needs a generator trained here (synthetic.source ldm)")
    if heldout and repeated:
        text = set_value(text, "privacy.training_sets", f"[{name}]",
                         f"{repeated} patients with >= 2 training scans and {len(heldout)} held-out scans")
    else:
        why = "no held-out scans (--heldout)" if not heldout else \
            "no patient with two training scans (--patient-ids or --patient-pattern)"
        text = set_value(text, "privacy.training_sets", "[]", f"off: {why}; the filters learn patient identity")
    text = set_value(text, "privacy.spaces", "[image]", "the latent space needs a generator's autoencoder")
    text = set_value(text, "privacy.latent_autoencoder", "null", "off: no generator trained here")
    text = set_value(text, "relict.alignment.datasets", "[]",
                     f"off; [{name}] when the generator trained with flips/shifts/rotations")
    if inp.ratings:
        text = set_value(text, "feature_study.datasets", f"[{name}]", "your rating scores each candidate network")
    else:
        text = set_value(text, "feature_study.datasets", "[]", "off: needs a rating (--ratings)")
    text = set_value(text, "anonymise.datasets", "{}", "off: needs class labels per scan (README, Anonymisation)")
    return text


SNAKEFILE = '''"""synthaudit audit workspace (written by `synthaudit init`).

Runs synthaudit's rules as a Snakemake module, the snakemake-workflows convention: this
folder holds the configuration (params.yaml) and receives every result (results/, logs/).
Run: `snakemake --cores all` here (profiles/default is picked up), or `dvc repro`.
"""

configfile: "params.yaml"


module synthaudit:
    snakefile: "{snakefile}"
    config: config


use rule * from synthaudit
'''

DVC = """# `dvc repro` re-runs the audit when params.yaml or the manifest changes (the stage calls
# Snakemake, which decides what to redo); `dvc metrics diff` compares runs. Outputs are not
# cached (they can be large; Snakemake owns them) and persist between runs.
stages:
  audit:
    cmd: snakemake --cores all && snakemake --cores 1 --report results/report.html
    deps:
      - data/manifest.tsv
    params:
      - datasets
      - relict
      - privacy
    outs:
      - results/preprocessed:
          cache: false
          persist: true
      - results/synthetic:
          cache: false
          persist: true
      - results/relict:
          cache: false
          persist: true
      - results/figures:
          cache: false
          persist: true
    metrics:
      - results/metrics/relict.json:
          cache: false
      - results/metrics/copies.json:
          cache: false
"""


def write_workspace(target: Path, inp: Inputs, progress=print) -> dict:
    """Check the folders, then write the workspace. Returns the plan (for printing)."""
    target = Path(target)
    if (target / "params.yaml").exists():
        raise WorkspaceError(f"{target}: already holds a params.yaml (choose a new folder; nothing was changed)")
    if not re.match(r"^[a-z][a-z0-9_]*$", inp.name):
        raise WorkspaceError(f"--name {inp.name!r}: lower-case letters, digits and '_', starting with a letter")
    rows, how = build_manifest(inp)
    synthetic = nifti_files(inp.synthetic, "synthetic")
    synthetic_labels = None
    if inp.synthetic_labels:
        if not inp.labels:
            raise WorkspaceError("--synthetic-labels needs --labels (the training scans' label maps) too")
        synthetic_labels = nifti_files(inp.synthetic_labels, "synthetic label")
        missing = sorted(set(synthetic) - set(synthetic_labels))
        if missing:
            raise WorkspaceError(f"{inp.synthetic_labels}: no label map for {len(missing)} synthetic volume(s), "
                                 f"e.g. {missing[:5]}")
    clash = sorted({r["id"] for r in rows} & set(synthetic))
    if clash:
        raise WorkspaceError(f"{inp.synthetic}: ids also used by real scans: {clash[:5]}")
    check_case_collisions([r["id"] for r in rows] + list(synthetic), f"{inp.training} and {inp.synthetic}")
    progress(f"checking {len(rows)} real and {len(synthetic)} synthetic volumes ...")
    summary = check_volumes(rows, synthetic, synthetic_labels, inp.registered, progress)
    if inp.classes and summary["label_values"] and max(summary["label_values"]) > len(inp.classes):
        raise WorkspaceError(f"--classes names {len(inp.classes)} classes, the label maps hold values up to "
                             f"{max(summary['label_values'])}")
    target.mkdir(parents=True, exist_ok=True)
    (target / "data").mkdir(exist_ok=True)
    write_tsv(target / "data/manifest.tsv", rows, MANIFEST_COLUMNS)
    (target / "params.yaml").write_text(params_text(inp, summary, rows))
    (target / "Snakefile").write_text(SNAKEFILE.format(snakefile=REPO / "Snakefile"))
    (target / "dvc.yaml").write_text(DVC)
    (target / ".dvc").mkdir(exist_ok=True)  # a DVC project without Git (run `git init` + `dvc init` to track it)
    (target / ".dvc/config").write_text("[core]\n    no_scm = True\n    analytics = false\n")
    for profile in ("default", "slurm"):
        (target / "profiles" / profile).mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / "workflow/profiles" / profile / "config.yaml", target / "profiles" / profile / "config.yaml")
    (target / ".gitignore").write_text("results/\nlogs/\n.snakemake/\nbenchmarks/\n")
    return plan(inp, rows, how, synthetic, summary)


def plan(inp: Inputs, rows: list[dict], how: str, synthetic: dict, summary: dict) -> dict:
    train = [r for r in rows if r["role"] == "train"]
    heldout = [r for r in rows if r["role"] == "heldout"]
    shape = summary["shape"] or [182, 218, 182]
    scale = float(np.prod(shape)) / VOXELS_1MM if inp.registered else (91 * 109 * 91) / VOXELS_1MM
    pairs = (len(synthetic) + len(heldout)) * len(train)
    volumes = len(rows) + len(synthetic)
    seconds = pairs * SECONDS_PER_PAIR_1MM * scale + volumes * SECONDS_PER_EMBEDDING_1MM * scale
    levels = ["image (MAE, RMSE, SSIM)", "feature (ResNet-50 embeddings: RMSE, cosine)"]
    if inp.labels:
        levels.append("segmentation (Dice, ASD; " + ("your label maps" if inp.synthetic_labels else
                                                       "a U-Net trained on your labels") + ")")
    return {"n_train": len(train), "n_heldout": len(heldout), "n_synthetic": len(synthetic),
            "n_patients": len({r["patient_id"] for r in train}), "patients": how, "levels": levels,
            "calibrated": len(heldout) >= MIN_HELDOUT_AT_5_PERCENT, "pairs": pairs,
            "estimate_cpu_minutes": round(seconds / 60, 1), "summary": summary,
            "warning": intensity_warning(summary)}
