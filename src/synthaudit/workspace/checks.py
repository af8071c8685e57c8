"""What the volumes hold before anything runs: intensity ranges against the modality's and the
training set's, grids, labels; refusals name the file, warnings go to the workspace."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import resources
from .discover import WorkspaceError, _load


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


WARNINGS_FILE = resources.INPUT_WARNINGS


WARNING_COLUMNS = ["dataset", "id", "role", "file", "warning"]
# the warnings of volumes without anatomy to measure (intensity_checks): what init's timing leaves out
FLAT_WARNINGS = ("empty volume", "constant volume", "nearly constant volume")


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
            empty, constant, _ = FLAT_WARNINGS
            warn(r, f"{empty}: every voxel is 0" if r.vmin == 0 else f"{constant}: every voxel is {r.vmin:g}")
        elif r.p[0] == r.p[2]:
            warn(r, f"{FLAT_WARNINGS[2]}: {r.n_off} voxel(s) differ from {r.p[1]:g} (values {r.vmin:g} to "
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

    from ..preprocess.register import register_affine

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
