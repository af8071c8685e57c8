"""DICOM series read as one volume or refused with the folder and the reason (issue 48), on series
the tests write with SimpleITK: CT slices with positions, orientation, patient and rescale tags."""

from __future__ import annotations

import json
import locale
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from synthaudit import dicom
from synthaudit.review.card import verify as card_verify

SAGITTAL = (0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0)  # rows along y, columns along z, slices along x


@pytest.fixture(autouse=True)
def _locale_kept():
    """GDCM's DICOM writer (these tests' series; synthaudit only reads DICOM) sets the process's locale to
    "C", after which open() decodes as ASCII: every later test in the worker that reads a UTF-8 file failed."""
    saved = locale.setlocale(locale.LC_ALL)
    yield
    locale.setlocale(locale.LC_ALL, saved)


def write_series(folder: Path, array_zyx: np.ndarray, spacing=(0.8, 0.7, 2.5), origin=(-100.0, -120.0, 30.0),
                 direction=(1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0), patient="P01",
                 uid="1.2.826.0.1.3680043.2.1125.1.1", intercept=-1024, skip=(), tilt_mm=0.0, name="{k:03d}.dcm",
                 compressor=None):
    """One slice per file; SimpleITK stores (value - intercept) / slope, so reading applies the rescale.
    The process's locale is restored after GDCM's writer (see _locale_kept)."""
    saved = locale.setlocale(locale.LC_ALL)
    try:
        return _write_series(folder, array_zyx, spacing, origin, direction, patient, uid, intercept, skip, tilt_mm, name,
                             compressor)
    finally:
        locale.setlocale(locale.LC_ALL, saved)


def _write_series(folder, array_zyx, spacing, origin, direction, patient, uid, intercept, skip, tilt_mm, name,
                  compressor):
    folder.mkdir(parents=True, exist_ok=True)
    img = sitk.GetImageFromArray(array_zyx.astype(np.int16))
    img.SetSpacing(spacing)
    img.SetOrigin(origin)
    img.SetDirection(direction)
    d = np.array(direction).reshape(3, 3)
    iop = "\\".join(f"{x:g}" for x in (*d[:, 0], *d[:, 1]))
    writer = sitk.ImageFileWriter()
    writer.KeepOriginalImageUIDOn()
    if compressor:  # GDCM's codecs: "JPEG2000" (lossless), "JPEG", "JPEGLS", "RLE"
        writer.SetUseCompression(True)
        writer.SetCompressor(compressor)
    for k in range(img.GetDepth()):
        if k in skip:
            continue
        s = img[:, :, k]
        pos = np.array(img.TransformIndexToPhysicalPoint((0, 0, k))) + tilt_mm * k * d[:, 1]
        for tag, value in [("0008|0060", "CT"), ("0010|0020", patient), ("0020|000e", uid), ("0020|000d", uid + ".0"),
                           ("0020|0037", iop), ("0020|0032", "\\".join(f"{x:.6f}" for x in pos)),
                           ("0020|0013", str(k + 1)), ("0008|0016", "1.2.840.10008.5.1.4.1.1.2"),
                           ("0008|0018", f"{uid}.{k + 1}"), ("0028|1052", str(intercept)), ("0028|1053", "1")]:
            s.SetMetaData(tag, value)
        writer.SetFileName(str(folder / name.format(k=k)))
        writer.Execute(s)
    return folder


def _volume(shape=(7, 10, 12), seed=0):
    return np.random.default_rng(seed).integers(-1000, 1500, size=shape)


def _hashes(folder: Path) -> dict:
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.iterdir())}


