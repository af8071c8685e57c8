#!/usr/bin/env python3
"""Convert the real CT/MRI volumes found inside registry packages to NIfTI.

Usage: python convert.py EXTRACT_ROOT OUT_ROOT
  EXTRACT_ROOT: folder holding one sub-folder per package archive, already unpacked
                (layout produced by fetch.sh: EXTRACT_ROOT/<pkgdir>/...)
  OUT_ROOT:     folder that gets nifti/<source>/<name>.nii.gz and inventory.tsv (one row
                per written volume: package, path inside it, what it is, shape, spacing,
                intensities).

Only numpy, nibabel and SimpleITK are needed. Orientation repairs (files that store none or a
wrong one) are noted per entry and were checked by eye on mid-slice montages.
"""
import csv
import glob
import gzip
import os
import plistlib
import shutil
import sys
import tarfile
import tempfile
import json

import numpy as np
import nibabel as nib
import SimpleITK as sitk

# ---------------------------------------------------------------------------
# Manifest: the packages fetch.sh unpacks (their folder under EXTRACT_ROOT), then the volumes in them.
# kind: nifti | inv3 | bbminc
# ---------------------------------------------------------------------------
PACKAGES = {  # pkgdir: (source, package==version, registry, licence)
    "deb_mricron-data": ("mricron-data", "mricron-data==1.2.20211006+dfsg-4", "Debian bookworm",
                         "BSD-3-Clause (mricron-data, Debian copyright Files: *)"),
    "deb_invesalius-examples": ("invesalius-examples", "invesalius-examples==3.1.99998-4", "Debian bookworm",
                                "GPL-2 (Debian copyright)"),
    "deb_insighttoolkit5-examples": ("itk-examples", "insighttoolkit5-examples==5.2.1-5+deb12u1", "Debian bookworm",
                                     "Apache-2.0 (ITK)"),
    "pypi_pycortex": ("pycortex", "pycortex==1.4.0 (sdist)", "PyPI", "BSD-2-Clause (pycortex)"),
    "npm_cornerstone-nifti-image-loader": ("cornerstone-nifti-image-loader", "cornerstone-nifti-image-loader@1.0.0",
                                           "npm", "MIT (package)"),
    "npm_brainbrowser": ("brainbrowser", "brainbrowser@2.3.0", "npm", "AGPL-3.0 (BrainBrowser)"),
}
M = []


def add(pkgdir, path, kind, name, modality, body, subject, real, note="", affine_override=None):
    source, pkg, registry, license_ = PACKAGES[pkgdir]
    M.append(dict(source=source, pkg=pkg, registry=registry, pkgdir=pkgdir, path=path, kind=kind,
                  name=name, modality=modality, body=body, subject=subject, real=real,
                  license=license_, note=note, affine_override=affine_override))


add("deb_mricron-data", "usr/share/mricron/templates/ch2.nii.gz", "nifti", "ch2_colin27_T1", "MRI T1w",
    "head (whole head, MNI space)", "Colin Holmes ('Colin27')", "real single subject, average of 27 scans, MNI-registered")
add("deb_mricron-data", "usr/share/mricron/templates/ch2better.nii.gz", "nifti", "ch2better_colin27_T1", "MRI T1w",
    "head", "Colin Holmes (same as ch2)", "real single subject (Colin27), 0.5 mm resampled/enhanced")
add("deb_invesalius-examples", "usr/share/doc/invesalius-examples/examples/Cranium.inv3", "inv3",
    "cranium_promed_ct0051", "CT", "head (skull)", "ProMED CT 0051 patient (anonymous)", "real acquisition",
    "InVesalius project file; axis orientation reconstructed from plist spacing (no direction cosines stored)")
add("deb_insighttoolkit5-examples",
    "usr/share/doc/insighttoolkit5-examples/examples/Data/KmeansTest_T1UCharRaw.nii.gz", "nifti", "kmeans_T1",
    "MRI T1w", "head", "unknown (ITK example data)", "real acquisition (ITK test image), low-res")
add("pypi_pycortex", "pycortex-1.4.0/filestore/db/S1/anatomicals/raw.nii.gz", "nifti", "S1_T1", "MRI T1w", "head",
    "pycortex subject 'S1'", "real acquisition (FreeSurfer-conformed 256^3)")
CORNERSTONE = "npm_cornerstone-nifti-image-loader"
add(CORNERSTONE, "package/examples/data/almi5_T1fs_conform.nii.gz", "nifti", "almi5_T1", "MRI T1w", "head",
    "subject 'almi5'", "real acquisition (FreeSurfer-conformed 256^3, uint8)",
    note="stored header says LIA but voxels are laid out L-A-S (checked visually); affine replaced by an LAS one",
    affine_override=[[-1, 0, 0, 128], [0, 1, 0, -128], [0, 0, 1, -128], [0, 0, 0, 1]])
add(CORNERSTONE, "package/examples/data/2878_1_1_localizera.nii.gz", "nifti", "localizer_2878a", "MRI localizer",
    "head", "subject 2878", "real acquisition (5 mm slices)")
add(CORNERSTONE, "package/examples/data/SC-N-3.nii", "nifti", "sunnybrook_SC-N-3_frame0",
    "MRI cine SSFP (frame 0 of 20)", "heart", "Sunnybrook Cardiac Data SC-N-3", "real acquisition")
