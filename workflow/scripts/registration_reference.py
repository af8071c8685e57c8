"""Snakemake adapter: the dataset's reference scan registered to the template once, the image every
scan is registered to with ``preprocess.registration.target: reference``."""

from synthaudit.io import load_volume, write_json
from synthaudit.logs import logged
from synthaudit.preprocess.pipeline import registration_reference, save_registration_target

with logged(snakemake.log[0]) as log:
    template = load_volume(snakemake.input.template)
    log.info("registering the reference scan %s to the template", snakemake.input.reference)
    target, qc = registration_reference(snakemake.params.preprocess, template, snakemake.input.reference,
                                        threads=snakemake.threads)
    if not qc["converged"]:
        log.warning("the reference's registration to the template stopped at the iteration cap on %d level(s): "
                    "every scan inherits its frame (its own row of the QC table shows the correlation)",
                    qc["levels_at_cap"])
    out = snakemake.output
    save_registration_target(target, out.image, out.mask, out.transform)
    write_json(out.qc, qc)
    log.info("done: %s", qc)
