"""structured-zoo: structured latent-variable models on one pluggable inference engine."""

from zoo.inference import Backend

__version__ = "0.1.0"

from zoo.hub import architectures  # noqa: E402, F401  (registers the built-in families)
from zoo.hub.bundled import register_bundled  # noqa: E402
from zoo.hub.pretrained import from_pretrained  # noqa: E402
from zoo.hub.registry import create_model, list_models  # noqa: E402

register_bundled()  # the pretrained checkpoints shipped in zoo/weights/

__all__ = ["Backend", "__version__", "create_model", "from_pretrained", "list_models"]
