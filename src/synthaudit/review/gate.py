"""The release gate: a finished audit's metrics held against a policy, one verdict per rule and an
exit status a CI job can act on (``synthaudit gate AUDIT_DIR [--policy FILE]``).

Why: a lab runs the audit to decide (release the samples, or retrain); the verdict page explains,
the gate decides, the same way every time. It reads the metrics the workflow wrote and never
recomputes. Each rule gives ``pass``, ``fail``, ``inconclusive`` (a confidence interval straddles the
limit, or a required metric is missing) or ``not applicable`` (its stage did not run and the policy
does not require it). Exit status: 1 when a rule fails, else 2 when one is inconclusive, else 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from .. import resources

PASS, FAIL, INCONCLUSIVE, NA = "pass", "fail", "inconclusive", "not applicable"
EXIT = {PASS: 0, FAIL: 1, INCONCLUSIVE: 2}


class PolicyError(ValueError):
    """A policy file that is not one (the message names the file and the key)."""


def default_policy() -> Path:
    return resources.workflow_dir() / "workflow" / "gate" / "policy.yaml"


def load_policy(path: str | Path | None = None) -> dict:
    """The policy, checked against its schema, with the schema's defaults filled."""
    import jsonschema

    from ..params_schema import fill_defaults

    path = Path(path) if path else default_policy()
    try:
        policy = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise PolicyError(f"{path}: cannot read the policy ({e})") from None
    schema = yaml.safe_load((resources.workflow_dir() / "workflow" / "schemas" / "gate_policy.schema.yaml").read_text())
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(policy or {}), key=lambda e: list(e.path))
    if errors:
        raise PolicyError(f"{path}: " + "; ".join(
            f"{'.'.join(map(str, e.path)) or '(top)'}: {e.message}" for e in errors))
    return fill_defaults(policy, schema)


@dataclass
class Check:
    dataset: str
    rule: str
    verdict: str
    value: float | None
    ci: list[float] | None
    limit: str
    why: str

    def line(self) -> str:
        v = "missing" if self.value is None else f"{self.value:.4g}"
        ci = f" [{self.ci[0]:.4g}, {self.ci[1]:.4g}]" if self.ci else ""
        return f"{self.verdict.upper():>14}  {self.dataset}: {self.rule} {v}{ci} (limit {self.limit}){': ' + self.why if self.why else ''}"


def _read(root: Path, name: str) -> dict:
    path = root / "results" / "metrics" / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def clopper_pearson(k: int, n: int, level: float) -> list[float]:
    """Exact binomial interval of k / n (two-sided, ``level``)."""
    from scipy.stats import beta

    a = (1 - level) / 2
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return [lo, hi]


def _decide(value, ci, ok: Callable[[float], bool]) -> str:
    if ci is not None and ok(ci[0]) != ok(ci[1]):
        return INCONCLUSIVE
    return PASS if ok(value) else FAIL


def _copies_per_patient(root: Path, dataset: str) -> float | None:
    path = root / "results" / "relict" / dataset / "copies.tsv"
    if not path.is_file():
        return None
    from ..io import read_tsv

    counts = [int(float(r["combined_copies"])) for r in read_tsv(path) if r.get("combined_copies") not in (None, "")]
    return float(max(counts, default=0))


