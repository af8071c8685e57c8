"""Snakemake adapter: the verdict first - per synthetic set, the calls (calibrated and
rating-tuned, by measure and combined), the copied training patients and the most likely
replicas beside their closest training volume (results/verdict.rst, the report's first page,
and results/figures/{dataset}/verdict.png). Numbers are read from the run's own files
(synthaudit.review.verdict); nothing is recomputed."""

import base64
import json
from pathlib import Path

from synthaudit.relict.figures import verdict_figure
from synthaudit.io import atomic_path, load_volume
from synthaudit.logs import logged
from synthaudit.membership.figures import roc_figure
from synthaudit.review.verdict import dataset_verdict, verdict_lines



def rst_list(lines):
    """verdict_lines' indentation (2 spaces: an item, 4: a sub-item) as a nested rst list."""
    out, nested = [], False
    for line in lines:
        sub = line.startswith("    ")
        if sub and not nested:
            out.append("")
        if not sub and nested:
            out.append("")
        out.append(("  - " if sub else "- ") + line.strip())
        nested = sub
    return out


with logged(snakemake.log[0]) as log:
    p = snakemake.params
    sections = ["Verdict", "=======", ""]
    for d, figure in zip(p.datasets, snakemake.output.figures):
        v = dataset_verdict(Path("."), d, p.measures, aligned=d in p.aligned)
        first = next(iter(v["measures"]))
        pairs = []
        for syn_id, train_id, score in v["measures"][first]["most_likely"]:
            syn = load_volume(p.synthetic_image.format(dataset=d, id=syn_id))[0]
            train = load_volume(p.training_image.format(dataset=p.training_of[d], id=train_id))[0]
            pairs.append((syn_id, train_id, syn, train, f"{first} score {score:.3g}"))
        verdict_figure(figure, pairs, f"{d}: the most likely replicas by {first} and their closest training volume")
        lines = verdict_lines(v)
        sections += [f"**{lines[0]}**", ""] + rst_list(lines[1:]) + [""]
        # inline, so the first page shows the pairs; base64 in short lines (docutils refuses lines over
        # 10,000 characters; browsers drop whitespace inside base64 data URLs)
        png = base64.encodebytes(Path(figure).read_bytes()).decode().split()
        sections += [".. raw:: html", "", f'   <img alt="{d}: most likely replicas" style="max-width:100%"',
                     '        src="data:image/png;base64,'] + [f"   {chunk}" for chunk in png] + ['   ">', ""]
        local_png = Path(f"results/figures/{d}/local_copies.png")
        if "local" in v and v["local"]["n_called"] and local_png.is_file():  # where the called regions are
            png = base64.encodebytes(local_png.read_bytes()).decode().split()
            sections += [".. raw:: html", "", f'   <img alt="{d}: local copies" style="max-width:100%"',
                         '        src="data:image/png;base64,'] + [f"   {chunk}" for chunk in png] + ['   ">', ""]
        log.info("%s", "\n".join(lines))
    for d, summary, path in zip(p.membership, snakemake.input.membership, snakemake.output.membership_figures):
        m = json.loads(Path(summary).read_text())  # synthaudit.membership's ROC curves
        roc_figure(path, m, f"{d}: membership attacks on the patients, with {m['level']:.0%} patient-bootstrap bands")
    with atomic_path(snakemake.output.rst) as tmp:
        Path(tmp).write_text("\n".join(sections) + "\n")