def test_a_series_converts_to_the_same_voxels_spacing_and_direction_and_only_once(tmp_path):
    arr = _volume()
    src = write_series(tmp_path / "in" / "p01_ct", arr, direction=SAGITTAL, patient="PAT-7")
    before = _hashes(src)
    out = tmp_path / "ws" / "data" / "converted" / "training" / "p01_ct.nii.gz"
    record = dicom.convert(src, out)
    img = sitk.ReadImage(str(out))
    np.testing.assert_array_equal(sitk.GetArrayFromImage(img), arr)  # to the voxel, the rescale undone
    assert img.GetSpacing() == pytest.approx((0.8, 0.7, 2.5))
    assert img.GetOrigin() == pytest.approx((-100.0, -120.0, 30.0), abs=1e-4)
    assert img.GetDirection() == pytest.approx(SAGITTAL, abs=1e-6)
    assert record["patient_id"] == "PAT-7" and record["n_files"] == 7 and len(record["sha256"]) == 64
    assert json.loads(out.with_name("p01_ct.json").read_text())["sha256"] == record["sha256"]
    assert _hashes(src) == before  # the input is only read
    written = out.stat().st_mtime_ns
    assert dicom.convert(src, out)["sha256"] == record["sha256"] and out.stat().st_mtime_ns == written  # not redone
    # files in another order on disk (names reversed): GDCM sorts by position, the same volume
    rev = write_series(tmp_path / "in" / "reversed", arr, direction=SAGITTAL, name="{k:03d}.dcm")
    for p in sorted(rev.iterdir()):
        p.rename(rev / f"z{99 - int(p.stem):03d}.dcm")
    np.testing.assert_array_equal(sitk.GetArrayFromImage(dicom.read_series(dicom.find_series(rev))), arr)


def test_a_changed_series_is_converted_again(tmp_path):
    src = write_series(tmp_path / "s", _volume(seed=1))
    out = tmp_path / "c" / "s.nii.gz"
    first = dicom.convert(src, out)["sha256"]
    write_series(src, _volume(seed=2))
    assert dicom.convert(src, out)["sha256"] != first
    np.testing.assert_array_equal(sitk.GetArrayFromImage(sitk.ReadImage(str(out))), _volume(seed=2))


def test_two_series_in_one_folder_are_refused_naming_the_folder(init_says_only_its_own, tmp_path):
    folder = write_series(tmp_path / "mixed", _volume(), uid="1.2.3.4.1", name="a{k:03d}.dcm")
    write_series(folder, _volume(), uid="1.2.3.4.2", name="b{k:03d}.dcm")
    with pytest.raises(dicom.DicomError, match=rf"{folder}: 2 DICOM series in one folder .*a folder of its own"):
        dicom.find_series(folder)


def test_a_missing_slice_is_refused_as_uneven_spacing(init_says_only_its_own, tmp_path):
    folder = write_series(tmp_path / "gap", _volume(), skip=(3,))
    with pytest.raises(dicom.DicomError, match=rf"{folder}: uneven slice spacing: 5 mm between 002.dcm and 004.dcm "
                                               r"against 2.5 mm elsewhere \(a missing slice\?\)"):
        dicom.find_series(folder)


def test_gantry_tilt_is_refused(init_says_only_its_own, tmp_path):
    folder = write_series(tmp_path / "tilt", _volume(), tilt_mm=0.4)  # 0.4 mm shear per 2.5 mm slice: 9.1 degrees
    with pytest.raises(dicom.DicomError, match=rf"{folder}: gantry tilt: the slices are sheared by 9.09 degrees"):
        dicom.find_series(folder)


def test_one_slice_a_multi_frame_file_and_no_dicom_are_refused(init_says_only_its_own, tmp_path):
    one = write_series(tmp_path / "one", _volume(shape=(1, 10, 12)))
    with pytest.raises(dicom.DicomError, match=rf"{one}: a single slice.*dcm2niix"):
        dicom.find_series(one)
    multi = tmp_path / "multi"
    multi.mkdir()
    # one file of 7 frames (GDCM writes a 3D image so; unsigned: it refuses signed 3D data)
    sitk.WriteImage(sitk.GetImageFromArray((_volume() + 1000).astype(np.uint16)), str(multi / "all.dcm"))
    with pytest.raises(dicom.DicomError, match=rf"{multi}: a multi-frame file \(7 frames\)"):
        dicom.find_series(multi)
    text = tmp_path / "notes"
    text.mkdir()
    (text / "readme.txt").write_text("not an image")
    with pytest.raises(dicom.DicomError, match=rf"{text}: no DICOM series"):
        dicom.find_series(text)


