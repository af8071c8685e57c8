"""Settings of the latent diffusion model: defaults and validation, without torch.

Why a module of its own: params.yaml is validated before any job runs (at Snakefile
parse time), and importing torch and MONAI there would add seconds to every
`snakemake` call; :mod:`.ldm` builds the networks from the same checked settings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ..params_schema import object_defaults

# The defaults are the params schema's (datasets.<name>.synthetic.ldm.autoencoder / .diffusion:
# each key's default and meaning there, docs/params.md); a library caller gets the same ones.
AUTOENCODER_DEFAULTS: dict = object_defaults("datasets.*.synthetic.ldm.autoencoder")
DIFFUSION_DEFAULTS: dict = object_defaults("datasets.*.synthetic.ldm.diffusion")

# Keys that do not change what training computes: left out of the checkpoint configuration.
_NOT_TRAINING = {"epochs", "num_inference_steps", "sample_batch_size"}
_SCHEDULES = ("linear_beta", "scaled_linear_beta")


# --------------------------------------------------------------------------- configuration


def autoencoder_config(cfg: Mapping | None = None, *, strict: bool = True) -> dict:
    """Validate an autoencoder configuration and fill in :data:`AUTOENCODER_DEFAULTS`.

    Args:
        cfg: Any subset of the default keys.
        strict: Refuse unknown keys (a typo would otherwise be silently ignored);
            False keeps them unchanged (e.g. notes stored with a saved model).

    Returns:
        A new dict of plain JSON types (lists, not tuples), ``attention_levels`` and
        ``num_res_blocks`` expanded to one entry per level.

    Raises:
        ValueError: On unknown keys (strict) or invalid values, naming the key.
    """
    c = _with_defaults(cfg, AUTOENCODER_DEFAULTS, strict, "autoencoder")
    c["channels"] = _int_list("channels", c["channels"], 1)
    levels = len(c["channels"])
    c["latent_channels"] = _int("latent_channels", c["latent_channels"], 1)
    c["num_res_blocks"] = _per_level("num_res_blocks", c["num_res_blocks"], levels, 1)
    c["attention_levels"] = _bool_list("attention_levels", c["attention_levels"], levels)
    c["norm_num_groups"] = _int("norm_num_groups", c["norm_num_groups"], 1)
    _check_groups(c["channels"], c["norm_num_groups"])
    c["nonlocal_attention"] = _bool("nonlocal_attention", c["nonlocal_attention"])
    c["kl_weight"] = _float("kl_weight", c["kl_weight"], 0.0, inclusive=True)
    _common_training(c)
    if c["patch_size"] is not None:
        factor = 2 ** (levels - 1)
        patch = _int_list("patch_size", c["patch_size"], 1)
        if len(patch) != 3 or any(p % factor for p in patch):
            raise ValueError(f"patch_size must be three positive multiples of {factor} (2 ** (levels - 1)), "
                             f"got {c['patch_size']}")
        c["patch_size"] = patch
    return c


def diffusion_config(cfg: Mapping | None = None, *, strict: bool = True) -> dict:
    """Validate a diffusion configuration and fill in :data:`DIFFUSION_DEFAULTS`.

    Checks what MONAI 1.6 checks only deep inside the network's constructor: every
    level with attention, and the middle block (which always has attention), needs
    channels divisible by its ``num_head_channels``.

    Args:
        cfg: Any subset of the default keys.
        strict: As in :func:`autoencoder_config`.

    Returns:
        A new dict of plain JSON types, per-level entries expanded.

    Raises:
        ValueError: On unknown keys (strict) or invalid values, naming the key.
    """
    c = _with_defaults(cfg, DIFFUSION_DEFAULTS, strict, "diffusion")
    c["channels"] = _int_list("channels", c["channels"], 1)
    levels = len(c["channels"])
    c["attention_levels"] = _bool_list("attention_levels", c["attention_levels"], levels)
    c["num_res_blocks"] = _per_level("num_res_blocks", c["num_res_blocks"], levels, 1)
    c["num_head_channels"] = _per_level("num_head_channels", c["num_head_channels"], levels, 1)
    c["norm_num_groups"] = _int("norm_num_groups", c["norm_num_groups"], 1)
    _check_groups(c["channels"], c["norm_num_groups"])
    for i, (ch, heads, attn) in enumerate(zip(c["channels"], c["num_head_channels"], c["attention_levels"])):
        if (attn or i == levels - 1) and ch % heads:
            where = f"level {i}" + (" (the middle block's attention)" if i == levels - 1 else "")
            raise ValueError(f"num_head_channels {heads} does not divide channels {ch} at {where}")
    c["num_train_timesteps"] = _int("num_train_timesteps", c["num_train_timesteps"], 1)
    if c["schedule"] not in _SCHEDULES:
        raise ValueError(f"schedule must be one of {list(_SCHEDULES)}, got {c['schedule']!r}")
    c["beta_start"] = _float("beta_start", c["beta_start"], 0.0)
    c["beta_end"] = _float("beta_end", c["beta_end"], 0.0)
    if not c["beta_start"] < c["beta_end"] < 1.0:
        raise ValueError(f"need 0 < beta_start < beta_end < 1, got {c['beta_start']} and {c['beta_end']}")
    _common_training(c)
    c["num_inference_steps"] = _int("num_inference_steps", c["num_inference_steps"], 1)
    if c["num_inference_steps"] > c["num_train_timesteps"]:
        raise ValueError(f"num_inference_steps {c['num_inference_steps']} exceeds num_train_timesteps "
                         f"{c['num_train_timesteps']}")
    c["sample_batch_size"] = _int("sample_batch_size", c["sample_batch_size"], 1)
    return c


def _with_defaults(cfg, defaults, strict, what) -> dict:
    cfg = dict(cfg or {})
    unknown = sorted(set(cfg) - set(defaults))
    if strict and unknown:
        raise ValueError(f"unknown {what} setting(s) {unknown}; known: {sorted(defaults)}")
    return {**defaults, **cfg}


def _common_training(c: dict) -> None:
    c["learning_rate"] = _float("learning_rate", c["learning_rate"], 0.0)
    c["batch_size"] = _int("batch_size", c["batch_size"], 1)
    c["epochs"] = _int("epochs", c["epochs"], 1)


def _int(name, value, minimum) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, float)) or int(value) != value:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return int(value)


def _float(name, value, minimum, inclusive=False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < minimum or (value == minimum and not inclusive):
        raise ValueError(f"{name} must be finite and {'>=' if inclusive else '>'} {minimum}, got {value}")
    return value


def _bool(name, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return bool(value)


def _int_list(name, value, minimum) -> list[int]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise ValueError(f"{name} must be a non-empty list of integers, got {value!r}")
    return [_int(name, v, minimum) for v in value]


def _bool_list(name, value, levels) -> list[bool]:
    if value is None:
        return [False] * levels
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != levels:
        raise ValueError(f"{name} must be null or a list of {levels} true/false (one per level), got {value!r}")
    return [_bool(name, v) for v in value]


def _per_level(name, value, levels, minimum) -> list[int]:
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        if len(value) != levels:
            raise ValueError(f"{name} must be an integer or a list of {levels} (one per level), got {value!r}")
        return [_int(name, v, minimum) for v in value]
    return [_int(name, value, minimum)] * levels


def _check_groups(channels, groups) -> None:
    bad = [c for c in channels if c % groups]
    if bad:
        raise ValueError(f"channels {channels} must all be multiples of norm_num_groups {groups} (not: {bad})")
