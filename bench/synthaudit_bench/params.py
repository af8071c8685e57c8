"""Reading and validating ``bench/params.yaml``: the benchmark scales.

Why a strict reader: a benchmark at the paper's scale runs for an hour; a typo
(``n_traning``) or a bad value must stop it at once with the key named, not give
figures for the wrong cohort.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from synthaudit import registry

# Measure -> RELICT level (the registry's, without the aligned variants: they need the
# alignment search, benchmarked by ``bench.alignment``); the level decides the engine.
LEVELS = {name: registry.get(name).level for name in registry.names()}
MEASURES = tuple(LEVELS)
MULTICLASS = frozenset(name for name in MEASURES if registry.get(name).multiclass)
KINDS = ("ncct", "tof")
DEVICES = ("auto", "cpu", "cuda")

# Scale-level keys and their defaults (a key may also be set once under ``defaults:``).
SCALE_DEFAULTS: dict[str, Any] = {
    "description": "",
    "seed": 0,
    "threads": 2,
    "device": "auto",
    "reference_pairs": {"default": 10, "ssim": 3},
    "ssim_training_fraction": 1.0,
    "profile_training": 2,
}
USE_CASE_KEYS = ("kind", "n_synthetic", "n_training", "n_replicas", "shape", "spacing_mm", "n_classes",
                 "embedding_dim", "measures", "combined", "targets")
USE_CASE_OPTIONAL = {"n_replicas": None, "combined": (), "targets": {}}


class BenchParamsError(ValueError):
    """The benchmark parameter file is invalid; the message names the key."""


@dataclass(frozen=True)
class UseCase:
    """One synthetic-vs-training cohort of a scale and the measures run on it."""

    name: str
    kind: str
    n_synthetic: int
    n_training: int
    n_replicas: int
    shape: tuple[int, int, int]
    spacing_mm: tuple[float, float, float]
    n_classes: int
    embedding_dim: int
    measures: tuple[str, ...]
    combined: tuple[str, ...]
    targets: dict[str, float]


@dataclass(frozen=True)
class Scale:
    """A named benchmark scale: run settings shared by its use cases."""

    name: str
    description: str
    seed: int
    threads: int
    device: str
    reference_pairs: dict[str, int]
    ssim_training_fraction: float
    profile_training: int
    use_cases: dict[str, UseCase]

    def pairs_for(self, measure: str) -> int:
        """Reference pairs drawn for ``measure`` (its own entry, else ``default``)."""
        return self.reference_pairs.get(measure, self.reference_pairs.get("default", 0))


def load(path: str | Path) -> dict[str, Scale]:
    """Read and validate a parameter file; returns every scale by name."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise BenchParamsError(f"{path}: benchmark parameter file not found") from None
    except yaml.YAMLError as e:
        raise BenchParamsError(f"{path}: not valid YAML ({e})") from None
    return parse(raw, str(path))


def parse(raw: Any, source: str = "bench/params.yaml") -> dict[str, Scale]:
    """Validate the parsed YAML document ``raw``; ``source`` names it in messages."""
    where = _Where(source)
    top = where.mapping(raw, "", {"defaults", "scales"})
    defaults = where.mapping(top.get("defaults", {}), "defaults", set(SCALE_DEFAULTS))
    scales = where.mapping(top.get("scales"), "scales")
    if not scales:
        raise BenchParamsError(f"{source}: scales: at least one scale is required")
    return {name: _scale(where, f"scales.{name}", str(name), body, defaults) for name, body in scales.items()}


def _scale(where: _Where, key: str, name: str, body: Any, defaults: dict) -> Scale:
    body = where.mapping(body, key, set(SCALE_DEFAULTS) | {"use_cases"})
    merged = {**SCALE_DEFAULTS, **defaults, **body}
    pairs = where.mapping(merged["reference_pairs"], f"{key}.reference_pairs", {"default", *MEASURES})
    use_cases = where.mapping(merged.get("use_cases"), f"{key}.use_cases")
    if not use_cases:
        raise BenchParamsError(f"{where.source}: {key}.use_cases: at least one use case is required")
    device = merged["device"]
    if not isinstance(device, str) or not (device in DEVICES or device.startswith("cuda:")):
        where.fail(f"{key}.device", device, f"one of {list(DEVICES)} or 'cuda:N'")
    return Scale(
        name=name,
        description=str(merged["description"] or ""),
        seed=where.integer(merged["seed"], f"{key}.seed", 0),
        threads=where.integer(merged["threads"], f"{key}.threads", 1),
        device=device,
        reference_pairs={str(m): where.integer(n, f"{key}.reference_pairs.{m}", 0) for m, n in pairs.items()},
        ssim_training_fraction=where.fraction(merged["ssim_training_fraction"], f"{key}.ssim_training_fraction"),
        profile_training=where.integer(merged["profile_training"], f"{key}.profile_training", 1),
        use_cases={str(n): _use_case(where, f"{key}.use_cases.{n}", str(n), b) for n, b in use_cases.items()},
    )


