"""``RandomizedEvaluation``: the randomized backend's policy, one for every family.

A family trained with the randomized backend (RDP, Fu et al. 2022) trains on the estimate; in eval
mode it computes exactly whenever its size allows (the estimate's noise would otherwise enter every
reported number), and falls back to the estimate beyond that size, where ``evaluation_is_exact()``
is False (``LikelihoodTask`` then reports the mean and spread over evaluation seeds).
"""

from __future__ import annotations

from typing import ClassVar

import torch

from zoo.inference import Backend, RDPOptions


class RandomizedEvaluation:
    """Mixin of a family with a ``backend`` and, for ``randomized``, ``k1``, ``k2`` and ``proposal``.

    Class attribute ``exact_evaluation``: (the attribute holding the size, the attribute holding the
    largest size evaluated exactly), e.g. ("num_states", "exact_max_states").
    """

    exact_evaluation: ClassVar[tuple[str, str]]

    def evaluation_is_exact(self) -> bool:
        """Whether ``log_likelihood`` in eval mode is exact (False only for the randomized backend
        above its exact-evaluation size: then it is the log of an unbiased estimate)."""
        size, limit = self.exact_evaluation
        return self.backend != Backend.RANDOMIZED.value or getattr(self, size) <= getattr(self, limit)

    def engine_backend(
        self, generator: torch.Generator | None = None, exact: bool | None = None
    ) -> tuple[str, RDPOptions | None]:
        """(backend, options) the engine runs the family's factors with: the model's backend, except for
        ``randomized``, which runs exactly when ``exact`` (default: in eval mode when
        ``evaluation_is_exact()``) and otherwise with the model's options (``generator`` seeds them)."""
        if self.backend != Backend.RANDOMIZED.value:
            return self.backend, None
        if exact is None:
            exact = not self.training and self.evaluation_is_exact()
        if exact:
            return Backend.EXACT.value, None
        return Backend.RANDOMIZED.value, RDPOptions(self.k1, self.k2, self.proposal, generator)
