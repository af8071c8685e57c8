"""Snakemake adapter: run the user's nnU-Net v2 prediction command on every volume.

The volumes are presented in nnU-Net's input layout ({id}_0000.nii.gz, as links) and
the command is called with ``-i <input> -o <output>`` appended; every id must come back
as {id}.nii.gz.
"""

import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from synthaudit.logs import logged

with logged(snakemake.log[0]) as log:
    command = shlex.split(snakemake.params.command)
    if shutil.which(command[0]) is None:
        raise FileNotFoundError(f"segmentation.nnunet.command: {command[0]!r} not found on PATH; install "
                                "nnunetv2 or give segmentation.nnunet.predictions (a folder of predictions)")
    out_dir = Path(snakemake.output[0])
    with tempfile.TemporaryDirectory(dir=out_dir.parent) as tmp:
        inp, out = Path(tmp, "input"), Path(tmp, "output")
        inp.mkdir()
        for vid, image in zip(snakemake.params.ids, snakemake.input.images):
            os.symlink(Path(image).resolve(), inp / f"{vid}_0000.nii.gz")
        cmd = [*command, "-i", str(inp), "-o", str(out)]
        log.info("running %s", " ".join(cmd))
        proc = subprocess.run(cmd, capture_output=True, text=True)
        log.info("%s", proc.stdout[-4000:])
        if proc.returncode != 0:
            raise RuntimeError(f"nnU-Net command failed ({proc.returncode}): {proc.stderr[-2000:]}")
        missing = [v for v in snakemake.params.ids if not (out / f"{v}.nii.gz").is_file()]
        if missing:
            raise FileNotFoundError(f"nnU-Net wrote no prediction for {len(missing)} volume(s): {missing[:5]}")
        os.replace(out, out_dir)
    log.info("%d predictions in %s", len(snakemake.params.ids), out_dir)
