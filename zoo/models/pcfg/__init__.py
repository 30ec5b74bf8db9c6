"""The neural PCFG family (``model``) and what it declares about itself (``catalog``: architectures,
card, results table, the papers' numbers, test inputs)."""

from zoo.models.pcfg import catalog  # noqa: F401  (registers the family)
from zoo.models.pcfg.model import PCFG

__all__ = ["PCFG"]
