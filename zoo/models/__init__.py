"""Model families: nn.Modules from parameters to engine factors to log-likelihoods.

See docs/training-api.md for the contract (``log_likelihood(batch)``, ``num_events(batch)``,
``backend`` a plain string, plain-value constructor arguments).
"""

from zoo.models.emissions import BernoulliEmission, CategoricalEmission
from zoo.models.hmm import HMM, BernoulliHMM, CategoricalHMM
from zoo.models.layers import ExpFeatureMap, ResidualBlock, ResidualMLP

__all__ = [
    "HMM",
    "BernoulliHMM",
    "CategoricalHMM",
    "BernoulliEmission",
    "CategoricalEmission",
    "ExpFeatureMap",
    "ResidualBlock",
    "ResidualMLP",
]

from zoo.models.pcfg import PCFG  # noqa: E402

__all__ += ["PCFG"]

from zoo.models.emissions import GaussianEmission  # noqa: E402
from zoo.models.hsmm import GaussianHSMM  # noqa: E402
from zoo.models.projection import InputProjection  # noqa: E402

__all__ += ["GaussianEmission", "GaussianHSMM", "InputProjection"]
from zoo.models.vae import StructuredVAE  # noqa: E402

__all__ += ["StructuredVAE"]
