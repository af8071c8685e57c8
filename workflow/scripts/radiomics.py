"""Snakemake adapter: FRD's PyRadiomics features of every volume of one split
(synthaudit.fidelity.radiomics), stored with the volumes' ids and the features' names."""

from synthaudit.fidelity.radiomics import LABEL, extract_many, save_features
from synthaudit.logs import Progress, logged

with logged(snakemake.log[0]) as log:
    paths = list(snakemake.input.images)
    log.info("%s", LABEL)
    progress = Progress(log, f"radiomics of {snakemake.wildcards.split} volumes", len(paths))
    names, features = extract_many(paths, workers=snakemake.threads, progress=progress, warn=log.warning,
                                   cache=snakemake.params.cache, note=log.info)
    save_features(snakemake.output[0], snakemake.params.ids, names, features)
    log.info("%d volumes x %d features", *features.shape)
