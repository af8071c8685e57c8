"""Why DOMIAS's reference leaves the candidate's patient out: on a finished demo, each set's density-ratio
AUC with the reference the held-out scans without the candidate's patient (the stage's), and with one
reference shared by every candidate (the domias package's setting, where the reference and the non-members
are disjoint sets; here they are the same scans).

    make demo                                                # the embeddings: results/relict/features/
    python bench/membership/reference.py compute [--root .]  # -> results/bench/membership_reference.json
    python bench/membership/reference.py doc [--write]       # docs/membership.md's table from that JSON
"""

from __future__ import annotations

import sys
from pathlib import Path

import synthaudit  # noqa: F401  first: portable numerics before numpy loads
import numpy as np
import yaml
from synthaudit.features.compare import load_embeddings, standardise
from synthaudit.membership import attacks, audit, evaluate
from synthaudit.workflow_plan import WorkflowPlan

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import doc_table  # noqa: E402  the docs page's tables from the JSON

RESULT = "results/bench/membership_reference.json"
PAGE = "docs/membership.md"
MARKERS = ("<!-- membership_reference: bench/membership/reference.py doc --write -->", "<!-- /membership_reference -->")


def compute(root: Path) -> dict:
    params = yaml.safe_load((root / "params.yaml").read_text())
    plan = WorkflowPlan(params)
    scaling, dim = params["relict"]["features"]["scaling"], params["membership"]["density_ratio"]["dimension"]
    rows = []
    for d in plan.membership_datasets:
        paths = plan.membership_embeddings(d)
        if not paths:
            continue
        inputs = plan.membership_inputs(d)
        c = audit.candidates(**inputs)
        (train_ids, train, _), (held_ids, held, _), (_, samples, _) = [load_embeddings(root / p) for p in paths]
        rows_of = {**dict(zip(train_ids, train)), **dict(zip(held_ids, held))}
        cand, syn = standardise(np.stack([rows_of[v] for v in c.ids]), samples, scaling)
        ref, _ = standardise(held, samples, scaling)
        patient = dict(inputs["heldout"])
        row = {"dataset": d, "members": len(c.member_patients), "nonmembers": len(c.nonmember_patients)}
        for key, groups in (("leave_patient_out", (c.patients, [patient[v] for v in held_ids])),
                            ("shared", (None, None))):
            order, scores = attacks.patient_scores(attacks.density_ratio_scores(cand, syn, ref, *groups, dim),
                                                   c.patients)
            at = dict(zip(order, scores))
            row[key] = evaluate.auc([at[p] for p in c.member_patients], [at[p] for p in c.nonmember_patients])
        rows.append(row)
    return {"rows": rows}


def markdown(res: dict) -> str:
    lines = ["| set | member / non-member patients | density-ratio AUC, reference without the candidate's patient "
             "(the stage's) | the same, one shared reference |", "|---|---|---|---|"]
    lines += [f"| {r['dataset']} | {r['members']} / {r['nonmembers']} | {r['leave_patient_out']:.2f} | "
              f"{r['shared']:.2f} |" for r in res["rows"]]
    return "\n".join(lines)


def doc(write: bool) -> int:
    return doc_table.doc(PAGE, RESULT, MARKERS, markdown, write, "bench/membership/reference.py doc --write")


def main(argv=None) -> int:
    return doc_table.cli(argv, __doc__.splitlines()[0], RESULT, markdown, doc, doc_table.root_option,
                         lambda a: compute(a.root))


if __name__ == "__main__":
    raise SystemExit(main())