def test_compressed_pixel_data_is_read_where_a_codec_exists_and_refused_naming_the_syntax_where_not(init_says_only_its_own, tmp_path):
    """JPEG 2000 lossless (GDCM's OpenJPEG) gives the source voxels; the same files declaring JPIP referenced
    pixel data (1.2.840.10008.1.2.4.94: the pixels are elsewhere, at a URL; no installed codec reads that)
    are refused naming the folder and the transfer syntax."""
    arr = _volume()
    j2k = write_series(tmp_path / "j2k", arr, compressor="JPEG2000")
    assert dicom.transfer_syntax(str(next(j2k.iterdir()))) == "1.2.840.10008.1.2.4.90"
    got = dicom.read_series(dicom.find_series(j2k))
    np.testing.assert_array_equal(sitk.GetArrayFromImage(got), arr)
    jpip = tmp_path / "jpip"
    jpip.mkdir()
    for f in sorted(j2k.iterdir()):  # the same length, so the meta header's group length still holds
        (jpip / f.name).write_bytes(f.read_bytes().replace(b"1.2.840.10008.1.2.4.90", b"1.2.840.10008.1.2.4.94"))
    with pytest.raises(dicom.DicomError, match=rf"{jpip}: the pixel data cannot be decoded here \(transfer syntax "
                                               r"1\.2\.840\.10008\.1\.2\.4\.94 \(JPIP referenced\).*dcm2niix"):
        dicom.read_series(dicom.find_series(jpip))
    plain = write_series(tmp_path / "plain", arr)
    assert dicom.transfer_syntax(str(next(plain.iterdir()))) == "1.2.840.10008.1.2"  # implicit VR little endian


def test_convert_dicom_then_init_reads_the_volumes_and_patients(tmp_path, capsys):
    """The route init's refusal names: a folder of series folders -> synthaudit convert-dicom -> init with
    --patient-ids; the converted volumes equal the series, the patients are their PatientIDs."""
    from synthaudit.cli import main
    from synthaudit.workspace.discover import WorkspaceError, nifti_files

    vols = {f"scan{k}": _volume(seed=10 + k) for k in range(3)}
    for k, (name, arr) in enumerate(vols.items()):
        write_series(tmp_path / "train" / name, arr, patient=f"P{k // 2}", uid=f"1.2.3.{k}")
    with pytest.raises(WorkspaceError, match=r"no NIfTI files .* it holds 3 DICOM series: convert them first with "
                                             r"`synthaudit convert-dicom"):
        nifti_files(tmp_path / "train", "training")
    assert main(["convert-dicom", str(tmp_path / "train"), str(tmp_path / "nifti")]) == 0
    assert "3 series ->" in capsys.readouterr().out
    files = nifti_files(tmp_path / "nifti", "training")
    assert sorted(files) == ["scan0", "scan1", "scan2"]
    for name, arr in vols.items():
        np.testing.assert_array_equal(sitk.GetArrayFromImage(sitk.ReadImage(str(files[name]))), arr)
    assert (tmp_path / "nifti/patients.tsv").read_text() == "id\tpatient_id\nscan0\tP0\nscan1\tP0\nscan2\tP1\n"
    # a bad series among good ones: refused before anything is written, naming it
    write_series(tmp_path / "bad" / "ok", _volume())
    write_series(tmp_path / "bad" / "gappy", _volume(), skip=(2,))
    write_series(tmp_path / "samples" / "gen0", _volume(), patient="", uid="1.2.3.9")  # a generator's: no PatientID
    assert main(["convert-dicom", str(tmp_path / "samples"), str(tmp_path / "samples_out")]) == 0
    assert "no patients.tsv: 1 series without PatientID" in capsys.readouterr().out
    assert (tmp_path / "samples_out/gen0.nii.gz").is_file() and not (tmp_path / "samples_out/patients.tsv").exists()
    assert main(["convert-dicom", str(tmp_path / "bad"), str(tmp_path / "bad_out")]) == 2
    assert f"{tmp_path / 'bad' / 'gappy'}: uneven slice spacing" in capsys.readouterr().err
    assert not (tmp_path / "bad_out").exists()


