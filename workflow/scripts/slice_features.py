"""Snakemake adapter: the 2.5D FD's features of every slice of one split's volumes
(synthaudit.fidelity.slices), with RadImageNet's ResNet-50 from the weights params.yaml names."""

from synthaudit.devices import resolve_device
from synthaudit.fidelity.slices import LABEL, extract, load_encoder, save
from synthaudit.logs import Progress, logged

with logged(snakemake.log[0]) as log:
    import torch

    torch.set_num_threads(snakemake.threads)
    s, device = snakemake.params.settings, resolve_device(snakemake.params.device)
    log.info("%s; weights %s on %s", LABEL, snakemake.input.weights, device)
    net = load_encoder(snakemake.input.weights, device)
    paths = list(snakemake.input.images)
    progress = Progress(log, f"slice features of {snakemake.wildcards.split} volumes", len(paths))
    per_plane = extract(paths, net, s["window"], s["center_ratio"], device=device, progress=progress)
    save(snakemake.output[0], snakemake.params.ids, per_plane)
    log.info("slices per plane: %s", {p: sum(len(r) for r in rows) for p, rows in per_plane.items()})
