"""Snakemake adapter: FRD's PyRadiomics features within each label class's region of every volume of
one split (synthaudit.fidelity.radiomics.extract_classes), with the ids, classes and feature names."""

import numpy as np

from synthaudit.fidelity.radiomics import LABEL, extract_classes, save_class_features
from synthaudit.logs import Progress, logged

with logged(snakemake.log[0]) as log:
    paths, classes = list(snakemake.input.images), list(snakemake.params.classes)
    log.info("%s; within each of %d label classes (%s)", LABEL, len(classes), ", ".join(classes))
    progress = Progress(log, f"per-class radiomics of {snakemake.wildcards.split} volumes", len(paths))
    names, features = extract_classes(paths, list(snakemake.input.labels), len(classes), workers=snakemake.threads,
                                      progress=progress, cache=snakemake.params.cache, note=log.info)
    save_class_features(snakemake.output[0], snakemake.params.ids, classes, names, features)
    for k, c in enumerate(classes):
        n = int((~np.isnan(features[:, k]).any(axis=1)).sum()) if names else 0
        log.info("class %s: features of %d of %d volumes (the others hold none of it, or too little at 2 mm)",
                 c, n, len(paths))