def _dicom_folders(root: Path, n_train_patients=5, n_heldout_patients=2, seed=3) -> dict:
    """Training, held-out and synthetic folders of DICOM series (two scans per patient, PatientID set),
    and the same volumes as NIfTI written by SimpleITK (the same header a conversion gives)."""
    rng = np.random.default_rng(seed)
    vols = {}
    for p in range(n_train_patients + n_heldout_patients):
        base = rng.integers(-1000, 1000, size=(6, 9, 8))
        role = "training" if p < n_train_patients else "heldout"
        for s in range(2):
            vols[(role, f"pat{p}_s{s}", f"PID{p:02d}")] = base + rng.integers(-20, 20, size=base.shape)
    vols[("synthetic", "gen_a", "G")] = vols[("training", "pat0_s1", "PID00")] + 3
    vols[("synthetic", "gen_b", "G")] = rng.integers(-1000, 1000, size=(6, 9, 8))
    for k, ((role, name, pid), arr) in enumerate(vols.items()):
        write_series(root / "dicom" / role / name, arr, spacing=(2.0, 2.0, 2.0), patient=pid, uid=f"1.2.4.{k}")
        img = sitk.GetImageFromArray(arr.astype(np.float32))
        img.SetSpacing((2.0, 2.0, 2.0))
        img.SetOrigin((-100.0, -120.0, 30.0))
        (root / "nifti" / role).mkdir(parents=True, exist_ok=True)
        sitk.WriteImage(img, str(root / "nifti" / role / f"{name}.nii.gz"))
    return vols


