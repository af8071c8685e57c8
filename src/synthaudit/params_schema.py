"""The params schema: the one place every parameter's default and description are stated.

Why a module of its own, below config.py: the validation (config.py) and the libraries whose
settings live in the schema (the generator's, generate/config.py) both read the defaults here; kept
apart, neither imports the other.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import yaml

from . import registry, resources

SCHEMA_PATH = resources.schema()  # workflow/schemas/, shipped in the wheel beside the rules
# libyaml's parser where PyYAML was built with it: the same objects as the pure-Python SafeLoader
# (tests/test_config.py), 0.05 s instead of 0.35 s for the schema
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.lru_cache(maxsize=4)
def _parsed(path: str, mtime_ns: int, size: int) -> dict:
    """The schema file's YAML, parsed once per process and file version.

    Why: every Snakemake start (on SLURM, every job's) parses the workflow, and the plan, the
    generator's defaults and the validation each asked for the schema: three parses were a second
    of each job's start."""
    with open(path) as fh:
        return yaml.load(fh, Loader=_LOADER)


def load_schema(path: str | Path = SCHEMA_PATH) -> dict:
    """The params schema, with its measure enums filled from the registry (one list of measures).
    A fresh copy on every call: callers may change it."""
    st = Path(path).stat()
    schema = copy.deepcopy(_parsed(str(Path(path).resolve()), st.st_mtime_ns, st.st_size))
    defs = schema.get("$defs", {})
    filled = {"measure": registry.names(), "alignable_measure": registry.alignable(),
              "ranked_measure": [n for n in registry.names() if registry.get(n).uses_ratio],
              "local_measure": registry.names(registry.LOCAL)}
    for name, values in filled.items():
        if name in defs:
            defs[name]["enum"] = values
    return schema


def _resolve(node, root: dict):
    """``node`` with its ``$ref`` followed (a sibling ``default``/``description`` stays the caller's)."""
    while isinstance(node, dict) and "$ref" in node:
        node = root["$defs"][node["$ref"].split("/")[-1]]
    return node


def _object_schema(node, root: dict) -> dict | None:
    """The schema of an object value: ``node`` itself, or its object alternative under anyOf/oneOf."""
    node = _resolve(node, root)
    if not isinstance(node, dict):
        return None
    if "properties" in node or isinstance(node.get("additionalProperties"), dict):
        return node
    for key in ("anyOf", "oneOf"):
        for alt in node.get(key, []):
            alt = _resolve(alt, root)
            if isinstance(alt, dict) and ("properties" in alt or isinstance(alt.get("additionalProperties"), dict)):
                return alt
    return None


def _fill(instance, node, root: dict) -> None:
    obj = _object_schema(node, root)
    if obj is None or not isinstance(instance, dict):
        return
    props = obj.get("properties", {})
    for key, sub in props.items():
        if key not in instance and isinstance(sub, dict) and "default" in sub:
            instance[key] = copy.deepcopy(sub["default"])
    for key, value in instance.items():
        if key in props:
            _fill(value, props[key], root)
        elif isinstance(obj.get("additionalProperties"), dict):
            _fill(value, obj["additionalProperties"], root)


def fill_defaults(params: dict, schema: dict | None = None) -> dict:
    """A copy of ``params`` with the schema's ``default`` of every key it leaves out.

    Why here and only here: the schema is the one place a parameter's default is stated
    (params.yaml repeats them for the reader; tests/test_config.py checks that they agree).
    A key's default is filled wherever its object is present; an object whose own default is
    ``{}`` is created and filled. Blocks without a default (``privacy``, ``anonymise``,
    ``feature_study``, ``generator_sweep``) stay absent: absent means the stage is off.
    """
    schema = schema or load_schema()
    out = copy.deepcopy(params)
    _fill(out, schema, schema)
    return out


def default_of(path: str, schema: dict | None = None):
    """The schema's default at a dotted key path (``*``: any entry of a mapping), e.g.
    ``default_of("relict.local.block_mm")``; KeyError when the key has no default."""
    schema = schema or load_schema()
    node = _node_at(path, schema)
    if not isinstance(node, dict) or "default" not in node:
        raise KeyError(f"{path}: the schema gives no default")
    return copy.deepcopy(node["default"])


def object_defaults(path: str, schema: dict | None = None) -> dict:
    """Every default among the properties of the object at a dotted key path (``*``: any entry
    of a mapping): what :func:`fill_defaults` would add to an empty one."""
    schema = schema or load_schema()
    return fill_defaults({"x": {}}, {"$defs": schema.get("$defs", {}), "type": "object",
                                     "properties": {"x": _node_at(path, schema)}})["x"]


def _node_at(path: str, schema: dict):
    node = schema
    for part in path.split("."):
        obj = _object_schema(node, schema)
        if obj is None:
            raise KeyError(path)
        node = obj["additionalProperties"] if part == "*" else obj.get("properties", {}).get(part)
        if node is None:
            raise KeyError(path)
    return node
