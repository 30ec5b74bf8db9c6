"""The GPT-2-encoded structured VAE with a CRF inference network (Fu et al. 2022, Sec. 4), and what the
family declares about itself (``catalog``: architectures, card, results table, the papers' numbers, test
inputs)."""

from zoo.models.vae import catalog  # noqa: F401  (registers the family)
from zoo.models.vae.decoder import LSTMDecoder
from zoo.models.vae.importance import (
    ImportanceEstimates,
    importance_sampled_estimates,
    importance_sampled_log_likelihood,
)
from zoo.models.vae.inference_network import RANK_SPACE_ERROR, CRFInferenceNetwork
from zoo.models.vae.model import StructuredVAE
from zoo.models.vae.state_usage import aggregated_state_usage, plot_state_usage, posterior_collapse

__all__ = [
    "RANK_SPACE_ERROR",
    "CRFInferenceNetwork",
    "ImportanceEstimates",
    "LSTMDecoder",
    "StructuredVAE",
    "aggregated_state_usage",
    "importance_sampled_estimates",
    "importance_sampled_log_likelihood",
    "plot_state_usage",
    "posterior_collapse",
]