def test_init_converts_dicom_folders_into_the_workspace_with_patients_from_patient_id(tmp_path):
    from synthaudit.io import read_tsv
    from synthaudit.workspace import Inputs, write_workspace

    vols = _dicom_folders(tmp_path)
    d = tmp_path / "dicom"
    before = {p: p.read_bytes() for p in sorted(d.rglob("*.dcm"))}
    messages = []
    result = write_workspace(tmp_path / "ws", Inputs(training=d / "training", heldout=d / "heldout",
                                                     synthetic=d / "synthetic", registered=True),
                             progress=messages.append)
    ws = tmp_path / "ws"
    # the plan names the workspace's own files: the staging folder the series were converted in is gone
    assert ".tmp-" not in json.dumps(result) and ".tmp-" not in (ws / "data/estimate.json").read_text()
    assert f"from {ws / 'data/converted/patients.tsv'}" in json.dumps(result), result
    assert (ws / "data/converted/patients.tsv").is_file()
    rows = read_tsv(ws / "data/manifest.tsv")
    assert {r["id"]: r["patient_id"] for r in rows} == {name: pid for (role, name, pid) in vols if role != "synthetic"}
    assert all(r["image"] == f"converted/{'training' if r['role'] == 'train' else 'heldout'}/{r['id']}.nii.gz"
               for r in rows)  # relative to data/: the workspace can move
    params = (ws / "params.yaml").read_text()
    assert "folder: data/converted/synthetic" in params
    for (role, name, _), arr in vols.items():
        got = sitk.ReadImage(str(ws / "data/converted" / role / f"{name}.nii.gz"))
        np.testing.assert_array_equal(sitk.GetArrayFromImage(got), arr)
        assert got.GetSpacing() == pytest.approx((2.0, 2.0, 2.0))
    assert any("DICOM" in m for m in messages)
    assert {p: p.read_bytes() for p in sorted(d.rglob("*.dcm"))} == before  # the inputs are only read
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    # the card names each volume's series, so a reader holding the DICOM can check it
    from synthaudit.cli import main

    assert main(["card", str(ws)]) == 0
    card = json.loads((ws / "results/audit_card.json").read_text())
    rows = {r["id"]: r for r in card["files"]["audit"]}
    assert rows["gen_a"]["dicom"]["series_folder"] == "gen_a" and len(rows["gen_a"]["dicom"]["sha256"]) == 64
    lines, status = card_verify(ws / "results/audit_card.json", d / "synthetic")
    assert status == 0 and lines[-1] == "2 of 2 DICOM series match the card", lines
    changed = tmp_path / "changed"
    write_series(changed / "gen_b", vols[("synthetic", "gen_b", "G")] + 1, spacing=(2.0, 2.0, 2.0), uid="1.2.6.1")
    lines, status = card_verify(ws / "results/audit_card.json", changed)
    assert status == 1 and lines[0].startswith(f"NOT ON CARD  {changed / 'gen_b'}"), lines
    # a refused series leaves no workspace and no temporary behind
    write_series(d / "training" / "pat9_s0", _volume(shape=(6, 9, 8)), spacing=(2.0, 2.0, 2.0), skip=(2,),
                 uid="1.2.5.1")
    from synthaudit.workspace.discover import WorkspaceError

    with pytest.raises(WorkspaceError, match="pat9_s0: uneven slice spacing"):
        write_workspace(tmp_path / "ws2", Inputs(training=d / "training", synthetic=d / "synthetic", registered=True),
                        progress=lambda m: None)
    assert not (tmp_path / "ws2").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_series_without_patient_id_are_refused_only_where_the_patients_come_from_them(init_says_only_its_own, tmp_path):
    """A generator's samples carry no PatientID (or a dummy); real series without one are refused only
    where init would take the patients from them (no --patient-pattern or --patient-ids)."""
    from synthaudit.workspace import Inputs, write_workspace
    from synthaudit.workspace.discover import WorkspaceError

    vols = _dicom_folders(tmp_path)
    d = tmp_path / "dicom"
    anonymous = tmp_path / "anonymous"
    for k, ((role, name, _), arr) in enumerate(vols.items()):
        write_series(anonymous / role / name, arr, spacing=(2.0, 2.0, 2.0), patient="", uid=f"1.2.7.{k}")
    assert dicom.find_series(anonymous / "synthetic" / "gen_a").patient_id == ""
    # samples without PatientID beside real series with theirs: converted, the patients from the real ones
    write_workspace(tmp_path / "ws", Inputs(training=d / "training", heldout=d / "heldout",
                                            synthetic=anonymous / "synthetic", registered=True), progress=lambda m: None)
    assert (tmp_path / "ws/data/converted/synthetic/gen_b.nii.gz").is_file()
    # real series without PatientID: refused before anything is converted, unless a pattern gives the patients
    with pytest.raises(WorkspaceError, match=rf"{anonymous / 'training'}: no PatientID \(0010,0020\) in 10 series"):
        write_workspace(tmp_path / "ws2", Inputs(training=anonymous / "training", heldout=anonymous / "heldout",
                                                 synthetic=d / "synthetic", registered=True), progress=lambda m: None)
    write_workspace(tmp_path / "ws3", Inputs(training=anonymous / "training", heldout=anonymous / "heldout",
                                             synthetic=d / "synthetic", registered=True,
                                             patient_pattern=r"^(pat\d+)_"), progress=lambda m: None)
    from synthaudit.io import read_tsv

    assert {r["patient_id"] for r in read_tsv(tmp_path / "ws3/data/manifest.tsv")} == {f"pat{p}" for p in range(7)}
