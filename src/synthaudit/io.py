"""Reading and writing volumes and tables, with the checks every stage relies on.

Why one module: every stage must refuse unreadable volumes and NaNs with a message
that names the file, and every output must be written atomically (a crash never
leaves a half-written file that a later run would mistake for a result).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
from glob import escape as glob_escape
import tempfile
import zlib
from pathlib import Path
from typing import Iterator

import nibabel as nib
import numpy as np


class VolumeError(ValueError):
    """A volume that cannot be used; the message names the file."""


class DiskFullError(OSError):
    """An output could not be written for want of space (ENOSPC) or quota (EDQUOT).

    Raised by :func:`atomic_path` and :func:`atomic_directory`, so by every writer here, in
    place of the bare ``OSError`` (which names neither the output nor a remedy); ``errno``
    is the original one and ``filename`` the output. The partly written temporary is gone
    by then and the output is as it was before (absent, for a Snakemake job).
    """

    def __str__(self) -> str:
        return self.strerror or super().__str__()


_NO_SPACE = {errno.ENOSPC: ("disk full", "free space on the disk that holds it, or move the run to a larger disk")}
if hasattr(errno, "EDQUOT"):  # not on Windows
    _NO_SPACE[errno.EDQUOT] = ("disk quota exceeded", "free space within your quota, or ask for a larger one")


@contextlib.contextmanager
def _naming_disk_full(path: Path) -> Iterator[None]:
    """Turn a failure for want of space anywhere in the exception chain into a DiskFullError naming ``path``.

    The chain, because writers often raise something else while cleaning up (zipfile's close
    on a full disk raises again; other libraries wrap the error).
    """
    try:
        yield
    except Exception as e:
        seen, cause = set(), e
        while cause is not None and id(cause) not in seen:
            seen.add(id(cause))
            if isinstance(cause, OSError) and cause.errno in _NO_SPACE:
                what, remedy = _NO_SPACE[cause.errno]
                raise DiskFullError(cause.errno, f"{what} ({errno.errorcode[cause.errno]}) while writing {path}: "
                                    f"{remedy}, then run again (nothing partly written was kept)",
                                    str(path)) from e
            cause = cause.__cause__ or cause.__context__
        raise


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` on success.

    The temporary file keeps the final suffix(es) so that writers that pick a format
    from the extension (nibabel, matplotlib) behave as for the final name. On failure it
    is removed and ``path`` is left as it was; a full disk (or quota) raises
    :class:`DiskFullError`, naming ``path``. A temporary file that a killed writer of the
    same output left behind (SIGKILL runs no cleanup) is removed first.
    """
    path = Path(path)
    if suffix is None:
        suffix = "".join(path.suffixes) or ".tmp"
    with _naming_disk_full(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_temporaries(path, suffix)
        fd, tmp = tempfile.mkstemp(prefix=f".tmp-{path.stem}-", suffix=suffix, dir=path.parent)
        os.close(fd)
    tmp_path = Path(tmp)
    try:
        with _naming_disk_full(path):
            yield tmp_path
            # mkstemp creates 0600 files; outputs are shared (cluster groups), so apply the umask default
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp_path, 0o666 & ~umask)
            os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


_MKSTEMP_NAME = re.compile(r"[a-z0-9_]{8}")  # tempfile's random part: 8 characters of this set


