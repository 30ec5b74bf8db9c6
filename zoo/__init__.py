"""structured-zoo: structured latent-variable models on one pluggable inference engine."""

from zoo.inference import Backend

__version__ = "0.1.0"
__all__ = ["Backend", "__version__"]
