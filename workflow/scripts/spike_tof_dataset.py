"""Snakemake adapter: every volume of a synthetic TOF set: anatomy replicas (a training
subject's vessel tree over a new background) and held-out subjects' scans (non-replicas).

One job per set (a volume: a fraction of a second). A replica's stream is seeded by its id,
so a file does not depend on the batching."""

import shutil
import zlib

from synthaudit.demo.tof import anatomy_replica
from synthaudit.io import atomic_path
from synthaudit.logs import Progress, logged

with logged(snakemake.log[0]) as log:
    rows = snakemake.params.rows
    heldout = iter(zip(snakemake.input.heldout, snakemake.input.heldout_label))  # the non-replicas, in order
    progress = Progress(log, "synthetic volumes", len(rows))
    for k, row in enumerate(rows):
        out = {"image": snakemake.output.images[k], "label": snakemake.output.labels[k]}
        if row["kind"] == "replica":
            replica_seed = zlib.crc32(f"{snakemake.params.seed}:{row['id']}".encode())
            anatomy_replica(snakemake.params.demo, row["source_id"], replica_seed, row["strength"], out)
        else:
            image, label = next(heldout)
            for src, dst in ((image, out["image"]), (label, out["label"])):
                with atomic_path(dst) as tmp:
                    shutil.copyfile(src, tmp)
        log.info("%s: %s of %s at strength %.2f (reference Likert %d)", row["id"], row["kind"],
                 row["source_id"], row["strength"], row["likert"])
        progress(k + 1)