def evaluate(root: str | Path, policy: dict) -> list[Check]:
    """Every rule of ``policy`` on every dataset of the audit in ``root``."""
    root = Path(root)
    copies, fidelity, privacy = _read(root, "copies"), _read(root, "fidelity"), _read(root, "privacy")
    membership = _read(root, "membership")
    calibrated = [d for d, c in copies.items() if isinstance(c, dict) and "n_copies" in c]
    datasets = policy.get("datasets") or calibrated
    rules = policy["rules"]
    out: list[Check] = []

    def missing(d, rule, limit, what):
        verdict = INCONCLUSIVE if rules[rule]["required"] else NA
        out.append(Check(d, rule, verdict, None, None, limit, f"no {what}"))

    for d in datasets:
        c = copies.get(d) if d in calibrated else None
        if "calibrated_copies" in rules:
            r, limit = rules["calibrated_copies"], f"<= {rules['calibrated_copies']['max']:g}"
            if c is None:
                missing(d, "calibrated_copies", limit, "calibrated calls (needs held-out scans: results/metrics/copies.json)")
            else:
                v = float(c["n_copies"])
                out.append(Check(d, "calibrated_copies", _decide(v, None, lambda x: x <= r["max"]), v, None, limit,
                                 f"at a false-positive rate of {c['rate']:g} on {c['n_heldout']} held-out scans"))
        if "copies_per_patient" in rules:
            r, limit = rules["copies_per_patient"], f"<= {rules['copies_per_patient']['max']:g}"
            v = _copies_per_patient(root, d) if c is not None else None
            if v is None:
                missing(d, "copies_per_patient", limit, f"results/relict/{d}/copies.tsv")
            else:
                out.append(Check(d, "copies_per_patient", _decide(v, None, lambda x: x <= r["max"]), v, None, limit,
                                 "the training patient copied most often"))
        if "local_copies" in rules:
            r, limit = rules["local_copies"], f"<= {rules['local_copies']['max']:g}"
            if c is None or "local_n_called" not in c:
                missing(d, "local_copies", limit, "local level (relict.local)")
            else:
                v = float(c["local_n_called"])
                out.append(Check(d, "local_copies", _decide(v, None, lambda x: x <= r["max"]), v, None, limit,
                                 "volumes with a copied region"))
        if "privacy_flag_rate" in rules:
            r, limit = rules["privacy_flag_rate"], f"<= {rules['privacy_flag_rate']['max']:g}"
            judged = [(owner, space, e["synthetic"][d]) for owner, spaces in privacy.items()
                      for space, e in spaces.items() if isinstance(e, dict) and d in (e.get("synthetic") or {})]
            n = (fidelity.get(d) or {}).get("n_synthetic") or _n_synthetic(root, d)
            if not judged or not n:
                missing(d, "privacy_flag_rate", limit, "re-identification filters' verdict on this set"
                        + ("" if n else " (or its number of samples)"))
                judged = []
            for owner, space, e in judged:
                v = float(e["flag_rate"])
                ci = clopper_pearson(round(v * n), n, r["level"])
                out.append(Check(d, "privacy_flag_rate", _decide(v, ci, lambda x: x <= r["max"]), v, ci, limit,
                                 f"{space} filters of {owner}, {n} volumes"))
        f = fidelity.get(d)
        if "c_t" in rules:
            r, limit = rules["c_t"], f">= {rules['c_t']['min']:g}"
            if not f or f.get("c_t") is None:
                missing(d, "c_t", limit, "C_T (fidelity)")
            else:
                v = float(f["c_t"])
                verdict, why = _decide(v, None, lambda x: x >= r["min"]), "Meehan et al.'s data-copying statistic"
                power, wanted = f.get("c_t_power"), float(r.get("min_power", 0.8))
                if verdict == PASS and (power is None or power < wanted):  # it could not have seen copying
                    verdict = INCONCLUSIVE if r.get("underpowered", NA) == INCONCLUSIVE else NA
                    why = (f"underpowered: detects {f.get('c_t_power_copy_share', 0.2):.0%} copying with probability "
                           f"{power:.2f} at this audit's sizes (policy min_power {wanted:g})" if power is not None
                           else "no power stated in fidelity.json (written before issue 63): cannot pass")
                out.append(Check(d, "c_t", verdict, v, None, limit, why))
        if "frechet_distance_vs_floor" in rules:
            r, limit = rules["frechet_distance_vs_floor"], f"<= {rules['frechet_distance_vs_floor']['max']:g}"
            fd = (f or {}).get("frechet_distance") or {}
            if not fd.get("floor"):
                missing(d, "frechet_distance_vs_floor", limit, "Fréchet distance with its floor (fidelity)")
            else:
                v = fd["value"] / fd["floor"]
                ci = ([fd["ci_low"] / fd["floor"], fd["ci_high"] / fd["floor"]]
                      if fd.get("ci_low") is not None else None)
                out.append(Check(d, "frechet_distance_vs_floor", _decide(v, ci, lambda x: x <= r["max"]), v, ci, limit,
                                 f"FD {fd['value']:.4g} over the held-out floor {fd['floor']:.4g}"))
        if "membership_auc" in rules:  # issue 64: do the samples tell who trained the generator?
            r, limit = rules["membership_auc"], f"<= {rules['membership_auc']['max']:g}"
            m = membership.get(d) or {}
            judged = [(k, e) for k, e in m.items() if isinstance(e, dict) and "auc" in e
                      and (r.get("attacks") is None or k in r["attacks"])]
            if not judged:
                missing(d, "membership_auc", limit, "membership attacks (needs held-out scans: results/metrics/"
                        "membership.json)")
            for name, e in judged:
                ci = [e["auc_ci_low"], e["auc_ci_high"]]
                out.append(Check(d, "membership_auc", _decide(float(e["auc"]), ci, lambda x: x <= r["max"]),
                                 float(e["auc"]), ci, limit, f"{name}: {m['members']} member and {m['nonmembers']} "
                                 "non-member patients"))
        if "frd_vs_floor" in rules:  # the robust FRD (issue 63): v1 can be one feature constant over the training scans
            r, limit = rules["frd_vs_floor"], f"<= {rules['frd_vs_floor']['max']:g}"
            fr = (f or {}).get("frd_robust") or {}
            if fr.get("floor") is None or fr.get("value") is None:
                missing(d, "frd_vs_floor", limit, "robust FRD with its floor (fidelity.frd)")
            else:  # FRD is log d^2: the difference is the log of the ratio of squared distances, as FD's rule reads
                v = float(math.exp(fr["value"] - fr["floor"]))
                ci = ([float(math.exp(fr["ci_low"] - fr["floor"])), float(math.exp(fr["ci_high"] - fr["floor"]))]
                      if fr.get("ci_low") is not None else None)
                out.append(Check(d, "frd_vs_floor", _decide(v, ci, lambda x: x <= r["max"]), v, ci, limit,
                                 f"robust FRD {fr['value']:.4g} against the held-out floor {fr['floor']:.4g} "
                                 "(exp of the difference)"))
    return out