def _remove_stale_temporaries(path: Path, suffix: str) -> None:
    """Remove ``.tmp-<stem>-XXXXXXXX<suffix>`` files of ``path`` left by a killed writer.

    Only this output's own names match (the random part is exactly mkstemp's 8 characters,
    so ``.tmp-ranking-x-...`` of an output ``ranking-x`` is not ``ranking``'s); Snakemake never
    runs two jobs that write one output, so a match is not another writer's live file.
    """
    prefix = f".tmp-{path.stem}-"
    for stale in path.parent.glob(glob_escape(prefix) + "*" + glob_escape(suffix)):
        middle = stale.name[len(prefix):len(stale.name) - len(suffix)]
        if _MKSTEMP_NAME.fullmatch(middle) and stale.is_file():
            stale.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary folder next to ``path``; it replaces ``path`` on success.

    As :func:`atomic_path`: on failure the folder is removed, and a full disk raises
    :class:`DiskFullError` naming ``path``.
    """
    path = Path(path)
    with _naming_disk_full(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{path.name}-", dir=path.parent))
    try:
        with _naming_disk_full(path):
            yield tmp
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; outputs are shared
            if path.exists():
                shutil.rmtree(path)
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes (a weights file's identity; an audit card's inputs), read in blocks."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | os.PathLike, obj) -> None:
    """Write JSON atomically; NaN and infinities become null (strict JSON, readable by DVC)."""
    write_text(path, json.dumps(_finite(obj), indent=2, default=_json_default, allow_nan=False) + "\n")


# Timings change on every run: in a tracked metrics file they would make `dvc metrics diff`
# show changes a commit did not cause. They stay in the stages' tables and runtime files.
TIMING_KEYS = frozenset({"seconds", "seconds_per_epoch", "epoch_time_ratio_image_to_latent", "seconds_per_volume",
                         "autoencoder_train_seconds", "diffusion_train_seconds", "sample_seconds"})


def without_timings(rows: list[dict]) -> list[dict]:
    """Rows (a training history, a table) without TIMING_KEYS: what a tracked output may hold,
    so that it is the same bytes on every run (``dvc status``); the times go to the logs, the
    benchmark files and the ``*.timing.*`` / ``runtime.*`` files that .dvcignore leaves out."""
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in rows]
PROVENANCE_KEY = "synthaudit"


def split_timings(obj):
    """(obj without TIMING_KEYS at any depth, the removed timings in the same nesting)."""
    if not isinstance(obj, dict):
        return obj, {}
    kept, timings = {}, {}
    for k, v in obj.items():
        if k in TIMING_KEYS:
            timings[k] = v
            continue
        kept[k], sub = split_timings(v)
        if sub:
            timings[k] = sub
    return kept, timings


def write_metrics(path: str | os.PathLike, obj: dict) -> dict:
    """A tracked metrics file (results/metrics/*.json): what the run measured, without timings.
    Which version and parameters produced it is one file beside them (results/provenance.json,
    :func:`synthaudit.resources.provenance`), so that ``dvc metrics diff`` shows science, not
    hashes. Returns the timings it left out."""
    kept, timings = split_timings(obj)
    if PROVENANCE_KEY in kept:
        raise ValueError(f"{path}: {PROVENANCE_KEY!r} is reserved (metrics files before issue 44 held the provenance "
                         "there; a dataset of that name?)")
    write_json(path, kept)
    return timings


def read_metrics(path: str | os.PathLike) -> dict:
    """A metrics file's entries (without the provenance entry that files written before issue 44 held)."""
    data = json.loads(Path(path).read_text())
    data.pop(PROVENANCE_KEY, None)
    return data


def _finite(obj):
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(obj) if np.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def _json_default(o):
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_tsv(path: str | os.PathLike, rows: list[dict], columns: list[str] | None = None) -> None:
    """Write rows (dicts) as a tab-separated table; floats with full precision."""
    if columns is None:
        columns = list(rows[0].keys()) if rows else []
    lines = ["\t".join(columns)]
    for row in rows:
        lines.append("\t".join(_fmt(row.get(c, "")) for c in columns))
    write_text(path, "\n".join(lines) + "\n")


def _fmt(v) -> str:
    if v is None:
        return "NA"
    if isinstance(v, (float, np.floating)):
        if np.isnan(v):
            return "NA"
        return f"{float(v):.10g}"
    return str(v)


def read_tsv(path: str | os.PathLike) -> list[dict]:
    """Read a tab-separated table with a header into a list of dicts (strings)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise FileNotFoundError(f"{path}: cannot read table ({e.strerror})") from e
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    if not lines:
        return []
    header = lines[0].split("\t")
    rows = []
    for i, ln in enumerate(lines[1:], start=2):
        cells = ln.split("\t")
        if len(cells) != len(header):
            raise ValueError(f"{path}: line {i} has {len(cells)} columns, the header has {len(header)}")
        rows.append(dict(zip(header, cells)))
    return rows


def load_volume(path: str | os.PathLike, dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """Load a 3D NIfTI volume as ``(data, affine)``; refuse unreadable files and NaN/inf.

    A trailing singleton 4th dimension is dropped (some writers add one). A 0-byte file (an
    interrupted copy, a placeholder) is named as such: nibabel's own message for it depends
    on the suffix and hides the cause.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError as e:
        raise VolumeError(f"{path}: file not found") from e
    except OSError as e:
        raise VolumeError(f"{path}: unreadable volume ({e.strerror or e})") from e
    if size == 0:
        raise VolumeError(f"{path}: empty file (0 bytes)")
    try:
        img = _gzipped_nifti(path) if path.name.endswith(".nii.gz") else nib.load(str(path))
        data = np.asarray(img.dataobj, dtype=dtype)
    except FileNotFoundError as e:
        raise VolumeError(f"{path}: file not found") from e
    except Exception as e:  # nibabel raises many types for corrupt files
        raise VolumeError(f"{path}: unreadable volume ({type(e).__name__}: {e})") from e
    if data.ndim == 4 and data.shape[3] == 1:
        data = data[..., 0]
    if data.ndim != 3:
        raise VolumeError(f"{path}: expected a 3D volume, got shape {data.shape}")
    if not np.all(np.isfinite(data)):
        n_bad = int(np.size(data) - np.count_nonzero(np.isfinite(data)))
        raise VolumeError(f"{path}: contains {n_bad} NaN or infinite voxel(s)")
    return data, img.affine.copy()


def _gzipped_nifti(path: Path) -> nib.Nifti1Image:
    """A .nii.gz file decompressed in one call, then parsed from memory: the same image as ``nib.load``, read
    a quarter faster (nibabel's gzip stream reads in thousands of small chunks; 44 against 58 ms per 1.5 mm
    head). As Python's gzip module, every member of a multi-member file (bgzip's blocks) is read and zero
    padding after a member is skipped."""
    raw, parts = path.read_bytes(), []
    while raw:
        stream = zlib.decompressobj(wbits=31)
        parts.append(stream.decompress(raw))
        if not stream.eof:
            raise OSError("truncated gzip stream")
        raw = stream.unused_data.lstrip(b"\x00")
    data = b"".join(parts)
    sizes = {int.from_bytes(data[:4], order) for order in ("little", "big")}  # the header's sizeof_hdr
    if not sizes & {348, 540}:
        raise OSError("not a NIfTI file inside the gzip stream (its header size is neither 348 nor 540)")
    return (nib.Nifti2Image if 540 in sizes else nib.Nifti1Image).from_bytes(data)


def save_volume(path: str | os.PathLike, data: np.ndarray, affine: np.ndarray, dtype=None) -> None:
    """Write a NIfTI volume atomically, keeping the affine (qform and sform)."""
    arr = np.asarray(data if dtype is None else data.astype(dtype))
    img = nib.Nifti1Image(arr, affine)
    img.set_qform(affine, code=1)
    img.set_sform(affine, code=1)
    with atomic_path(path) as tmp:
        nib.save(img, str(tmp))


def spacing_from_affine(affine: np.ndarray) -> np.ndarray:
    """Voxel spacing in mm: the column norms of the affine's linear part."""
    return np.sqrt((np.asarray(affine)[:3, :3] ** 2).sum(axis=0))


def check_on_grid(path: str, data: np.ndarray, affine: np.ndarray, grid: dict, what: str = "volume",
                  affine_tol_mm: float = 1e-3) -> None:
    """Refuse a volume whose shape (or voxel-to-world mapping) differs from the grid."""
    shape = list(data.shape)
    if shape != list(grid["shape"]):
        raise VolumeError(f"{path}: {what} has shape {shape}, the preprocessed grid is {grid['shape']}")
    diff = np.abs(np.asarray(affine) - np.asarray(grid["affine"])).max()
    if diff > affine_tol_mm:
        raise VolumeError(
            f"{path}: {what} is not on the preprocessed grid (affine differs by up to {diff:.3g} mm); "
            "register it or resample it first"
        )
