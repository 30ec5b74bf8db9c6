"""structured-zoo: structured latent-variable models on one pluggable inference engine."""

from zoo.inference import Backend

__version__ = "0.1.0"

import zoo.models  # noqa: E402, F401  (each family's catalog registers its architectures)
from zoo.hub.bundled import register_bundled  # noqa: E402
from zoo.hub.pretrained import from_pretrained  # noqa: E402
from zoo.hub.registry import create_model, list_models  # noqa: E402

register_bundled()  # the pretrained checkpoints shipped in zoo/weights/

__all__ = ["Backend", "__version__", "create_model", "from_pretrained", "list_models"]
