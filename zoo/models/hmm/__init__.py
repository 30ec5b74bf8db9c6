"""The neural HMM families (``model``) and what they declare about themselves (``catalog``: architectures,
cards, results tables, the papers' numbers, test inputs)."""

from zoo.models.hmm import catalog  # noqa: F401  (registers the families)
from zoo.models.hmm.model import HMM, BernoulliHMM, CategoricalHMM

__all__ = ["HMM", "BernoulliHMM", "CategoricalHMM"]
