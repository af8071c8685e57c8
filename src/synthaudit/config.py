"""Loading and validating ``params.yaml``.

Why: a typo in a parameter file should stop the run before any work starts, with a
message that names the key, what was given and what is allowed — not a KeyError
twenty minutes into a registration job.
"""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import yaml

from . import registry
from .params_schema import (  # noqa: F401  (the schema's part, re-exported: defaults and their lookups)
    SCHEMA_PATH, _node_at, _object_schema, _resolve, default_of, fill_defaults, load_schema, object_defaults,
)


class ParamsError(ValueError):
    """params.yaml does not satisfy the schema; the message lists every problem."""


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    return ".".join(parts) if parts else "(top level)"


def _allowed_keys(schema: dict, root: dict) -> list[str]:
    """Property names a (possibly $ref'd) object schema allows."""
    while "$ref" in schema:
        ref = schema["$ref"].split("/")[-1]
        schema = root["$defs"][ref]
    return sorted(schema.get("properties", {}))


def _describe(error: jsonschema.ValidationError, root: dict) -> str:
    where = _key_path(error)
    validator = error.validator
    if validator == "additionalProperties":
        allowed = _allowed_keys(error.schema, root)
        extra = sorted(set(error.instance) - set(allowed)) if isinstance(error.instance, dict) else []
        return f"{where}: unknown key(s) {extra}; allowed keys: {allowed}"
    if validator == "enum":
        return f"{where}: {error.instance!r} is not allowed; allowed values: {error.validator_value}"
    if validator == "required":
        return f"{where}: {error.message}"
    if validator == "type":
        return f"{where}: {error.instance!r} should be of type {error.validator_value}"
    if validator in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return f"{where}: {error.instance!r} violates {validator} {error.validator_value}"
    if validator in ("anyOf", "oneOf"):
        subs = "; ".join(sorted({e.message for e in error.context})) if error.context else error.message
        return f"{where}: {error.instance!r} does not match any allowed form ({subs})"
    return f"{where}: {error.message}"


def validate_params(params: dict, schema: dict | None = None, source: str = "params.yaml") -> dict:
    """Fill the schema's defaults, then validate against the schema, plus cross-field rules the
    schema cannot say.

    Returns the filled params (a copy) on success; raises ParamsError listing all problems.
    """
    schema = schema or load_schema()
    if isinstance(params, dict):
        params = fill_defaults(params, schema)
    validator = jsonschema.Draft202012Validator(schema)
    problems = []
    for err in sorted(validator.iter_errors(params), key=lambda e: list(map(str, e.absolute_path))):
        # `if/then` failures repeat the inner error; report the inner one only.
        if err.validator in ("if", "allOf") and err.context:
            problems.extend(_describe(e, schema) for e in err.context)
        else:
            problems.append(_describe(err, schema))
    datasets = params.get("datasets") if isinstance(params, dict) else None
    if isinstance(datasets, dict) and all(isinstance(d, dict) for d in datasets.values()):
        problems.extend(_shared_training_problems(params))
    if not problems:
        problems.extend(_sweep_problems(params))
    if not problems:
        full = with_sweep(params)
        problems.extend(_cross_field_problems({**params, "datasets": resolve_datasets(full)}))
    if problems:
        lines = "\n  - ".join(dict.fromkeys(problems))
        raise ParamsError(f"{source} is invalid:\n  - {lines}")
    return params


# What a dataset with ``training_from`` may set itself; everything else (the training
# cohort, its preprocessing and its segmentation) is the other dataset's.
SHARED_OWN_KEYS = ("training_from", "synthetic", "ratings", "filter_with", "filter_measures", "measures")