def _use_case(where: _Where, key: str, name: str, body: Any) -> UseCase:
    body = where.mapping(body, key, set(USE_CASE_KEYS))
    missing = [k for k in USE_CASE_KEYS if k not in body and k not in USE_CASE_OPTIONAL]
    if missing:
        raise BenchParamsError(f"{where.source}: {key}: missing key(s) {missing}")
    body = {**USE_CASE_OPTIONAL, **body}
    kind = body["kind"]
    if kind not in KINDS:
        where.fail(f"{key}.kind", kind, f"one of {list(KINDS)}")
    n_synthetic = where.integer(body["n_synthetic"], f"{key}.n_synthetic", 1)
    n_training = where.integer(body["n_training"], f"{key}.n_training", 1)
    n_replicas = body["n_replicas"]
    n_replicas = min(n_synthetic, n_training) // 5 if n_replicas is None else where.integer(
        n_replicas, f"{key}.n_replicas", 0)
    if n_replicas > min(n_synthetic, n_training):
        where.fail(f"{key}.n_replicas", n_replicas, f"at most min(n_synthetic, n_training) = "
                   f"{min(n_synthetic, n_training)}")
    shape = where.triple(body["shape"], f"{key}.shape", integer=True, minimum=16)
    spacing = body["spacing_mm"]
    spacing = where.triple([spacing] * 3 if isinstance(spacing, (int, float)) else spacing, f"{key}.spacing_mm")
    n_classes = where.integer(body["n_classes"], f"{key}.n_classes", 1)
    if kind == "ncct" and n_classes != 1:
        where.fail(f"{key}.n_classes", n_classes, "1 for kind ncct (haemorrhage labels are binary)")
    if kind == "tof" and n_classes != 7:
        where.fail(f"{key}.n_classes", n_classes, "7 for kind tof (the seven artery classes)")
    measures = where.measures(body["measures"], f"{key}.measures")
    if n_classes < 2 and (bad := [m for m in measures if m in MULTICLASS]):
        where.fail(f"{key}.measures", bad, "no multiclass measures with a single class")
    combined = where.measures(body["combined"] or [], f"{key}.combined", allow_empty=True)
    if extra := [m for m in combined if m not in measures]:
        where.fail(f"{key}.combined", extra, f"measures of this use case ({list(measures)})")
    targets = where.mapping(body["targets"] or {}, f"{key}.targets")
    allowed_targets = {"combined_wall_s", "peak_rss_mb", "speedup_per_core", *(f"{m}_wall_s" for m in measures)}
    for target, limit in targets.items():
        if target not in allowed_targets:
            where.fail(f"{key}.targets", target, f"one of {sorted(allowed_targets)}")
        if target == "combined_wall_s" and not combined:
            where.fail(f"{key}.targets.combined_wall_s", limit, "a non-empty 'combined' list beside it")
        targets[target] = where.positive(limit, f"{key}.targets.{target}")
    return UseCase(
        name=name, kind=kind, n_synthetic=n_synthetic, n_training=n_training, n_replicas=n_replicas,
        shape=tuple(shape), spacing_mm=tuple(float(s) for s in spacing), n_classes=n_classes,
        embedding_dim=where.integer(body["embedding_dim"], f"{key}.embedding_dim", 1),
        measures=measures, combined=combined, targets={str(k): float(v) for k, v in targets.items()},
    )


class _Where:
    """Checks that raise :class:`BenchParamsError` naming the file, the key and the value."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, key: str, value: Any, expected: str):
        raise BenchParamsError(f"{self.source}: {key}: got {value!r}; expected {expected}")

    def mapping(self, value: Any, key: str, allowed: set[str] | None = None) -> dict:
        if value is None:
            value = {}
        if not isinstance(value, dict):
            self.fail(key or "(top level)", value, "a mapping")
        if allowed is not None and (unknown := sorted(str(k) for k in value if k not in allowed)):
            raise BenchParamsError(f"{self.source}: {key or '(top level)'}: unknown key(s) {unknown}; "
                                   f"allowed: {sorted(allowed)}")
        return value

    def integer(self, value: Any, key: str, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.fail(key, value, f"an integer >= {minimum}")
        return value

    def positive(self, value: Any, key: str) -> float:
        if isinstance(value, str):  # PyYAML reads 1e6 (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            self.fail(key, value, "a positive number")
        return float(value)

    def fraction(self, value: Any, key: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            self.fail(key, value, "a number in (0, 1]")
        return float(value)

    def triple(self, value: Any, key: str, integer: bool = False, minimum: float = 0) -> list:
        if not isinstance(value, (list, tuple)) or len(value) != 3:
            self.fail(key, value, "three numbers")
        return [self.integer(v, key, minimum) if integer else self.positive(v, key) for v in value]

    def measures(self, value: Any, key: str, allow_empty: bool = False) -> tuple[str, ...]:
        if not isinstance(value, (list, tuple)) or (not value and not allow_empty):
            self.fail(key, value, f"a list of measures from {list(MEASURES)}")
        if unknown := [m for m in value if m not in LEVELS]:
            self.fail(key, unknown, f"measures from {list(MEASURES)}")
        return tuple(dict.fromkeys(value))
