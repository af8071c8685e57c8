"""Feature extractors for feature-level replica detection (RELICT 2.3.2), by name.

RELICT encodes every volume with a pretrained 3D network and compares the
embeddings instead of the voxels. Which network is a scientific choice that users
must be able to change without editing synthaudit, so extractors live in a
registry:

* ``get_extractor("medicalnet_resnet50", weights=..., seed=0)`` builds a built-in;
* ``@register_extractor("mine")`` on a subclass of :class:`Extractor` adds one;
* ``get_extractor("my_package.my_module:make_extractor", **options)`` imports a
  user's module and calls the factory there, so a user's own extractor works
  from the configuration alone.

Every extractor describes itself (:meth:`Extractor.describe`): the weights' file
and SHA-256, whether it is trained at all and its seed. That record travels with
the embeddings (:mod:`synthaudit.features.compare`), so a result can always be
traced to the network that made it, and an untrained network is never mistaken
for a pretrained one: its label says "untrained".

This module imports neither torch nor MONAI at import time (the built-ins are
imported on first use), so comparing stored embeddings stays light.

The package: :mod:`.base` (the interface and wrappers), :mod:`.extractors` (the registry),
:mod:`.weights` (weights files); the built-ins in :mod:`.medicalnet` and :mod:`.i3resnet`.
"""

from ..devices import resolve_device  # noqa: F401  (re-exported for the extractors)
from .base import (  # noqa: F401  (the package's names, as before the split)
    Extractor, FlipPooled, PooledMapExtractor, SmoothedInput, _Wrapper, _checked_volume, as_grid, conv_out,
    logger, pooling_grid, zscore,
)
from .extractors import (  # noqa: F401  (the package's names, as before the split)
    CONFIG_OPTIONS, _BUILTIN_MODULES, _REGISTRY, _import_builtins, _import_factory, _qualname, _registered,
    available_extractors, extractor_from_config, get_extractor, register_extractor,
)
from .weights import (  # noqa: F401  (the package's names, as before the split)
    _first, check_state_dict, file_sha256, read_state_dict,
)