def _shared_training_problems(params: dict) -> list[str]:
    out = []
    datasets = params["datasets"]
    for name, ds in datasets.items():
        src = ds.get("training_from")
        if src is None:
            continue
        where = f"datasets.{name}.training_from"
        if src == name:
            out.append(f"{where}: names the dataset itself")
        elif src not in datasets:
            out.append(f"{where}: {src!r} is not a dataset (known: {sorted(datasets)})")
        elif datasets[src].get("training_from"):
            out.append(f"{where}: {src!r} itself takes its training set from "
                       f"{datasets[src]['training_from']!r}; name that dataset directly")
        extra = sorted(set(ds) - set(SHARED_OWN_KEYS))
        if extra:
            out.append(f"datasets.{name}: {extra} come from {src!r} (training_from); a dataset that shares "
                       f"a training set only sets {list(SHARED_OWN_KEYS)}")
    return out


def sweep_datasets(params: dict) -> dict:
    """The datasets of ``generator_sweep``: one per training-set size, named
    ``{dataset}_n{size}``, each a copy of the swept generator trained on that many
    training volumes (nested subsets), audited against the same training set with the
    recall measure only (the sweep asks how replicas and recall change with size).
    """
    sweep = params.get("generator_sweep") or {}
    base_name = sweep.get("dataset")
    if not base_name:
        return {}
    base = params["datasets"][base_name]
    out = {}
    for n in sweep["n_training"]:
        syn = copy.deepcopy(base["synthetic"])
        syn["ldm"]["n_training"] = n
        entry = {"training_from": base.get("training_from") or base_name, "synthetic": syn, "ratings": None,
                 "measures": [params["relict"]["recall"]["measure"]]}
        if base.get("filter_with"):
            entry["filter_with"] = base["filter_with"]
            entry["filter_measures"] = filter_measures(params, base_name)
            entry["measures"] = list(dict.fromkeys(entry["measures"] + entry["filter_measures"]))
        out[f"{base_name}_n{n}"] = entry
    return out


def with_sweep(params: dict) -> dict:
    """``params["datasets"]`` plus the generator sweep's datasets (a new dict)."""
    return {**params["datasets"], **sweep_datasets(params)}


def _sweep_problems(params: dict) -> list[str]:
    sweep = params.get("generator_sweep") or {}
    name = sweep.get("dataset")
    if not name:
        return []
    ds = params["datasets"].get(name)
    if ds is None:
        return [f"generator_sweep.dataset: {name!r} is not a dataset (known: {sorted(params['datasets'])})"]
    if ds["synthetic"]["source"] != "ldm":
        return [f"generator_sweep.dataset: {name!r} has synthetic.source {ds['synthetic']['source']!r}; "
                "the sweep varies the in-workflow generator (source ldm)"]
    clash = sorted(set(sweep_datasets(params)) & set(params["datasets"]))
    if clash:
        return [f"generator_sweep: dataset name(s) {clash} are taken; rename those datasets"]
    return []


def resolve_datasets(datasets: dict) -> dict:
    """Expand every ``training_from`` dataset into a full entry: the training dataset's
    cohort, preprocessing and segmentation with its own synthetic set, ratings and filter.

    Why: auditing several synthetic sets (generators, checkpoints, later batches) against
    one training set should not re-simulate, re-register or re-segment that training set.
    The expanded entry keeps ``training_from`` so the workflow reads training outputs
    from the named dataset.
    """
    out = {}
    for name, ds in datasets.items():
        src = ds.get("training_from")
        if src is None:
            out[name] = ds
            continue
        base = {k: v for k, v in datasets[src].items() if k not in SHARED_OWN_KEYS}
        out[name] = {**copy.deepcopy(base), **{k: ds[k] for k in SHARED_OWN_KEYS if k in ds}}
    return out


