"""The tracked fidelity metrics: per set, each measure's value, CI and held-out floor, and C_T,
rounded to 6 significant digits (the bootstrap's quantiles and the nearest-neighbour radii are
sums of many products; rounding keeps the committed file the same on every CPU the portable
numerics allow, where a last bit could otherwise differ)."""

from __future__ import annotations


def _r(x):
    return None if x is None else float(f"{x:.6g}")


def metrics_entry(f: dict) -> dict:
    out = {"n_synthetic": f["n_synthetic"], "n_heldout": f["n_heldout"], "n_training": f["n_training"]}
    for key, v in f["synthetic"].items():
        floor = f["floor"].get(key) or {}
        out[key] = {"value": _r(v["value"]), "ci_low": _r((v.get("ci") or [None, None])[0]),
                    "ci_high": _r((v.get("ci") or [None, None])[1]), "floor": _r(floor.get("value"))}
    out["c_t"] = _r(f["c_t"]["value"])
    out["c_t_copying_cells"] = len(f["c_t"]["copying_cells"])
    power = f["c_t"].get("power")
    if power is not None:  # what the gate's c_t rule needs to know it could have seen copying
        out["c_t_power"] = _r(power["probability"])
        out["c_t_power_copy_share"] = _r(power["copy_share"])
    return out
