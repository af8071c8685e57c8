"""The params schema is the one source of every parameter's default and description (issue 44)."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from synthaudit import params_doc
from synthaudit.config import _object_schema, default_of, fill_defaults, load_params, load_schema, object_defaults
from synthaudit.workflow_plan import WorkflowPlan

ROOT = Path(__file__).resolve().parents[1]
GLOBAL = ("relict", "fidelity", "privacy", "anonymise", "feature_study", "generator_sweep", "compute")


def _properties(schema):
    """(dotted path, node) of every property the schema declares, in $defs and at the top."""
    out = []

    def walk(node, path):
        obj = _object_schema(node, schema) if isinstance(node, dict) else None
        if obj is None:
            return
        for k, sub in obj.get("properties", {}).items():
            out.append((f"{path}.{k}".lstrip("."), sub))
            walk(sub, f"{path}.{k}")
        if isinstance(obj.get("additionalProperties"), dict):
            walk(obj["additionalProperties"], f"{path}.*")

    walk(schema, "")
    for name, node in schema["$defs"].items():
        walk(node, f"$defs.{name}")
    return out


def test_every_key_has_a_description():
    missing = [p for p, node in _properties(load_schema()) if not (isinstance(node, dict) and node.get("description"))]
    assert not missing, f"keys without a description in params.schema.yaml: {missing}"


def _leaves(mapping, prefix, schema):
    """(path, value, is_block) down to the keys the schema defaults as a whole (a non-empty
    default, or a key naming datasets)."""
    for k, v in mapping.items():
        path = f"{prefix}.{k}"
        try:
            whole = default_of(path, schema) != {} or _node(path, schema).get("x-names-datasets")
        except KeyError:
            whole = False
        if isinstance(v, dict) and v and not whole:
            yield path, v, True
            yield from _leaves(v, path, schema)
        else:
            yield path, v, False


def _node(path, schema):
    node = schema
    for part in path.split("."):
        node = _object_schema(node, schema)["properties"][part]
    return node


def test_params_yaml_repeats_the_schemas_defaults():
    """Every global key of the shipped params.yaml has a schema default equal to its value, but
    the keys that name the demo's datasets, whose default is the stage switched off."""
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    schema = load_schema()
    differ, without = [], []
    for top in GLOBAL:
        for path, value, is_block in _leaves(raw[top], top, schema):
            try:
                d = default_of(path, schema)
            except KeyError:
                if not is_block:
                    without.append(path)
                continue
            if _node(path, schema).get("x-names-datasets"):
                assert d in ([], {}, None), f"{path}: a key naming datasets defaults to off, not {d!r}"
            elif not is_block and d != value:
                differ.append(f"{path}: params.yaml {value!r}, schema {d!r}")
    assert not without, f"params.yaml keys with no schema default: {without}"
    assert not differ, "params.yaml and the schema disagree:\n" + "\n".join(differ)


def test_a_block_left_out_is_filled_from_the_schema_and_an_optional_stage_stays_off(tmp_path):
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    shipped = load_params(ROOT / "params.yaml")
    trimmed = copy.deepcopy(raw)
    for key in ("local", "search", "calibration", "ssim"):
        trimmed["relict"].pop(key)
    trimmed["relict"]["alignment"].pop("search")
    trimmed.pop("compute")
    trimmed.pop("privacy")
    filled = fill_defaults(trimmed)
    for key in ("local", "search", "calibration", "ssim"):
        assert filled["relict"][key] == shipped["relict"][key]
    assert filled["relict"]["alignment"]["search"] == shipped["relict"]["alignment"]["search"]
    assert filled["compute"] == shipped["compute"]
    assert "privacy" not in filled  # absent: the stage is off
    assert trimmed["relict"].get("local") is None  # the input is not modified
    # what the plan reads: the same as from the full file
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(trimmed))
    plan = WorkflowPlan(load_params(tmp_path / "p.yaml"))
    assert plan.local == shipped["relict"]["local"] and plan.search == shipped["relict"]["search"]
    assert plan.privacy_sets == []


def test_dataset_level_defaults_fill_every_dataset():
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    reg = raw["datasets"]["ncct_demo"]["preprocess"]["registration"]
    for key in ("target", "stages", "qc_outlier_mads"):
        reg.pop(key)
    filled = fill_defaults(raw)["datasets"]["ncct_demo"]["preprocess"]["registration"]
    assert filled["target"] == default_of("datasets.*.preprocess.registration.target") == "template"
    assert filled["qc_outlier_mads"] == object_defaults("datasets.*.preprocess.registration")["qc_outlier_mads"]
    with pytest.raises(KeyError, match="no default"):
        default_of("datasets.*.preprocess.spacing_mm")


# `.get("<a params key>", <a fallback>)`: a second default beside the schema's
_FALLBACK = re.compile(r"""\.get\(\s*["'](\w+)["']\s*,\s*[^)]""")


def params_fallbacks(text: str, keys: set[str]) -> list[str]:
    """The ``.get(key, fallback)`` calls in ``text`` whose key is a params key."""
    return [m.group(0) for m in _FALLBACK.finditer(text) if m.group(1) in keys]


def test_no_script_or_rule_states_its_own_default():
    keys = {p.rsplit(".", 1)[-1] for p, _ in _properties(load_schema())}
    planted = 'cfg = snakemake.params.cfg\nsmooth = cfg.get("smooth_mm", 0.0)\n'
    assert params_fallbacks(planted, keys) == ['.get("smooth_mm", 0']  # the finder finds a planted one
    found = []
    for f in sorted((ROOT / "workflow/scripts").glob("*.py")) + sorted((ROOT / "workflow/rules").glob("*.smk")):
        found += [f"{f.relative_to(ROOT)}: {hit}" for hit in params_fallbacks(f.read_text(), keys)]
    assert not found, "defaults outside the schema:\n" + "\n".join(found)


def test_docs_params_md_is_rendered_from_the_schema():
    assert (ROOT / "docs/params.md").read_text() == params_doc.render(), \
        "docs/params.md is stale: python -m synthaudit.params_doc docs/params.md"