def _cross_field_problems(params: dict) -> list[str]:
    out = []
    for name, ds in params["datasets"].items():
        where = f"datasets.{name}"
        demo = ds.get("demo")
        if ds["source"] == "demo_ncct" and demo["n_heldout_patients"] >= demo["n_patients"]:
            out.append(f"{where}.demo.n_heldout_patients: {demo['n_heldout_patients']} must be smaller "
                       f"than n_patients ({demo['n_patients']})")
        if ds["source"] == "demo_tof" and demo["n_heldout_subjects"] >= demo["n_subjects"]:
            out.append(f"{where}.demo.n_heldout_subjects: {demo['n_heldout_subjects']} must be smaller "
                       f"than n_subjects ({demo['n_subjects']})")
        if ds["source"] == "demo_ncct":
            for key in ("radius_mm", "hu", "followup_growth"):
                if demo["lesion"][key][0] > demo["lesion"][key][1]:
                    out.append(f"{where}.demo.lesion.{key}: lower bound above upper bound")
        pre = ds["preprocess"]
        reg = pre.get("registration")
        if reg and len(reg["shrink_factors"]) != len(reg["smoothing_sigmas_vox"]):
            out.append(
                f"{where}.preprocess.registration: shrink_factors and smoothing_sigmas_vox need one entry "
                f"per level (got {len(reg['shrink_factors'])} and {len(reg['smoothing_sigmas_vox'])})")
        if reg and reg.get("clip") is not None and not reg["clip"][0] < reg["clip"][1]:
            out.append(f"{where}.preprocess.registration.clip: lower {reg['clip'][0]} must be < upper "
                       f"{reg['clip'][1]}")
        win = pre["intensity"]["window"]
        if win is not None and not win[0] < win[1]:
            out.append(f"{where}.preprocess.intensity.window: lower {win[0]} must be < upper {win[1]}")
        if win is None and pre["intensity"]["rescale"]:
            out.append(f"{where}.preprocess.intensity.rescale: true needs a window to rescale")
        syn = ds["synthetic"]
        if syn["source"] == "spiked":
            if ds["source"] == "nnunet":
                out.append(f"{where}.synthetic.source: 'spiked' needs held-out scans, which an nnU-Net dataset "
                           "does not declare; use a manifest with role 'heldout', or synthetic.source "
                           "folder/manifest")
            if ds["source"] != "demo_tof" and "perturbation" not in syn["spiked"]:
                out.append(f"{where}.synthetic.spiked: 'perturbation' is required (only the TOF demo "
                           "builds replicas without it)")
            if ds["source"] == "demo_tof" and syn["spiked"].get("augmented"):
                out.append(f"{where}.synthetic.spiked.augmented: the TOF demo draws its replicas itself; "
                           "augmented replicas are built from perturbed training scans (other sources)")
        if ds["source"] == "demo_tof" and syn["source"] == "spiked" and ds["preprocess"]["register"]:
            out.append(f"{where}.preprocess.register: the TOF demo is drawn on its grid; set it to false")
        seg = ds.get("segmentation")
        if seg and seg["source"] == "nnunet" and not (seg["nnunet"]["predictions"] or seg["nnunet"]["command"]):
            out.append(f"{where}.segmentation.nnunet: give predictions (a folder) or command")
    names = set(params["datasets"])
    for name, ds in params["datasets"].items():
        src = ds.get("filter_with")
        if not src:
            continue
        if src == name:
            out.append(f"datasets.{name}.filter_with: names the dataset itself; use another, rated dataset")
        elif src not in names:
            out.append(f"datasets.{name}.filter_with: {src!r} is not a dataset (known: {sorted(names)})")
        elif not (params["datasets"][src].get("ratings") or params["datasets"][src]["synthetic"]["source"] == "spiked"):
            out.append(f"datasets.{name}.filter_with: {src!r} has no rating, so no tuned thresholds")
        seg = ds.get("segmentation")
        key = f"datasets.{name}.filter_measures" if ds.get("filter_measures") else "relict.review.filter_measures"
        chosen = ds.get("measures")
        for m in filter_measures(params, name):
            info = registry.get(m)  # the schema admitted only registered names
            if info.level == "segmentation" and not seg:
                out.append(f"{key}: {m} needs a segmentation block in datasets.{name}, which filters with it")
            elif info.multiclass and seg and len(seg["classes"]) < 2:
                out.append(f"{key}: {m} needs more than one class in datasets.{name}")
            elif chosen and m not in chosen:
                out.append(f"{key}: {m} is not in datasets.{name}.measures")
            elif m not in params["relict"]["measures"]:
                out.append(f"{key}: {m} is not in relict.measures")
    for name, ds in params["datasets"].items():
        extra = [m for m in ds.get("measures") or [] if m not in params["relict"]["measures"]]
        if extra:
            out.append(f"datasets.{name}.measures: {extra} are not in relict.measures")
        if ds["synthetic"]["source"] == "ldm":
            out.extend(_ldm_problems(f"datasets.{name}.synthetic.ldm", ds["synthetic"]["ldm"]))
    rec = params["relict"]["recall"]["measure"]
    if rec not in params["relict"]["measures"]:
        out.append(f"relict.recall.measure: {rec!r} is not in relict.measures")
    out.extend(_privacy_problems(params))
    out.extend(_anonymise_problems(params))
    out.extend(_alignment_problems(params))
    out.extend(_feature_problems(params))
    return out


