"""Snakemake adapter: the arrays a privacy filter sees, in one input space (synthaudit.privacy.inputs):
real.npz (rule privacy_inputs) or synthetic.npz (rule privacy_inputs_synthetic)."""

from synthaudit.logs import logged
from synthaudit.privacy.inputs import Space, write_real, write_synthetic

with logged(snakemake.log[0]) as log:
    p, i = snakemake.params, snakemake.input
    space = Space(snakemake.wildcards.space, downsample=p.downsample, pretrained=p.pretrained,
                  autoencoder=i.get("autoencoder"), autoencoder_name=p.get("autoencoder"), threads=snakemake.threads)
    if "real" in snakemake.output.keys():
        write_real(snakemake.output.real, i.real, p.ids, p.patients, p.roles, space, snakemake.wildcards.dataset, log)
    else:
        write_synthetic(snakemake.output.synthetic, i.synthetic, i.reference, p.syn_ids, p.syn_datasets, space, log)
