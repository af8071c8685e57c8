"""Snakemake adapter: one synthetic TOF volume: an anatomy replica (a training subject's vessel
tree over a new background) or a held-out subject's scan (a non-replica)."""

import shutil
import zlib

from synthaudit.demo.tof import anatomy_replica
from synthaudit.io import atomic_path
from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    row = snakemake.params.row
    out = {"image": snakemake.output.image, "label": snakemake.output.label}
    if row["kind"] == "replica":
        replica_seed = zlib.crc32(f"{snakemake.params.seed}:{row['id']}".encode())
        anatomy_replica(snakemake.params.demo, row["source_id"], replica_seed, row["strength"], out)
    else:
        for src, dst in ((snakemake.input.heldout, out["image"]), (snakemake.input.heldout_label, out["label"])):
            with atomic_path(dst) as tmp:
                shutil.copyfile(src, tmp)
    log.info("%s: %s of %s at strength %.2f (reference Likert %d)", row["id"], row["kind"], row["source_id"],
             row["strength"], row["likert"])
