"""FRD's PyRadiomics features kept by the content of what they describe, so that each volume is
extracted once per workspace.

Why: the same scan reaches FRD's extraction many times. A synthetic set holds exact copies of
training scans (a replica is one), two synthetic sets audited against one training set share
samples, and a rerun after a params change that leaves FRD alone would extract everything again.
PyRadiomics costs seconds per volume, so a copy costs as much as a new scan.

The key is the SHA-256 of the file's bytes (decompressed for ``.gz``: gzip stamps a time into its
header) and, for the per-class features, of the label map's and the class count, together with a
*recipe*: FRD's settings file, the extraction code (this folder's radiomics modules), the versions
of the libraries whose arithmetic gives the numbers, and the numerics mode. Equal keys mean the
same inputs to the same computation, so a cached row is the row the extraction would give, bit for
bit (finite floats are stored as JSON's shortest round-trip text, the others as their bits;
tests/test_frd.py checks it). A change
of code, settings or library changes the recipe and misses the cache; nothing is invalidated by
hand. Failures are not stored. Entries are written atomically, so two jobs extracting the same scan
at once both write the same entry and neither reads half of one.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import math
import struct
from collections.abc import Sequence
from pathlib import Path

Row = dict[str, float]
# the modules whose code computes the features: a change to any of them changes the recipe (the modules
# radiomics.py's extraction imports from this folder: tests/test_frd.py checks the list against its imports)
_CODE = ("radiomics.py", "texture_matrices.py", "first_order.py", "binning.py", "frd_extraction_3d.yaml")
_LIBRARIES = ("radiomics", "SimpleITK", "pywt", "numpy", "scipy", "skimage", "numba")


@functools.lru_cache(maxsize=1)
def recipe() -> str:
    """The digest of everything but the inputs that the features depend on."""
    import importlib.metadata as md
    import os

    h = hashlib.sha256(b"synthaudit FRD radiomics v1\0")
    here = Path(__file__).parent
    for name in _CODE:
        path = here / name
        h.update(name.encode() + b"\0" + (path.read_bytes() if path.exists() else b"") + b"\0")
    for lib in _LIBRARIES:
        dist = {"radiomics": "pyradiomics-bhklab", "pywt": "PyWavelets", "skimage": "scikit-image"}.get(lib, lib)
        try:
            version = md.version(dist)
        except md.PackageNotFoundError:
            version = "absent"
        h.update(f"{lib}={version}\0".encode())
    h.update(f"numerics={os.environ.get('SYNTHAUDIT_NUMERICS', 'portable')}\0".encode())
    return h.hexdigest()


def content_digest(path: str | Path) -> str:
    """SHA-256 of a file's bytes, of the decompressed bytes for a gzip file."""
    h = hashlib.sha256()
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except (OSError, EOFError) as e:
        raise ValueError(f"{path}: cannot be read for FRD's feature cache ({e})") from None
    return h.hexdigest()


def _encode(value: float) -> float | str:
    """A finite float as itself (JSON keeps it exactly), NaN and infinities as their 64 bits in hex: JSON
    has neither, and a NaN's sign bit (NumPy's 0/0 sets it) reaches the saved feature file."""
    return value if math.isfinite(value) else struct.pack(">d", value).hex()


def _decode(value: float | str) -> float:
    return struct.unpack(">d", bytes.fromhex(value))[0] if isinstance(value, str) else float(value)


class FeatureCache:
    """Features by content key in ``folder`` (one small JSON file each, in 256 subfolders)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def key(self, image: str | Path, label: str | Path | None = None, n_classes: int | None = None) -> str:
        parts = [recipe(), content_digest(image)]
        if label is not None:
            parts += [content_digest(label), f"classes={int(n_classes or 0)}"]
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> list[Row | None] | None:
        """The stored rows (one for a whole volume, one per class), or None when absent or unreadable."""
        path = self._path(key)
        try:
            stored = json.loads(path.read_text())
            return [None if r is None else dict(zip(r["names"], map(_decode, r["values"]), strict=True))
                    for r in stored["rows"]]
        except (OSError, ValueError, KeyError, TypeError):
            return None  # absent, or a file another writer left unfinished: extract again

    def put(self, key: str, rows: Sequence[Row | None]) -> None:
        from ..io import atomic_path

        body = {"rows": [None if r is None else {"names": list(r), "values": [_encode(v) for v in r.values()]}
                         for r in rows]}
        with atomic_path(self._path(key), ".json") as tmp:
            tmp.write_text(json.dumps(body))