def _feature_problems(params: dict) -> list[str]:
    """The feature-level study scores against a truth: each of its datasets needs a rating
    (or a spiked set's truth); an intensity window belongs to intensity hu only."""
    out = []
    feats = params["relict"]["features"]
    if (feats.get("intensity") == "hu") != (feats.get("input_window") is not None):
        out.append("relict.features.input_window: needed by intensity hu (the preprocessing window in HU), "
                   "meaningless otherwise; set both or neither")
    study = params.get("feature_study")
    if not study:
        return out
    datasets = params["datasets"]
    for name in study["datasets"]:
        ds = datasets.get(name)
        if ds is None:
            out.append(f"feature_study.datasets: {name!r} is not a dataset (known: {sorted(datasets)})")
        elif not (ds.get("ratings") or ds["synthetic"]["source"] == "spiked"):
            out.append(f"feature_study.datasets: {name!r} has no rating and no known truth (a spiked set); "
                       "the study scores candidates against one")
    for name, net in study["networks"].items():
        if (net.get("intensity") == "hu") != (net.get("input_window") is not None):
            out.append(f"feature_study.networks.{name}.input_window: needed by intensity hu, meaningless "
                       "otherwise")
    return out


def _alignment_problems(params: dict) -> list[str]:
    """Aligned variants need the plain measure on the same dataset, and fewer candidates
    than n_closest would leave part of the ratio's denominator unaligned."""
    cfg = params["relict"].get("alignment")
    if not cfg:
        return []
    out = []
    for name in cfg["datasets"]:
        ds = params["datasets"].get(name)
        if ds is None:
            out.append(f"relict.alignment.datasets: {name!r} is not a dataset (known: {sorted(params['datasets'])})")
            continue
        chosen = ds.get("measures") or params["relict"]["measures"]
        missing = [m for m in cfg["measures"] if m not in chosen]
        if missing:
            out.append(f"relict.alignment.measures: {missing} are not measured on dataset {name!r} "
                       "(its measures or relict.measures); the aligned variant starts from the plain one")
    if cfg.get("rank_candidates") is not None and cfg["rank_candidates"] < cfg["candidates"]:
        out.append(f"relict.alignment.rank_candidates: {cfg['rank_candidates']} is below relict.alignment.candidates "
                   f"({cfg['candidates']}): it ranks that many to align the best `candidates`; use at least "
                   "candidates, or null")
    if cfg["datasets"] and cfg["candidates"] < params["relict"]["n_closest"]:
        out.append(f"relict.alignment.candidates: {cfg['candidates']} is below relict.n_closest "
                   f"({params['relict']['n_closest']}): the distance ratio would mix aligned and plain distances; "
                   "use at least n_closest")
    return out


