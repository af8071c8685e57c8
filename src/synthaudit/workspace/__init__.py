"""`synthaudit init`: one folder per audit, made from the user's folders (NIfTI, DICOM series, nnU-Net raw).

Why: the people synthaudit exists for have folders of scans (training, sometimes held-out,
a generator's samples), not a demo configuration to edit. The Snakemake ecosystem's
convention for using a published workflow (snakemake-workflows, `snakedeploy
deploy-workflow`) is a project folder of its own holding the configuration and a small
Snakefile that uses the workflow as a module; results land there. This module writes that
folder: ``params.yaml`` holding only this audit (stages the data cannot support are off,
each with a comment saying why and what would turn it on), ``data/manifest.tsv`` built from
the folders, a ``Snakefile`` that runs synthaudit's rules, a ``dvc.yaml`` and the profiles.
Everything that can be checked before heavy work is checked here, naming the user's file.

The package, by job: :mod:`.discover` (inputs), :mod:`.checks`, :mod:`.estimate` (derived
settings and the cost plan), :mod:`.timing` (the stages timed on the samples), :mod:`.params_text`
(params.yaml), :mod:`.write`.
"""

from .. import resources  # noqa: F401  (callers had it from here)
from .discover import (  # noqa: F401  (the package's names, as before the split)
    Inputs, MANIFEST_COLUMNS, MIN_HELDOUT_AT_5_PERCENT, WorkspaceError, _load, build_manifest,
    check_case_collisions, nifti_files, patients, unreadable,
)
from .checks import (  # noqa: F401  (the package's names, as before the split)
    CT_WINDOW, Intensity, REFUSE_FACTOR, WARNINGS_FILE, WARNING_COLUMNS, WARN_FACTOR, _Reference, _decade,
    _registration_clip, check_volumes, intensity_checks, intensity_record, intensity_warning,
)
from .estimate import (  # noqa: F401  (the package's names, as before the split)
    ALIGNMENT_BUDGET_HOURS, ALIGNMENT_CANDIDATES_PER_N, ALIGNMENT_RANKED_KEEP_PER_N, ALIGNMENT_RANKED_PER_N,
    LOCAL_MEMORY_GB, RECALL_CHECK_COST, RELICT_N, SECONDS_PER_ALIGNED_PAIR_1MM, SECONDS_PER_EMBEDDING_1MM,
    SECONDS_PER_EMBEDDING_1MM_ASTRA, SECONDS_PER_PAIR_1MM, SECONDS_PER_RANKED_PAIR_1MM, VOXELS_1MM,
    _repo_params, _search_plan, _spacing_of, astra_installed, derived_defaults, plan,
)
from .params_text import (  # noqa: F401  (the package's names, as before the split)
    COMMENT_COLUMN, _datasets_block, _flow, _following_lines, _last_leaf, _path, _set, _unet_patch, _yaml,
    dump_round_trip, load_round_trip, params_text, set_value,
)
from .write import (  # noqa: F401  (the package's names, as before the split)
    DVC, SNAKEFILE, _check_as_the_workflow_will, _write_files, write_workspace,
)

__all__ = [
    'ALIGNMENT_BUDGET_HOURS', 'ALIGNMENT_CANDIDATES_PER_N', 'ALIGNMENT_RANKED_KEEP_PER_N',
    'ALIGNMENT_RANKED_PER_N', 'COMMENT_COLUMN', 'CT_WINDOW', 'DVC', 'Inputs', 'Intensity', 'LOCAL_MEMORY_GB',
    'MANIFEST_COLUMNS', 'MIN_HELDOUT_AT_5_PERCENT', 'RECALL_CHECK_COST', 'REFUSE_FACTOR', 'RELICT_N',
    'SECONDS_PER_ALIGNED_PAIR_1MM', 'SECONDS_PER_EMBEDDING_1MM', 'SECONDS_PER_EMBEDDING_1MM_ASTRA',
    'SECONDS_PER_PAIR_1MM', 'SECONDS_PER_RANKED_PAIR_1MM', 'SNAKEFILE', 'VOXELS_1MM', 'WARNINGS_FILE',
    'WARNING_COLUMNS', 'WARN_FACTOR', 'WorkspaceError', 'astra_installed', 'build_manifest',
    'check_case_collisions', 'check_volumes', 'derived_defaults', 'dump_round_trip', 'intensity_checks',
    'intensity_record', 'intensity_warning', 'load_round_trip', 'nifti_files', 'params_text', 'patients',
    'plan', 'set_value', 'unreadable', 'write_workspace',
]