def _n_synthetic(root: Path, dataset: str) -> int | None:
    """The set's number of samples: from its metrics, else the rows of a ranking (every sample ranked)."""
    for e in (_read(root, "relict").get(dataset) or {}).values():
        if isinstance(e, dict) and e.get("n_synthetic"):
            return int(e["n_synthetic"])
    for path in sorted((root / "results" / "relict" / dataset).glob("ranking_*.tsv")):
        from ..io import read_tsv

        return len(read_tsv(path)) or None
    return None


def overall(checks: list[Check]) -> str:
    verdicts = {c.verdict for c in checks}
    if FAIL in verdicts:
        return FAIL
    if INCONCLUSIVE in verdicts or not checks:
        return INCONCLUSIVE
    return PASS


def run(root: str | Path, policy_path: str | Path | None = None, out: str | Path | None = None,
        echo: Callable[[str], None] = print) -> int:
    """Evaluate, print one line per rule, write ``results/gate.json``; the exit status."""
    from ..io import write_json

    root = Path(root)
    if not (root / "results" / "metrics").is_dir():
        raise FileNotFoundError(f"{root}: no results/metrics/ (run the audit first: snakemake --cores all)")
    policy = load_policy(policy_path)
    checks = evaluate(root, policy)
    result = overall(checks)
    for c in checks:
        echo(c.line())
    echo(f"gate: {result.upper()}" + ("" if checks else " (no dataset with calibrated calls to judge)"))
    write_json(Path(out) if out else root / "results" / "gate.json",
               {"result": result, "exit_status": EXIT[result], "policy": str(policy_path or default_policy()),
                "rules": policy["rules"], "checks": [asdict(c) for c in checks]})
    return EXIT[result]
