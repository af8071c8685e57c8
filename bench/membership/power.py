"""docs/membership.md's power table: how many held-out (non-member) patients an audit needs before a
membership attack of a given true AUC gets a 95 % interval above 0.5 with probability 0.8, by the closed form
(synthaudit.membership.evaluate.nonmembers_needed: Hanley and McNeil's standard error), and the power the
audit's own interval (the patient bootstrap) reaches at that size, by simulation (binormal scores).

    python bench/membership/power.py compute   # -> results/bench/membership_power.json (about a minute)
    python bench/membership/power.py doc [--write]

Why both: the verdict states the closed form's power at the audit's sizes; the simulation checks it against
the interval the audit actually reports.
"""

from __future__ import annotations

import sys
from pathlib import Path
from statistics import NormalDist

import synthaudit  # noqa: F401  first: portable numerics before numpy loads
import numpy as np
from synthaudit.membership import evaluate

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import doc_table  # noqa: E402  the docs page's tables from the JSON

RESULT = "results/bench/membership_power.json"
PAGE = "docs/membership.md"
MARKERS = ("<!-- membership_power: bench/membership/power.py doc --write -->", "<!-- /membership_power -->")
AUCS = [0.6, 0.7, 0.8]
MEMBERS = [10, 20, 50, 200]
SIMULATED_UP_TO = 200  # members (every row here: a few seconds each)
SIMULATIONS, REPLICATES, SEED = 400, 500, 0


def simulated_power(auc: float, n_members: int, n_nonmembers: int, rng: np.random.Generator) -> float:
    """The share of simulated audits (binormal scores of true AUC ``auc``) whose patient-bootstrap 95 % interval
    lies above 0.5."""
    shift = np.sqrt(2) * NormalDist().inv_cdf(auc)
    seen = 0
    for k in range(SIMULATIONS):
        boot = evaluate.bootstrap(rng.normal(shift, 1, n_members), rng.normal(0, 1, n_nonmembers), REPLICATES, k, 0.95)
        seen += boot["auc_ci"][0] > 0.5
    return seen / SIMULATIONS


def compute(args=None) -> dict:
    rng = np.random.default_rng(SEED)
    rows = []
    for auc in AUCS:
        for m in MEMBERS:
            needed = evaluate.nonmembers_needed(auc, m)
            sim = (simulated_power(auc, m, needed, rng) if needed is not None and m <= SIMULATED_UP_TO
                   and needed <= 2000 else None)
            rows.append({"auc": auc, "members": m, "nonmembers_needed": needed, "simulated_power": sim,
                         "power_at_20": evaluate.auc_power(auc, m, 20)})
    return {"level": 0.95, "power": 0.8, "simulations": SIMULATIONS, "replicates": REPLICATES, "rows": rows}


def markdown(res: dict) -> str:
    lines = ["| true AUC | member patients | non-member patients needed | power there, the audit's bootstrap "
             "(simulated) | power with 20 non-members |", "|---|---|---|---|---|"]
    for r in res["rows"]:
        need = "not reachable (too few members)" if r["nonmembers_needed"] is None else str(r["nonmembers_needed"])
        sim = "" if r["simulated_power"] is None else f"{r['simulated_power']:.2f}"
        lines.append(f"| {r['auc']:g} | {r['members']} | {need} | {sim} | {r['power_at_20']:.2f} |")
    return "\n".join(lines)


def doc(write: bool) -> int:
    return doc_table.doc(PAGE, RESULT, MARKERS, markdown, write, "bench/membership/power.py doc --write")


def main(argv=None) -> int:
    return doc_table.cli(argv, __doc__.splitlines()[0], RESULT, markdown, doc, lambda c: None, compute)


if __name__ == "__main__":
    raise SystemExit(main())
