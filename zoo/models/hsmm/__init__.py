"""The neural HSMM family (``model``) and what it declares about itself (``catalog``: architectures,
card, results table, the papers' numbers, test inputs)."""

from zoo.models.hsmm import catalog  # noqa: F401  (registers the family)
from zoo.models.hsmm.model import GaussianHSMM

__all__ = ["GaussianHSMM"]
