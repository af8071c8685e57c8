"""Benchmark cohorts: simulated volumes, label maps and embeddings on the preprocessed grid.

Why simulated, and why here rather than through the workflow: the benchmark times the
all-pairs engines at the paper's sizes (774 or 1,782 training volumes), which the demo
cohorts do not reach, and registration would add nothing the engines see. So volumes
are drawn directly on the final grid, fast enough to make the full NCCT cohort (774
volumes of 182 x 218 x 182) in minutes:

* smooth structure comes from low-resolution random fields upsampled by three small
  matrix products (cubic B-spline weights), not from full-resolution filtering;
* noise is drawn as random bytes (uniform, summed in pairs), not Gaussian;
* NCCT: every volume draws its own anatomy (head outline, size and position, tissue
  texture) and adds a smooth intensity field, noise and a lesion. Until generator version
  2 every volume was one of 6 base heads rolled by a few voxels; then a shifted copy of
  one volume also matched about a sixth of the training set after alignment, so the
  alignment bench could not tell its source from the other volumes of its base;
* TOF: a few base vessel anatomies, each volume a jittered one (see :class:`_TOF`);
* embeddings: a few base patients (similar vectors within one).

Every volume has its own seeded generator (seed, role, index), so a cohort is the same
whatever order or machine made it. Synthetic volumes are partly noisy near-copies of
training volumes (``replica_of``), partly new draws. A cohort is cached under a folder
named by the hash of its settings, as ``.npy`` files read with ``mmap_mode="r"``; it
is written in a temporary folder and renamed when complete, so an interrupted run
never leaves a cohort that looks finished.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from numpy.lib.format import open_memmap

from synthaudit.io import atomic_directory, write_json
from synthaudit.logs import Progress

# Bump when the generator changes what it draws: old caches then stop matching.
GENERATOR_VERSION = 2  # 2: every NCCT volume its own anatomy
ARRAYS = ("training_images", "training_labels", "training_embeddings",
          "synthetic_images", "synthetic_labels", "synthetic_embeddings")
META = "cohort.json"
N_BASES = 6  # base vessel anatomies (TOF) and embedding patients the volumes derive from
# Intensity range of each kind (int16 values); the SSIM data range is its width.
INTENSITY = {"ncct": (0, 100), "tof": (0, 1000)}
_NCCT_FULL_VOXELS = 182 * 218 * 182  # lesion sizes (2k-60k voxels) are given at this grid
_ROLE = {"training": 0, "synthetic": 1, "embedding": 2, "base": 3, "replicas": 4}


@dataclass(frozen=True)
class CohortSpec:
    """Everything that shapes a cohort's content; its hash names the cache folder."""

    kind: str
    n_synthetic: int
    n_training: int
    n_replicas: int
    shape: tuple[int, int, int]
    spacing_mm: tuple[float, float, float]
    n_classes: int
    embedding_dim: int
    seed: int

    @classmethod
    def of(cls, use_case, seed: int) -> CohortSpec:
        """The cohort of a :class:`~synthaudit_bench.params.UseCase` (its fields of the same names) at a seed."""
        return cls(**{f.name: getattr(use_case, f.name) for f in fields(cls) if f.name != "seed"}, seed=seed)

    def key(self) -> str:
        blob = json.dumps({"version": GENERATOR_VERSION, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @property
    def data_range(self) -> float:
        lo, hi = INTENSITY[self.kind]
        return float(hi - lo)


class Cohort:
    """A finished cohort on disk; arrays are opened read-only and memory-mapped."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.meta = json.loads((self.path / META).read_text())
        spec = dict(self.meta["spec"])
        spec["shape"], spec["spacing_mm"] = tuple(spec["shape"]), tuple(spec["spacing_mm"])
        self.spec = CohortSpec(**spec)
        self.replica_of: list[int] = list(self.meta["replica_of"])

    def array(self, name: str) -> np.ndarray:
        """The whole array, memory-mapped read-only (random access, e.g. reference pairs)."""
        return np.load(self._file(name), mmap_mode="r")

    def reader(self, name: str) -> Reader:
        """Plain reads of leading-axis items (timed engine inputs; see :class:`Reader`)."""
        return Reader(self._file(name))

    def _file(self, name: str) -> Path:
        if name not in ARRAYS:
            raise ValueError(f"unknown cohort array {name!r}; known: {', '.join(ARRAYS)}")
        return self.path / f"{name}.npy"

    @property
    def data_range(self) -> float:
        return self.spec.data_range

    @property
    def labels(self) -> list[int]:
        return list(range(1, self.spec.n_classes + 1))


class Reader:
    """Reads items along the first axis of a ``.npy`` file into fresh arrays with ``readinto``.

    Why not the memory map: pages touched through a map count in the process's resident
    set, so streaming 11 GB of training volumes through one would show up as gigabytes
    of "peak RSS" that the engine never allocated (the workflow reads files instead).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        with open(self.path, "rb") as fh:
            version = np.lib.format.read_magic(fh)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, fortran, self.dtype = read_header(fh)
            self.offset = fh.tell()
        if fortran:
            raise ValueError(f"{self.path}: Fortran-ordered arrays are not supported")
        self.shape = tuple(shape)
        self.item_bytes = math.prod(self.shape[1:]) * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def read(self, start: int, stop: int | None = None) -> np.ndarray:
        """Item ``start`` (shape ``shape[1:]``), or items ``start:stop`` when ``stop`` is given."""
        count = 1 if stop is None else stop - start
        if not (0 <= start and start + count <= self.shape[0] and count >= 0):
            raise IndexError(f"{self.path}: items {start}:{start + count} outside 0:{self.shape[0]}")
        out = np.empty((count, *self.shape[1:]), self.dtype)
        with open(self.path, "rb", buffering=0) as fh:
            fh.seek(self.offset + start * self.item_bytes)
            view = memoryview(out.reshape(-1).view(np.uint8))
            done = 0
            while done < len(view):
                n = fh.readinto(view[done:])
                if not n:
                    raise OSError(f"{self.path}: file ends early")
                done += n
        return out[0] if stop is None else out


def cohort_path(root: str | Path, scale: str, use_case: str, spec: CohortSpec) -> Path:
    """``<root>/<scale>-<use case>-<hash>``: settings that differ never share a folder."""
    return Path(root) / f"{scale}-{use_case}-{spec.key()}"


def ensure(spec: CohortSpec, path: str | Path, log: Callable[[str], None] = print) -> Cohort:
    """Open the cohort at ``path``, generating it first when it is not there (or incomplete)."""
    path = Path(path)
    if (path / META).is_file():
        cohort = Cohort(path)
        if cohort.spec == spec:
            log(f"cohort {path.name}: cached")
            return cohort
        log(f"cohort {path.name}: settings differ from the cached ones, regenerating")
    start = time.perf_counter()
    with atomic_directory(path) as tmp:
        generate(spec, tmp, log=log, name=path.name)
    log(f"cohort {path.name}: written in {time.perf_counter() - start:.1f} s")
    return Cohort(path)


def generate(spec: CohortSpec, out: str | Path, log: Callable[[str], None] = print, name: str = "") -> None:
    """Write a cohort's arrays and ``cohort.json`` into the folder ``out``."""
    out = Path(out)
    start = time.perf_counter()
    draw = (_NCCT if spec.kind == "ncct" else _TOF)(spec)
    embeddings = _Embeddings(spec)
    replica_of = _replica_sources(spec)
    S, T, shape, D = spec.n_synthetic, spec.n_training, spec.shape, spec.embedding_dim
    arrays = {
        "training_images": open_memmap(out / "training_images.npy", "w+", np.int16, (T, *shape)),
        "training_labels": open_memmap(out / "training_labels.npy", "w+", np.uint8, (T, *shape)),
        "training_embeddings": open_memmap(out / "training_embeddings.npy", "w+", np.float32, (T, D)),
        "synthetic_images": open_memmap(out / "synthetic_images.npy", "w+", np.int16, (S, *shape)),
        "synthetic_labels": open_memmap(out / "synthetic_labels.npy", "w+", np.uint8, (S, *shape)),
        "synthetic_embeddings": open_memmap(out / "synthetic_embeddings.npy", "w+", np.float32, (S, D)),
    }
    progress = progress_log(log, f"cohort {name}: volumes", S + T, every_s=10.0)
    empty = {"training": 0, "synthetic": 0}
    bases = [embeddings.base(b) for b in range(N_BASES)]
    for i in range(T):
        rng = _rng(spec, "training", i)
        base = i % N_BASES
        image, labels = draw.volume(rng, base)
        arrays["training_images"][i], arrays["training_labels"][i] = image, labels
        arrays["training_embeddings"][i] = embeddings.volume(_rng(spec, "embedding", i), bases[base])
        empty["training"] += not labels.any()
        progress(i + 1)
    for j in range(S):
        rng = _rng(spec, "synthetic", j)
        source = replica_of[j]
        if source >= 0:
            image = draw.replica(rng, arrays["training_images"][source])
            labels = arrays["training_labels"][source]
            embedding = embeddings.replica(rng, arrays["training_embeddings"][source])
        else:
            base = int(rng.integers(N_BASES))
            image, labels = draw.volume(rng, base)
            embedding = embeddings.volume(_rng(spec, "embedding", T + j), bases[base])
        arrays["synthetic_images"][j], arrays["synthetic_labels"][j] = image, labels
        arrays["synthetic_embeddings"][j] = embedding
        empty["synthetic"] += not labels.any()
        progress(T + j + 1)
    for array in arrays.values():
        array.flush()
    del arrays
    write_json(out / META, {
        "spec": asdict(spec), "key": spec.key(), "generator_version": GENERATOR_VERSION,
        "data_range": spec.data_range, "intensity_range": list(INTENSITY[spec.kind]),
        "replica_of": replica_of, "empty_label_maps": empty,
        "generation_s": round(time.perf_counter() - start, 2),
        "files": {a: f"{a}.npy" for a in ARRAYS},
    })


def _rng(spec: CohortSpec, role: str, index: int = 0) -> np.random.Generator:
    return np.random.default_rng([spec.seed, GENERATOR_VERSION, _ROLE[role], index])


def _replica_sources(spec: CohortSpec) -> list[int]:
    """Per synthetic volume the training volume it copies, -1 for a new volume."""
    rng = _rng(spec, "replicas")
    positions = rng.choice(spec.n_synthetic, spec.n_replicas, replace=False)
    sources = rng.choice(spec.n_training, spec.n_replicas, replace=False)
    replica_of = [-1] * spec.n_synthetic
    for p, s in zip(positions, sources):
        replica_of[int(p)] = int(s)
    return replica_of


def progress_log(log: Callable[[str], None], label: str, total: int, every_s: float) -> Progress:
    """The library's progress line (done/total, time left) through a bench's ``log`` function instead
    of a logger: ``print`` on the terminal, a list's ``append`` in the tests."""
    return Progress(SimpleNamespace(info=lambda fmt, *args: log(fmt % args)), label, total, every_s)


# --------------------------------------------------------------------------- fields


@functools.lru_cache(maxsize=64)
def _upsampling(n: int, knots: int) -> np.ndarray:
    """(n, knots) cubic B-spline weights spreading ``knots`` control values over n samples."""
    x = np.linspace(0, knots - 1, n)
    d = np.abs(x[:, None] - np.arange(knots)[None, :])
    w = np.where(d < 1, 2 / 3 - d**2 + d**3 / 2, np.where(d < 2, (2 - d) ** 3 / 6, 0.0))
    return (w / w.sum(axis=1, keepdims=True)).astype(np.float32)


def smooth_field(rng: np.random.Generator, shape: tuple[int, ...], knots: tuple[int, ...]) -> np.ndarray:
    """A smooth random float32 field of unit-order amplitude: random knots, B-spline upsampled.

    Three small matrix products instead of a full-resolution Gaussian filter (~50x faster).
    """
    knots = tuple(max(1, min(k, n)) for k, n in zip(knots, shape))
    low = rng.standard_normal(knots).astype(np.float32)
    mx, my, mz = (_upsampling(n, k) for n, k in zip(shape, knots))
    t = np.einsum("ijk,zk->ijz", low, mz)
    t = np.einsum("ijz,yj->iyz", t, my)
    return (mx @ t.reshape(knots[0], -1)).reshape(shape)


def noise(rng: np.random.Generator, shape: tuple[int, ...], sigma: float) -> np.ndarray:
    """Zero-mean float32 noise of standard deviation ``sigma`` (sum of two uniform bytes).

    Random bytes cost a tenth of Gaussian draws; a triangular distribution is noise enough.
    """
    n = math.prod(shape)
    out = np.frombuffer(rng.bytes(n), np.int8).astype(np.float32)
    out += np.frombuffer(rng.bytes(n), np.int8)
    out *= sigma / 104.5  # sd of the sum of two uniform int8 values
    return out.reshape(shape)


def _to_int16(image: np.ndarray, kind: str) -> np.ndarray:
    lo, hi = INTENSITY[kind]
    np.clip(image, lo, hi, out=image)
    return np.rint(image, out=image).astype(np.int16)


def _centred_grid(shape: tuple[int, ...]) -> list[np.ndarray]:
    """Open float32 grids of voxel centres in [-1, 1] along each axis."""
    return [((np.arange(n, dtype=np.float32) + 0.5) / n * 2 - 1).reshape(
        [-1 if a == i else 1 for a in range(len(shape))]) for i, n in enumerate(shape)]


# --------------------------------------------------------------------------- NCCT


class _NCCT:
    """Head CT in a brain window (HU clipped to 0..100) with haemorrhage blobs (label 1).

    A volume's own anatomy: ellipsoidal head with a wobbly outline, skull (clipped at
    100), grey and white matter with texture, two ventricles; then a smooth intensity
    field, a global offset, noise, and in 80 % of volumes one haemorrhage (55-80 HU) of
    2k-60k voxels (at the 1 mm grid; scaled to smaller grids), whose mask is the label map.
    No two volumes share an anatomy (as no two patients do), so only a copy of a training
    volume, plain or moved, is closer to it than to the rest of the cohort.
    """

    def __init__(self, spec: CohortSpec):
        self.spec = spec
        self.shape = spec.shape
        self.lesion_scale = math.prod(self.shape) / _NCCT_FULL_VOXELS

    def _anatomy(self, rng: np.random.Generator) -> np.ndarray:
        x, y, z = _centred_grid(self.shape)
        centre = rng.uniform(-0.03, 0.03, 3)
        axes = np.array([0.80, 0.86, 0.80]) * rng.uniform(0.94, 1.06, 3)
        r = np.sqrt(((x - centre[0]) / axes[0]) ** 2 + ((y - centre[1]) / axes[1]) ** 2
                    + ((z - centre[2]) / axes[2]) ** 2, dtype=np.float32)
        r += 0.03 * smooth_field(rng, self.shape, (5, 6, 5))
        tissue = 33.0 + 5.0 * np.tanh((r - 0.72) * 12.0)  # white matter inside, grey outside
        tissue += 2.5 * smooth_field(rng, self.shape, (12, 14, 12))
        for side in (-1, 1):
            v = ((x - side * 0.11) / 0.07) ** 2 + ((y - 0.05) / 0.25) ** 2 + ((z - 0.1) / 0.12) ** 2
            tissue = np.where(v < 1, np.float32(8.0), tissue)
        image = np.where(r > 1.0, np.float32(-50.0), np.where(r > 0.9, np.float32(300.0), tissue))
        return image.astype(np.float32)

    def volume(self, rng: np.random.Generator, base: int) -> tuple[np.ndarray, np.ndarray]:
        """A new patient's volume (``base`` only groups the embeddings)."""
        image = self._anatomy(rng)
        image += 2.5 * smooth_field(rng, self.shape, (6, 7, 6))
        image += np.float32(rng.uniform(-2, 2))
        image += noise(rng, self.shape, rng.uniform(2.0, 5.0))
        labels = np.zeros(self.shape, np.uint8)
        if rng.random() < 0.8:
            self._lesion(rng, image, labels)
        return _to_int16(image, "ncct"), labels

    def _lesion(self, rng: np.random.Generator, image: np.ndarray, labels: np.ndarray) -> None:
        voxels = math.exp(rng.uniform(math.log(2000), math.log(60000))) * self.lesion_scale
        aspect = rng.uniform(0.75, 1.3, 3)
        radii = (3 * voxels / (4 * math.pi)) ** (1 / 3) * aspect / np.prod(aspect) ** (1 / 3)
        centre = (rng.uniform(-0.45, 0.45, 3) + 1) / 2 * np.array(self.shape)
        lo = np.maximum(0, np.floor(centre - 1.3 * radii)).astype(int)
        hi = np.minimum(self.shape, np.ceil(centre + 1.3 * radii)).astype(int)
        box = tuple(slice(a, b) for a, b in zip(lo, hi))
        local = [(np.arange(a, b, dtype=np.float32) + 0.5 - c).reshape([-1 if k == i else 1 for k in range(3)]) / r
                 for i, (a, b, c, r) in enumerate(zip(lo, hi, centre, radii))]
        d = sum(g**2 for g in local) + 0.25 * smooth_field(rng, tuple(hi - lo), (4, 4, 4))
        mask = d < 1.0
        image[box][mask] = rng.uniform(55, 80) + noise(rng, (int(mask.sum()),), 3.0)
        labels[box][mask] = 1

    def replica(self, rng: np.random.Generator, source: np.ndarray) -> np.ndarray:
        """A noisy near-copy of a training volume (noise inside the head only)."""
        image = source.astype(np.float32)
        image += (noise(rng, self.shape, rng.uniform(1.0, 3.0)) + np.float32(rng.uniform(-1, 1))) * (source > 0)
        return _to_int16(image, "ncct")


# --------------------------------------------------------------------------- TOF

# Circle of Willis in fractions of the grid (x, y, z), per segment: class, points, radius
# in voxels. Classes: 1 ICA, 2 BA, 3 Pcom, 4 Acom, 5 PCA, 6 ACA, 7 M1 (params.yaml tof_demo).
_TREE = (
    (1, ((0.30, 0.58, 0.00), (0.30, 0.56, 0.45), (0.33, 0.52, 0.65)), 2.4),
    (1, ((0.70, 0.58, 0.00), (0.70, 0.56, 0.45), (0.67, 0.52, 0.65)), 2.4),
    (2, ((0.50, 0.80, 0.00), (0.50, 0.75, 0.55)), 2.2),
    (3, ((0.33, 0.52, 0.65), (0.38, 0.72, 0.58)), 1.0),
    (3, ((0.67, 0.52, 0.65), (0.62, 0.72, 0.58)), 1.0),
    (4, ((0.45, 0.30, 0.68), (0.55, 0.30, 0.68)), 0.9),
    (5, ((0.50, 0.75, 0.55), (0.38, 0.72, 0.58), (0.22, 0.86, 0.62)), 1.5),
    (5, ((0.50, 0.75, 0.55), (0.62, 0.72, 0.58), (0.78, 0.86, 0.62)), 1.5),
    (6, ((0.33, 0.52, 0.65), (0.45, 0.30, 0.68), (0.46, 0.06, 0.75)), 1.3),
    (6, ((0.67, 0.52, 0.65), (0.55, 0.30, 0.68), (0.54, 0.06, 0.75)), 1.3),
    (7, ((0.33, 0.52, 0.65), (0.06, 0.48, 0.62)), 1.8),
    (7, ((0.67, 0.52, 0.65), (0.94, 0.48, 0.62)), 1.8),
)
_P_MISSING = {3: 0.3, 4: 0.1}  # per segment: Pcom per side, Acom


class _TOF:
    """TOF-MRA-like volumes (0..1000): textured tissue, bias field, Rician-like noise, and a
    Circle of Willis of thin bright tubes whose classes 1-7 are the label map.

    A base anatomy jitters the tree's landmarks (shared points move together, so the
    tree stays connected) and the segment radii; each volume jitters them again, a
    little, and may lack a Pcom (per side) or the Acom, so a class is sometimes missing.
    """

    def __init__(self, spec: CohortSpec):
        self.spec = spec
        self.shape = spec.shape
        self.bases = [self._jitter(_rng(spec, "base", b), _TREE, 2.0, 0.15) for b in range(N_BASES)]

    def _jitter(self, rng: np.random.Generator, tree, sd_vox: float, radius_sd: float):
        scale = np.array(self.shape, dtype=float)
        moves: dict[tuple, np.ndarray] = {}
        out = []
        for cls, points, radius in tree:
            moved = []
            for p in points:
                key = tuple(round(v, 4) for v in p)
                if key not in moves:
                    moves[key] = rng.normal(0, sd_vox, 3) * np.array([1, 1, 0.4]) / scale
                moved.append(tuple(np.add(p, moves[key])))
            out.append((cls, tuple(moved), radius * (1 + rng.uniform(-radius_sd, radius_sd))))
        return tuple(out)

    def volume(self, rng: np.random.Generator, base: int) -> tuple[np.ndarray, np.ndarray]:
        tree = self._jitter(rng, self.bases[base], 0.7, 0.05)
        level = rng.uniform(150, 300)
        image = level * (1 + 0.25 * smooth_field(rng, self.shape, (16, 16, 5)))
        labels = np.zeros(self.shape, np.uint8)
        vessel = rng.uniform(650, 900)
        for cls, points, radius in tree:
            if rng.random() < _P_MISSING.get(cls, 0.0):
                continue
            for p0, p1 in zip(points[:-1], points[1:]):
                self._tube(np.multiply(p0, self.shape), np.multiply(p1, self.shape), radius, cls, vessel,
                           image, labels)
        image *= 1 + 0.15 * smooth_field(rng, self.shape, (3, 3, 2))
        sigma = rng.uniform(20, 50)
        image += noise(rng, self.shape, sigma)
        image = np.hypot(image, noise(rng, self.shape, sigma))  # Rician-like magnitude
        return _to_int16(image, "tof"), labels

    def _tube(self, p0, p1, radius, cls, vessel, image, labels) -> None:
        """Draw a segment (voxel coordinates): label inside ``radius``, partial volume at the edge."""
        lo = np.maximum(0, np.floor(np.minimum(p0, p1) - radius - 1.5)).astype(int)
        hi = np.minimum(self.shape, np.ceil(np.maximum(p0, p1) + radius + 1.5)).astype(int)
        if np.any(hi <= lo):
            return
        box = tuple(slice(a, b) for a, b in zip(lo, hi))
        grid = np.stack(np.meshgrid(*(np.arange(a, b) + 0.5 for a, b in zip(lo, hi)), indexing="ij"), axis=-1)
        v = p1 - p0
        t = np.clip(((grid - p0) @ v) / max(v @ v, 1e-9), 0, 1)
        d = np.linalg.norm(grid - (p0 + t[..., None] * v), axis=-1)
        labels[box][d <= radius] = cls
        np.maximum(image[box], vessel * np.clip(radius + 0.5 - d, 0, 1), out=image[box])

    def replica(self, rng: np.random.Generator, source: np.ndarray) -> np.ndarray:
        """A noisy near-copy of a training volume."""
        image = source.astype(np.float32)
        image += noise(rng, self.shape, rng.uniform(10, 25))
        return _to_int16(image, "tof")


# --------------------------------------------------------------------------- embeddings


class _Embeddings:
    """CNN-like embeddings (non-negative, similar within a base patient), float32.

    A volume: ReLU of its base patient's vector plus noise; a near-copy: its source
    plus a little noise, so replicas are close at the feature level too.
    """

    def __init__(self, spec: CohortSpec):
        self.spec = spec

    def base(self, b: int) -> np.ndarray:
        rng = _rng(self.spec, "base", 1000 + b)
        return np.abs(rng.standard_normal(self.spec.embedding_dim, dtype=np.float32))

    def volume(self, rng: np.random.Generator, base: np.ndarray) -> np.ndarray:
        return np.maximum(base + 0.6 * rng.standard_normal(base.shape, dtype=np.float32), 0)

    def replica(self, rng: np.random.Generator, source: np.ndarray) -> np.ndarray:
        return np.maximum(source + 0.03 * rng.standard_normal(source.shape, dtype=np.float32), 0)
