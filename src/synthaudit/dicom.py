"""DICOM series as volumes (issue 48): read one series with SimpleITK's series reader, refuse what
cannot be one volume (naming the folder and the reason), and convert it once to NIfTI.

Why here and not "convert first": hospitals and most public 3D datasets ship DICOM, and a
conversion script nobody kept is how a training set's geometry gets lost. The checks are the ones
a converter must make and dcm2niix reports: one series per folder, slices evenly spaced along the
slice normal (a missing slice shows as a gap), no gantry tilt (slices sheared along the normal
cannot be one rectilinear grid), per-slice positions (classic single-frame files), and pixel data
the installed codecs can decode. SimpleITK (GDCM) sorts the slices by position and applies the
rescale slope and intercept; the direction cosines are kept, and NIfTI written by SimpleITK holds
them (LPS to RAS).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

DCM2NIIX = ("to convert yourself, dcm2niix (https://github.com/rordenlab/dcm2niix) writes NIfTI that "
            "synthaudit init reads")
TOLERANCE_MM = 0.01  # slice spacing and shear tolerances: positions are stored as decimal strings
TOLERANCE_REL = 0.01
TILT_DEG = 0.1


class DicomError(ValueError):
    """A folder that cannot be read as one DICOM volume, with the folder and the reason."""


@dataclass
class Series:
    """One DICOM series found in a folder: its files sorted along the slice normal, and its tags."""

    folder: Path
    files: list[str]
    patient_id: str
    series_uid: str
    modality: str


def _tags(path: str) -> dict[str, str]:
    import SimpleITK as sitk

    r = sitk.ImageFileReader()
    r.SetFileName(path)
    r.LoadPrivateTagsOff()
    r.ReadImageInformation()
    return {k: r.GetMetaData(k).strip() for k in r.GetMetaDataKeys()}


def _floats(value: str, n: int, what: str, path: str, folder: Path) -> np.ndarray:
    try:
        out = np.array([float(x) for x in value.split("\\")], np.float64)
    except ValueError:
        out = np.array([])
    if out.size != n:
        raise DicomError(f"{folder}: {Path(path).name} has no usable {what} ({value!r}); {DCM2NIIX}")
    return out


@contextlib.contextmanager
def _itk_warnings_off():
    """ITK's global warning display off for a while. Why: GDCM prints a warning for every folder that
    holds no series ("No Series were found", naming the folder SimpleITK was built in, not the user's),
    before synthaudit's own message says what the folder holds."""
    import SimpleITK as sitk

    before = sitk.ProcessObject_GetGlobalWarningDisplay()
    sitk.ProcessObject_SetGlobalWarningDisplay(False)
    try:
        yield
    finally:
        sitk.ProcessObject_SetGlobalWarningDisplay(before)


def series_ids(folder: str | Path) -> list[str]:
    """The DICOM series UIDs GDCM finds in ``folder`` (its files only), without ITK's warnings."""
    import SimpleITK as sitk

    with _itk_warnings_off():
        return list(sitk.ImageSeriesReader().GetGDCMSeriesIDs(str(folder)))


def find_series(folder: str | Path) -> Series:
    """The one series in ``folder`` (its files only, not sub-folders), checked; :class:`DicomError`
    names the folder and what is wrong."""
    import SimpleITK as sitk

    folder = Path(folder)
    reader = sitk.ImageSeriesReader()
    uids = series_ids(folder)
    if not uids:
        raise DicomError(f"{folder}: no DICOM series (no file GDCM reads as DICOM image data)")
    if len(uids) > 1:
        raise DicomError(f"{folder}: {len(uids)} DICOM series in one folder ({', '.join(uids[:3])}"
                         f"{', ...' if len(uids) > 3 else ''}): put each series in a folder of its own")
    files = list(reader.GetGDCMSeriesFileNames(str(folder), uids[0]))
    tags = [_tags(f) for f in files]
    first = tags[0]
    frames = int(float(first.get("0028|0008", "1") or 1))
    if frames > 1 or len(files) < 2:
        why = (f"a multi-frame file ({frames} frames)" if frames > 1 else "a single slice")
        raise DicomError(f"{folder}: {why}; synthaudit reads classic series, one slice per file with its "
                         f"position; {DCM2NIIX}")
    iop = _floats(first.get("0020|0037", ""), 6, "orientation (0020,0037)", files[0], folder)
    normal = np.cross(iop[:3], iop[3:])
    if not math.isclose(np.linalg.norm(normal), 1.0, abs_tol=1e-3):
        raise DicomError(f"{folder}: {Path(files[0]).name}: orientation (0020,0037) {iop.tolist()} is not two unit "
                         "vectors at right angles")
    for f, t in zip(files[1:], tags[1:]):
        other = _floats(t.get("0020|0037", ""), 6, "orientation (0020,0037)", f, folder)
        if np.abs(other - iop).max() > 1e-4:
            raise DicomError(f"{folder}: {Path(f).name} has another orientation than {Path(files[0]).name}: "
                             "not one volume")
    pos = np.array([_floats(t.get("0020|0032", ""), 3, "position (0020,0032)", f, folder)
                    for f, t in zip(files, tags)])
    steps = np.diff(pos, axis=0)
    along = steps @ normal
    spacing = float(np.median(np.abs(along)))
    if spacing <= TOLERANCE_MM:
        raise DicomError(f"{folder}: slices at the same position (two acquisitions in one series?); {DCM2NIIX}")
    shear = np.linalg.norm(steps - np.outer(along, normal), axis=1)
    tilt = math.degrees(math.atan2(float(np.max(shear)), spacing))
    if tilt > TILT_DEG:
        raise DicomError(f"{folder}: gantry tilt: the slices are sheared by {tilt:.2f} degrees against their normal; "
                         f"resample it to a rectilinear grid first ({DCM2NIIX}, which corrects tilt)")
    gap = np.abs(np.abs(along) - spacing)
    bad = np.flatnonzero(gap > TOLERANCE_MM + TOLERANCE_REL * spacing)
    if bad.size:
        k = int(bad[0])
        raise DicomError(f"{folder}: uneven slice spacing: {abs(along[k]):.3g} mm between {Path(files[k]).name} and "
                         f"{Path(files[k + 1]).name} against {spacing:.3g} mm elsewhere (a missing slice?)")
    return Series(folder, files, first.get("0010|0020", ""), uids[0], first.get("0008|0060", ""))


# transfer syntaxes a user may meet, named in the refusal when the installed codecs cannot decode one
SYNTAX_NAMES = {
    "1.2.840.10008.1.2.4.50": "JPEG baseline", "1.2.840.10008.1.2.4.51": "JPEG extended",
    "1.2.840.10008.1.2.4.52": "JPEG extended, retired", "1.2.840.10008.1.2.4.57": "JPEG lossless",
    "1.2.840.10008.1.2.4.70": "JPEG lossless SV1", "1.2.840.10008.1.2.4.80": "JPEG-LS lossless",
    "1.2.840.10008.1.2.4.81": "JPEG-LS near-lossless", "1.2.840.10008.1.2.4.90": "JPEG 2000 lossless",
    "1.2.840.10008.1.2.4.91": "JPEG 2000", "1.2.840.10008.1.2.4.94": "JPIP referenced",
    "1.2.840.10008.1.2.4.95": "JPIP referenced deflate", "1.2.840.10008.1.2.4.100": "MPEG-2",
    "1.2.840.10008.1.2.4.102": "MPEG-4", "1.2.840.10008.1.2.4.201": "HTJ2K lossless",
    "1.2.840.10008.1.2.4.202": "HTJ2K lossless RPCL", "1.2.840.10008.1.2.4.203": "HTJ2K",
    "1.2.840.10008.1.2.4.110": "JPEG XL lossless", "1.2.840.10008.1.2.4.112": "JPEG XL",
    "1.2.840.10008.1.2.5": "RLE lossless", "1.2.840.10008.1.2.1.99": "deflated explicit VR",
}


def transfer_syntax(path: str) -> str:
    """The transfer syntax UID (0002,0010) from a Part 10 file's meta header, which is always explicit
    VR little endian (SimpleITK's reader does not expose group 0002); "?" where there is none."""
    import struct

    with open(path, "rb") as f:
        head = f.read(4096)
    if head[128:132] != b"DICM":
        return "?"
    i = 132
    while i + 8 <= len(head):
        group, element = struct.unpack_from("<HH", head, i)
        if group != 2:
            break
        vr = head[i + 4:i + 6]
        if vr in (b"OB", b"OW", b"OF", b"SQ", b"UT", b"UN"):
            length, i = struct.unpack_from("<I", head, i + 8)[0], i + 12
        else:
            length, i = struct.unpack_from("<H", head, i + 6)[0], i + 8
        if element == 0x0010:
            return head[i:i + length].rstrip(b"\x00 ").decode("ascii", "replace")
        i += length
    return "?"


def read_series(series: Series):
    """The series as one SimpleITK image (slices sorted by position, rescale applied, float32)."""
    import SimpleITK as sitk

    reader = sitk.ImageSeriesReader()
    reader.SetFileNames(series.files)
    try:
        image = reader.Execute()
    except RuntimeError as e:
        syntax = transfer_syntax(series.files[0])
        raise DicomError(f"{series.folder}: the pixel data cannot be decoded here (transfer syntax {syntax}"
                         f"{' (' + SYNTAX_NAMES[syntax] + ')' if syntax in SYNTAX_NAMES else ''}: "
                         f"{str(e).strip().splitlines()[-1]}); {DCM2NIIX}") from None
    return sitk.Cast(image, sitk.sitkFloat32)


def sources_digest(files: list[str]) -> str:
    """SHA-256 over the series' files (sorted by name, each file's name and bytes)."""
    h = hashlib.sha256()
    for f in sorted(files, key=lambda p: Path(p).name):
        h.update(Path(f).name.encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def record_of(volume: str | Path) -> Path:
    """The ``.json`` :func:`convert` writes beside a converted volume (its source series)."""
    volume = Path(volume)
    return volume.with_name(volume.name.removesuffix(".gz").removesuffix(".nii") + ".json")


def convert(folder: str | Path, out: str | Path, series: Series | None = None) -> dict:
    """One series folder to ``out`` (a .nii.gz), atomically, with ``out``'s ``.json`` beside it
    recording the source (folder, files, SHA-256, patient, series UID) and the time taken. A
    conversion whose record matches the source's digest is not redone. The input is only read.
    ``series``: the folder's :func:`find_series`, where the caller has checked it already."""
    import SimpleITK as sitk

    from .io import atomic_path

    start = time.perf_counter()
    out = Path(out)
    series = series or find_series(folder)
    digest = sources_digest(series.files)
    record_path = record_of(out)
    if out.is_file() and record_path.is_file():
        old = json.loads(record_path.read_text())
        if old.get("sha256") == digest:
            return old
    image = read_series(series)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out, ".nii.gz") as tmp:
        sitk.WriteImage(image, str(tmp), useCompression=True)
    record = {"source": str(Path(folder).resolve()), "n_files": len(series.files), "sha256": digest,
              "patient_id": series.patient_id, "series_uid": series.series_uid, "modality": series.modality,
              "size": list(image.GetSize()), "spacing_mm": list(image.GetSpacing()),
              "seconds": round(time.perf_counter() - start, 3)}
    with atomic_path(record_path, ".json") as tmp:
        Path(tmp).write_text(json.dumps(record, indent=1) + "\n")
    return record


def series_folders(folder: str | Path) -> list[Path]:
    """The series of a folder as ``init`` takes them: each sub-folder holding DICOM is one series
    (its name the volume's id); without such sub-folders, the folder itself where it holds DICOM."""
    folder = Path(folder)
    subs = [p for p in sorted(folder.iterdir()) if p.is_dir() and series_ids(p)]
    if subs:
        return subs
    return [folder] if series_ids(folder) else []


def convert_folder(folder: str | Path, out: str | Path, progress=None, patients: bool = True) -> list[dict]:
    """Every series of ``folder`` (:func:`series_folders`) to ``out/<id>.nii.gz``, and
    ``out/patients.tsv`` (id, patient_id from the series' PatientID) for init's --patient-ids.
    Every series is checked before any is converted, so a refusal leaves nothing half done.
    ``patients``: refuse series without a PatientID (False where the patients come from elsewhere,
    or for a generator's samples; then no patients.tsv is written where one lacks it)."""
    from .sources import ID_PATTERN

    folder, out = Path(folder), Path(out)
    found = series_folders(folder)
    if not found:
        raise DicomError(f"{folder}: no DICOM series in the folder or its sub-folders")
    for s in found:
        if not ID_PATTERN.match(s.name):
            raise DicomError(f"{s}: folder name {s.name!r} is not a usable id (letters, digits, '.', '_', '-'; "
                             "starting with a letter or digit): it names the volume")
    checked = {s: find_series(s) for s in found}  # every series before any is converted
    missing = [s.name for s in found if not checked[s].patient_id]
    if missing and patients:
        raise DicomError(f"{folder}: no PatientID (0010,0020) in {len(missing)} series, e.g. {missing[0]}: give the "
                         "patients with --patient-pattern or a table of your own")
    records = []
    for k, s in enumerate(found):
        r = convert(s, out / f"{s.name}.nii.gz", checked[s])
        records.append({"id": s.name, **r})
        if progress is not None:
            progress(f"{s.name}: {r['n_files']} slices, patient {r['patient_id'] or '?'} ({k + 1} of {len(found)})")
    if not missing:
        write_patients(out / "patients.tsv", records)
    return records


def write_patients(path: str | Path, records: list[dict]) -> None:
    """init's --patient-ids table (id, patient_id) of conversion records."""
    from .io import write_tsv

    write_tsv(path, [{"id": r["id"], "patient_id": r["patient_id"]} for r in records], ["id", "patient_id"])


def main(argv=None) -> int:
    """``synthaudit convert-dicom IN OUT``: one NIfTI per series, and OUT/patients.tsv."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="synthaudit convert-dicom", description=main.__doc__)
    ap.add_argument("folder", help="a folder of series folders (one series each), or one series folder")
    ap.add_argument("out", help="the folder for the NIfTI files (then: synthaudit init --training OUT "
                                "--patient-ids OUT/patients.tsv ...)")
    args = ap.parse_args(argv)
    try:
        records = convert_folder(args.folder, args.out, progress=print, patients=False)  # samples carry none
    except DicomError as e:
        print(f"synthaudit convert-dicom: {e}", file=sys.stderr)
        return 2
    seconds = sum(r["seconds"] for r in records)
    missing = sum(not r["patient_id"] for r in records)
    print(f"{len(records)} series -> {args.out} ({seconds:.1f} s, {seconds / len(records):.2f} s per series); "
          + (f"patients: {Path(args.out) / 'patients.tsv'}" if not missing else
             f"no patients.tsv: {missing} series without PatientID (give the patients with --patient-pattern)"))
    return 0
