"""The extractors by name: the registry, the built-ins imported on first use, a user's
``module:factory``, and an extractor built from params' ``relict.features``."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from .base import Extractor, FlipPooled, SmoothedInput


# Built-in extractors: name -> module that registers it (imported on first use).
_BUILTIN_MODULES = {
    **{f"medicalnet_resnet{depth}": "synthaudit.features.medicalnet"
       for depth in (10, 18, 34, 50, 101, 152, 200)},
    "astra_resnet152": "synthaudit.features.i3resnet",
    "merlin_resnet152": "synthaudit.features.i3resnet",
}


_REGISTRY: dict[str, Callable[..., Extractor]] = {}


def register_extractor(name: str) -> Callable[[Callable[..., Extractor]], Callable[..., Extractor]]:
    """Class (or factory) decorator: make ``get_extractor(name, **options)`` build it.

    Raises:
        ValueError: If ``name`` is taken by a different class or factory, or
            contains ``:`` (reserved for the ``module:factory`` form).
    """
    if not name or ":" in name:
        raise ValueError(f"invalid extractor name {name!r} (non-empty, without ':')")

    def decorate(factory: Callable[..., Extractor]) -> Callable[..., Extractor]:
        known = _REGISTRY.get(name)
        if known is not None and _qualname(known) != _qualname(factory):
            raise ValueError(f"extractor {name!r} is already registered ({_qualname(known)})")
        _REGISTRY[name] = factory
        return factory

    return decorate


def available_extractors() -> list[str]:
    """Names accepted by :func:`get_extractor` (besides ``module:factory`` paths)."""
    _import_builtins()
    return sorted(_REGISTRY)


def get_extractor(name: str, **options: Any) -> Extractor:
    """Build the extractor called ``name`` with ``options`` (the class's keyword arguments).

    Args:
        name: A registered name (:func:`available_extractors`) or
            ``"package.module:factory"``: a class or function in an importable
            module, called with ``options``; it must return an :class:`Extractor`.
        **options: Passed to the class or factory (e.g. ``weights``, ``seed``,
            ``device``).

    Returns:
        The extractor; its ``name`` is set to ``name``.

    Raises:
        KeyError: If no extractor has that name, or the module lacks the factory.
        ImportError: If the module of a ``module:factory`` name cannot be imported.
        TypeError: If the factory does not return an :class:`Extractor`.
    """
    factory = _import_factory(name) if ":" in name else _registered(name)
    extractor = factory(**options)
    if not isinstance(extractor, Extractor):
        raise TypeError(f"extractor {name!r}: {_qualname(factory)} returned "
                        f"{type(extractor).__name__}, not a synthaudit.features.Extractor")
    extractor.name = name
    return extractor


# Keys of params.yaml's relict.features that are passed to an extractor that takes them.
CONFIG_OPTIONS = ("weights", "grid", "intensity", "input_window")


def extractor_from_config(cfg: Mapping[str, Any], **overrides: Any) -> Extractor:
    """Build the feature level's extractor from ``relict.features`` in params.yaml.

    ``weights``, ``grid``, ``intensity`` and ``input_window`` go to the extractor when
    set (null: its own default); a value the extractor has no argument for is refused,
    so that a setting never silently does nothing. ``seed`` goes to extractors that
    take one (it only matters for an untrained network). ``options`` (a mapping) is
    passed as it is, for a user's ``package.module:factory``. ``smoothing_voxels`` wraps
    the extractor in :class:`SmoothedInput`, ``tta_flip_axes`` in :class:`FlipPooled`.

    Args:
        cfg: The ``relict.features`` block.
        **overrides: Extra keyword arguments, e.g. ``device``.

    Raises:
        ValueError: If a set option is not an argument of the extractor.
    """
    import inspect

    name = cfg["extractor"]
    factory = _import_factory(name) if ":" in name else _registered(name)
    try:
        accepted = set(inspect.signature(factory).parameters)
    except (TypeError, ValueError):  # a builtin or C callable: pass what is set
        accepted = set(CONFIG_OPTIONS) | {"seed"}
    options = dict(cfg.get("options") or {})
    for key in CONFIG_OPTIONS:
        if cfg.get(key) is None:
            continue
        if key not in accepted:
            raise ValueError(f"relict.features.{key} is set, but extractor {name!r} has no {key!r} "
                             f"option (its options: {', '.join(sorted(accepted)) or 'none'}); set it to null")
        options[key] = cfg[key]
    if cfg.get("seed") is not None and "seed" in accepted:
        options["seed"] = cfg["seed"]
    extractor = get_extractor(name, **options, **overrides)
    if cfg.get("smoothing_voxels"):
        extractor = SmoothedInput(extractor, cfg["smoothing_voxels"])
    if cfg.get("tta_flip_axes"):
        extractor = FlipPooled(extractor, cfg["tta_flip_axes"])
    return extractor


def _registered(name: str) -> Callable[..., Extractor]:
    _import_builtins()
    if name not in _REGISTRY:
        raise KeyError(f"extractor {name!r} does not exist; available: {sorted(_REGISTRY)} "
                       "(or give 'package.module:factory')")
    return _REGISTRY[name]


def _import_builtins() -> None:
    for module in _BUILTIN_MODULES.values():
        importlib.import_module(module)


def _import_factory(spec: str) -> Callable[..., Extractor]:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ImportError(f"extractor {spec!r}: cannot import module {module_name!r} ({e})") from e
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise KeyError(f"extractor {spec!r} does not exist: module {module_name!r} "
                           f"has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"extractor {spec!r}: {attr!r} is not a class or function")
    return obj


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