add(CORNERSTONE, "package/examples/data/fMRI_Ret_bars.nii.gz", "nifti", "fMRI_Ret_bars_vol0", "MRI BOLD (vol 0 of 10)",
    "head", "unknown", "real acquisition")
for k in (1, 2):
    add("npm_brainbrowser", f"package/examples/models/structural{k}.mnc.raw.gz", "bbminc", f"structural{k}_T1",
        "MRI T1w", "head", "BrainBrowser demo subject (structural1 and structural2 look like the same person "
        "scanned twice; visual judgement)", "real acquisition (uint8 rescaled)")


# ---------------------------------------------------------------------------
def load_entry(e, root):
    src = os.path.join(root, e["pkgdir"], e["path"])
    if e["kind"] == "nifti":
        img = nib.load(src)
        data = np.asanyarray(img.dataobj)
        while data.ndim > 3:
            data = data[..., 0]
        aff = img.affine.copy()
        if e.get("affine_override") is not None:
            aff = np.array(e["affine_override"], float)
        out = nib.Nifti1Image(data, aff)
        out.header.set_xyzt_units("mm")
        out.set_qform(aff, code=int(img.header["qform_code"]) or 1)
        out.set_sform(aff, code=int(img.header["sform_code"]) or 1)
        return out, [src]
    if e["kind"] == "inv3":
        tmp = tempfile.mkdtemp()
        with tarfile.open(src) as t:
            t.extractall(tmp)
        mp = glob.glob(os.path.join(tmp, "*", "main.plist"))[0]
        with open(mp, "rb") as f:
            meta = plistlib.load(f)
        shape = tuple(meta["matrix"]["shape"])  # (slices, rows, cols)
        arr = np.fromfile(os.path.join(os.path.dirname(mp), meta["matrix"]["filename"]),
                          dtype=meta["matrix"]["dtype"]).reshape(shape)
        sx, sy, sz = meta["spacing"]
        shutil.rmtree(tmp)
        # InVesalius stores axial slices (z, y=row, x=col); image rows run anterior->posterior,
        # columns patient right->left (DICOM LPS convention).  Build an LPS image and let
        # SimpleITK write it (it converts to RAS for NIfTI).
        img = sitk.GetImageFromArray(arr)  # sitk index order (x, y, z)
        img.SetSpacing((float(sx), float(sy), float(sz)))
        # InVesalius flips rows on import (VTK bottom-up); visual QA shows rows run
        # posterior->anterior, so the row axis points to -P (anterior) in LPS.
        img.SetDirection((1, 0, 0, 0, -1, 0, 0, 0, 1))
        return img, [src]
    if e["kind"] == "bbminc":
        hdr = json.loads(gzip.open(src.replace(".raw.gz", ".header.gz")).read())
        raw = np.frombuffer(gzip.open(src).read(), dtype=np.uint8)
        order = hdr["order"]
        dims = [hdr[o]["space_length"] for o in order]
        arr = raw.reshape(dims)  # first = slowest varying (MINC convention)
        perm = [order.index(a) for a in ("xspace", "yspace", "zspace")]
        arr = np.ascontiguousarray(arr.transpose(perm))
        aff = np.eye(4)
        origin = np.zeros(3)
        for i, a in enumerate(("xspace", "yspace", "zspace")):
            c = np.array(hdr[a]["direction_cosines"], float)
            aff[:3, i] = c * hdr[a]["step"]
            origin += c * hdr[a]["start"]
        aff[:3, 3] = origin
        out = nib.Nifti1Image(arr, aff)  # MINC world space is RAS, same as NIfTI
        out.set_qform(aff, code=1)
        out.set_sform(aff, code=1)
        return out, [src, src.replace(".raw.gz", ".header.gz")]
    raise ValueError(e["kind"])


def save(img, path):
    if isinstance(img, nib.Nifti1Image):
        nib.save(img, path)
    else:
        sitk.WriteImage(img, path, useCompression=True)


def main():
    root, out = sys.argv[1], sys.argv[2]
    rows = []
    for e in M:
        src = os.path.join(root, e["pkgdir"], e["path"])
        if not os.path.exists(src):
            raise SystemExit(f"MISSING in {e['pkg']}: {e['path']}")
        img, _ = load_entry(e, root)
        nd = os.path.join(out, "nifti", e["source"])
        os.makedirs(nd, exist_ok=True)
        p = os.path.join(nd, e["name"] + ".nii.gz")
        save(img, p)
        # stats from the written file (what downstream code will see)
        w = nib.load(p)
        d = np.asanyarray(w.dataobj).astype(np.float64)
        q = np.percentile(d, [0, 1, 50, 99, 100])
        zooms = w.header.get_zooms()[:3]
        ax = "".join(nib.aff2axcodes(w.affine))
        rows.append(dict(e, nifti=os.path.relpath(p, out), shape="x".join(map(str, w.shape)),
                         spacing="x".join(f"{z:.3g}" for z in zooms), orient=ax,
                         stats="/".join(f"{v:.4g}" for v in q), dtype=str(w.get_data_dtype())))
        print(f"{e['source']:32s} {e['name']:28s} {rows[-1]['shape']:14s} {rows[-1]['spacing']:16s} {ax} {rows[-1]['stats']}")
    with open(os.path.join(out, "inventory.tsv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0].keys()), delimiter="\t")
        wr.writeheader()
        wr.writerows(rows)


if __name__ == "__main__":
    main()