def _anonymise_problems(params: dict) -> list[str]:
    """The anonymisation stage needs a dataset's own training set, held-out patients
    (the real test set) and labels (only the demo datasets have their own)."""
    anon = params.get("anonymise")
    if not anon:
        return []
    datasets = params["datasets"]
    out = []
    for name, spec in anon["datasets"].items():
        where = f"anonymise.datasets.{name}"
        if name not in datasets:
            out.append(f"{where}: {name!r} is not a dataset (known: {sorted(datasets)})")
            continue
        ds = datasets[name]
        if ds.get("training_from"):
            out.append(f"{where}: {name!r} takes its training set from {ds['training_from']!r}; "
                       "name that dataset (the embeddings anonymised are a training set's)")
        elif spec["labels"] is None and ds["source"] != "demo_ncct":
            out.append(f"{where}.labels: only the NCCT demo has class labels of its own; give a TSV with an "
                       f"`id` column and a {spec['column']!r} column (a manifest works)")
    return out


def _privacy_problems(params: dict) -> list[str]:
    """Privacy filters learn one training set's patients; the latent space is the
    autoencoder of a generator trained on that same training set."""
    privacy = params.get("privacy")
    if not privacy:
        return []
    datasets = params["datasets"]
    out = []
    if privacy.get("filter_objective") == "retrieval" and privacy["calibration"]["head"] == "pred":
        out.append("privacy.calibration.head: pred is the verification head's probability, and filter_objective "
                   "retrieval trains no pair head; score the contrastive filters by corr (Koeken et al.), l1 or l2")
    for name in privacy["training_sets"]:
        if name not in datasets:
            out.append(f"privacy.training_sets: {name!r} is not a dataset (known: {sorted(datasets)})")
        elif datasets[name].get("training_from"):
            out.append(f"privacy.training_sets: {name!r} takes its training set from "
                       f"{datasets[name]['training_from']!r}; name that dataset (filters belong to a training set)")
    ae = privacy["latent_autoencoder"]
    if "latent" in privacy["spaces"] and privacy["training_sets"]:
        if ae is None:
            out.append("privacy.latent_autoencoder: the latent space needs a generator (an ldm dataset) whose "
                       "autoencoder encodes the scans; name it, or remove 'latent' from privacy.spaces")
        elif ae not in datasets:
            out.append(f"privacy.latent_autoencoder: {ae!r} is not a dataset (known: {sorted(datasets)})")
        elif datasets[ae]["synthetic"]["source"] != "ldm":
            out.append(f"privacy.latent_autoencoder: {ae!r} has synthetic.source "
                       f"{datasets[ae]['synthetic']['source']!r}; only an in-workflow generator (ldm) has an autoencoder")
        elif (datasets[ae].get("training_from") or ae) not in privacy["training_sets"]:
            out.append(f"privacy.latent_autoencoder: {ae!r} learns from {datasets[ae].get('training_from') or ae!r}, "
                       f"which is not in privacy.training_sets {privacy['training_sets']}")
    return out


def filter_measures(params: dict, dataset: str) -> list[str]:
    """The measures a dataset with filter_with is filtered with: its own list, or the global one."""
    return list(params["datasets"][dataset].get("filter_measures") or params["relict"]["review"]["filter_measures"])


def _ldm_problems(where: str, ldm: dict) -> list[str]:
    """The generator's network settings, checked by the code that builds the networks
    (imported here without torch, so validation stays fast)."""
    from .generate.config import autoencoder_config, diffusion_config

    out = []
    for key, check in (("autoencoder", autoencoder_config), ("diffusion", diffusion_config)):
        try:
            check(ldm[key])
        except ValueError as e:
            out.append(f"{where}.{key}: {e}")
    return out


def load_params(path: str | Path = "params.yaml") -> dict:
    """Read and validate a params file; errors name the file and the key."""
    path = Path(path)
    try:
        with open(path) as fh:
            params = yaml.safe_load(fh)
    except FileNotFoundError as e:
        raise ParamsError(f"{path}: file not found") from e
    except yaml.YAMLError as e:
        raise ParamsError(f"{path}: not valid YAML ({e})") from e
    if not isinstance(params, dict):
        raise ParamsError(f"{path}: expected a mapping at the top level")
    return validate_params(params, source=str(path))
