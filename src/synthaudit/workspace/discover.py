"""The user's folders as one manifest: NIfTI files found (DICOM series converted first, an nnU-Net raw
dataset read in place), unreadable ones named, patients from a table or a pattern, case collisions
refused."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..io import read_tsv
from ..sources import (ID_PATTERN, MIN_TRAINING, NIFTI_SUFFIXES, SourceError, nnunet_dataset, read_manifest,
                       read_nnunet, strip_nifti)
from ..sources import check_case_collisions as _case_collisions


MANIFEST_COLUMNS = ["id", "image", "label", "patient_id", "role"]


MIN_HELDOUT_AT_5_PERCENT = 19  # relict.calibration: 1 / (n + 1) <= 0.05


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
    timing: bool = False  # time the heavy stages on the samples for the estimate (the CLI's default; .timing)


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
        hint = _dicom_hint(folder)
        if hint:
            raise WorkspaceError(f"{folder}: no NIfTI files (*.nii, *.nii.gz) in the {what} folder" + hint)
        raise WorkspaceError(f"{folder}: no volumes in the {what} folder: init reads NIfTI files (*.nii, *.nii.gz) "
                             f"and DICOM series, and found neither; {_found_instead(folder)}")
    bad = [problem for problem in map(unreadable, files.values()) if problem]
    if bad:
        raise WorkspaceError(f"{len(bad)} unreadable file(s) in the {what} folder:\n  " + "\n  ".join(bad[:20])
                             + (f"\n  ... and {len(bad) - 20} more" if len(bad) > 20 else ""))
    return files


def _found_instead(folder: Path) -> str:
    """What a folder without volumes holds instead, in words: NIfTI files one or two folders down (how
    many, and where), other files (how many of each kind), or nothing. Why: "no NIfTI files" alone sent
    users who gave the folder above their volumes looking for a broken file."""
    nested: dict[Path, int] = {}
    for pattern in ("*/*", "*/*/*"):  # two levels: a folder of patients' folders; deeper is not looked at
        for p in folder.glob(pattern):
            if p.name.endswith(NIFTI_SUFFIXES) and p.is_file():
                nested[p.parent] = nested.get(p.parent, 0) + 1
    if nested:
        where = sorted(nested.items(), key=lambda kv: (-kv[1], str(kv[0])))
        shown = ", ".join(f"{n} in {d.relative_to(folder)}/" for d, n in where[:3])
        more = f", and {len(where) - 3} more folder(s)" if len(where) > 3 else ""
        return (f"it holds {sum(nested.values())} NIfTI file(s) in sub-folders ({shown}{more}): give the folder "
                "that holds the files themselves (one volume per file)")
    others = [p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")]
    if others:
        kinds: dict[str, int] = {}
        for p in others:
            last = p.suffix.lower()
            kind = "".join(p.suffixes[-2:]).lower() if last == ".gz" and len(p.suffixes) > 1 else last
            kind = kind or "no extension"
            kinds[kind] = kinds.get(kind, 0) + 1
        listed = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))[:4])
        return f"it holds {len(others)} other file(s) ({listed}), e.g. {sorted(others)[0].name}"
    if any(p.is_dir() for p in folder.iterdir()):
        return "it holds only sub-folders, and no volume within two levels"
    return "the folder is empty"


def _dicom_hint(folder: Path) -> str:
    """What to do where the folder holds DICOM series instead (issue 48)."""
    from ..dicom import series_folders

    try:
        found = series_folders(folder)
    except (OSError, RuntimeError):
        return ""
    if not found:
        return ""
    return (f"; it holds {len(found)} DICOM series: convert them first with `synthaudit convert-dicom {folder} OUT` "
            "(one NIfTI per series folder, checked, and OUT/patients.tsv from their PatientID for --patient-ids), "
            "or with dcm2niix")


def is_dicom_folder(folder: Path | None) -> bool:
    """A folder without NIfTI files that holds DICOM series (itself, or one per sub-folder)."""
    from ..dicom import series_folders

    if folder is None or not Path(folder).is_dir() or is_nnunet_folder(folder):
        return False
    if any(p.is_file() and p.name.endswith(NIFTI_SUFFIXES) for p in Path(folder).iterdir()):
        return False
    try:
        return bool(series_folders(folder))
    except (OSError, RuntimeError):
        return False


def convert_dicom_inputs(inp: Inputs, out: Path, progress=print) -> Inputs:
    """The training, held-out and synthetic folders that hold DICOM series, converted into ``out/<role>/``
    (synthaudit.dicom: checked, one NIfTI per series folder), and ``inp`` pointing at them. The patients
    are the series' PatientID where every real-scan folder is DICOM and no --patient-ids or
    --patient-pattern is given (a table ``out/patients.tsv``)."""
    import dataclasses

    from ..dicom import DicomError, convert_folder, write_patients

    changes, records = {}, []
    real = [f for f in ("training", "heldout") if getattr(inp, f)]
    # the series' PatientIDs are the patients only where every real-scan folder is DICOM and none are given
    from_dicom = all(is_dicom_folder(getattr(inp, f)) for f in real) and not inp.patient_ids and not inp.patient_pattern
    for field_name, role in (("training", "training"), ("heldout", "heldout"), ("synthetic", "synthetic")):
        folder = getattr(inp, field_name)
        if not is_dicom_folder(folder):
            continue
        progress(f"converting the DICOM series of {folder} (the {role} folder) into the workspace ...")
        try:
            got = convert_folder(folder, Path(out) / role, progress=lambda m: progress("  " + m),
                                 patients=from_dicom and role != "synthetic")
        except DicomError as e:
            raise WorkspaceError(str(e)) from None
        changes[field_name] = Path(out) / role
        if role != "synthetic":
            records += got
    if records and from_dicom:
        table = Path(out) / "patients.tsv"
        write_patients(table, records)
        changes["patient_ids"] = table
        progress(f"patients: the series' PatientID ({len({r['patient_id'] for r in records})} patients)")
    return dataclasses.replace(inp, **changes)


def is_nnunet_folder(folder: Path | None) -> bool:
    """An nnU-Net raw dataset folder (``imagesTr/`` inside), as ``--nnunet`` or ``--training`` may name."""
    return folder is not None and Path(folder).is_dir() and (Path(folder) / "imagesTr").is_dir()


def nnunet_inputs(inp: Inputs, progress=print) -> Inputs:
    """``inp`` with what an nnU-Net raw dataset (the training folder) says: its label maps
    (``labelsTr/``) as ``--labels`` and its class names (``dataset.json``) as ``--classes``, where
    the user gave neither. The scans themselves are read by :func:`build_manifest`."""
    import dataclasses

    if not is_nnunet_folder(inp.training):
        return inp
    try:
        meta = nnunet_dataset(inp.training)
    except SourceError as e:
        raise WorkspaceError(str(e)) from None
    changes = {}
    labels = Path(inp.training) / "labelsTr"
    if inp.labels is None and labels.is_dir() and any(p.name.endswith(NIFTI_SUFFIXES) for p in labels.iterdir()):
        changes["labels"] = labels
    if not inp.classes and meta.classes:
        changes["classes"] = meta.classes
    if meta.note:
        progress(meta.note)
    held = Path(inp.training) / "imagesTs"
    progress(f"{inp.training}: an nnU-Net raw dataset: training scans from imagesTr/"
             + (", label maps from labelsTr/" if "labels" in changes else "")
             + (f", classes {', '.join(changes['classes'])} from dataset.json" if "classes" in changes else "")
             + (f"; held-out scans from {inp.heldout} (--heldout; imagesTs/ not used)" if inp.heldout and held.is_dir()
                else "; held-out scans from imagesTs/ (nnU-Net's test cases: the generator must never have "
                     "trained on them; else give --heldout)" if held.is_dir() else ""))
    return dataclasses.replace(inp, **changes)


def _nnunet_rows(inp: Inputs) -> list[dict]:
    """Manifest rows of an nnU-Net raw dataset (cases as ids, ``_0000`` dropped; imagesTs/ held out
    unless --heldout names another folder)."""
    import dataclasses

    try:
        scans = read_nnunet(inp.training)
    except SourceError as e:
        raise WorkspaceError(str(e)) from None
    if inp.heldout:
        scans = [s for s in scans if s.role == "train"]
    if inp.labels is not None and Path(inp.labels).resolve() != (Path(inp.training) / "labelsTr").resolve():
        scans = [dataclasses.replace(s, label=None) for s in scans]  # --labels names the user's own label maps
    bad = [problem for problem in map(unreadable, [s.image for s in scans] + [s.label for s in scans if s.label])
           if problem]
    if bad:
        raise WorkspaceError(f"{len(bad)} unreadable file(s) in {inp.training}:\n  " + "\n  ".join(bad[:20]))
    return [{"id": s.id, "image": str(Path(s.image).resolve()), "label": str(Path(s.label).resolve()) if s.label
             else "", "role": s.role} for s in scans]


def within(rows: list[dict], data: Path) -> list[dict]:
    """Manifest rows with the paths inside ``data`` (the workspace's data/, where DICOM series were
    converted) made relative to it, as the manifest's paths are read."""
    base = Path(data).resolve()
    out = []
    for r in rows:
        r = dict(r)
        for key in ("image", "label"):
            if r.get(key) and Path(r[key]).resolve().is_relative_to(base):
                r[key] = str(Path(r[key]).resolve().relative_to(base))
        out.append(r)
    return out


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
        if is_nnunet_folder(inp.training):
            found = _nnunet_rows(inp)
            images = {r["id"]: r["image"] for r in found}
            roles = {r["id"]: r["role"] for r in found}
            given = {r["id"]: r["label"] for r in found}
        else:
            images = nifti_files(inp.training, "training")
            roles, given = {i: "train" for i in images}, {}
        if inp.heldout:
            held = nifti_files(inp.heldout, "held-out")
            both = sorted(set(held) & set(images))
            if both:
                raise WorkspaceError(f"{inp.heldout}: id(s) also in the training folder: {both[:5]}")
            images.update(held)
            roles.update({i: "heldout" for i in held})
        who, how = patients(list(images), inp.patient_ids, inp.patient_pattern)
        rows = [{"id": i, "image": str(images[i]), "label": given.get(i, ""), "patient_id": who[i], "role": roles[i]}
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
    from ..io import VolumeError, load_volume

    try:
        return load_volume(path)
    except VolumeError as e:
        raise WorkspaceError(str(e)) from None
