"""Snakemake adapter: one synthetic set's fidelity (synthaudit.fidelity.audit) on the feature level's
stored embeddings: fidelity.json (each measure, its CI, the held-out floor, C_T), per_volume.tsv
(authenticity beside the nearest training volume) and the embedding figure."""

from synthaudit.features.compare import load_embeddings, standardise
from synthaudit.fidelity.audit import Embedded, audit, per_volume, pooled, summary_lines
from synthaudit.fidelity.figures import embedding_figure
from synthaudit.fidelity.radiomics import load_class_features, load_features
from synthaudit.fidelity.slices import load as load_slices
from synthaudit.io import write_json, write_tsv
from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    p, i = snakemake.params, snakemake.input
    loaded = {name: load_embeddings(path) for name, path in (("train", i.train), ("heldout", i.heldout),
                                                             ("synthetic", i.synthetic))}
    meta = loaded["train"][2]
    split = {}
    for name, (ids, x, _) in loaded.items():
        near = standardise(x, loaded["train"][1], p.scaling)[0]  # as the feature level compares them
        pool, pooling = pooled(x, meta)
        frd = getattr(i, f"radiomics_{name}")  # FRD's features, where fidelity.frd is on
        names, feats = load_features(frd[0], ids) if len(frd) else (None, None)
        per_class = getattr(i, f"classes_{name}")  # and within each label class, where that runs
        classes, _, class_feats = load_class_features(per_class[0], ids) if len(per_class) else (None, None, None)
        slices = getattr(i, f"slices_{name}")  # the 2.5D FD's, where fidelity.fd_2p5d names its weights
        split[name] = Embedded(ids, pool, near, [p.patients.get(v, v) for v in ids], feats, names, class_feats,
                               classes, load_slices(slices[0], ids) if len(slices) else None)
    result = audit(split["train"], split["heldout"], split["synthetic"], p.settings, pooling, p.scaling)
    result.update({"dataset": snakemake.wildcards.dataset, "extractor": meta.get("label", meta.get("name"))})
    write_json(snakemake.output.summary, result)
    rows = per_volume(split["train"], split["synthetic"], p.settings)
    write_tsv(snakemake.output.table, rows, list(rows[0]))
    embedding_figure(snakemake.output.figure, split, rows, f"{snakemake.wildcards.dataset}: embeddings "
                     f"({result['extractor']}), the two leading principal axes of the training scans")
    for line in summary_lines(result):
        log.info("%s", line.strip())
