"""``StructuredDistribution``: what the distributions of every structure share (``LinearChain``,
``SemiMarkovChain``, ``TreeDistribution`` are its subclasses): the factors' type check, the backend
(the factors' own unless given) and its engine from the registry, the most probable structure and
its score, the checks of ``sample`` and ``rsample``'s arguments."""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from zoo.inference.backend import Backend
from zoo.inference.engines import make_engine
from zoo.inference.numerics import needs_grad


class StructuredDistribution:
    """Base class; a subclass sets the class attributes and computes ``_viterbi`` (score, structure).

    Class attributes:
        structure: its name in the engine registry (``zoo.inference.engines``).
        factors_argument: the name of the constructor's factors argument, for errors.
        factor_type: the base class of the factor containers it takes; each container class names
            its own backend (``native_backend``).
        accepted: the containers in words, for errors ("a DenseChain, ... or RankSpaceChain").
    """

    structure: ClassVar[str]
    factors_argument: ClassVar[str] = "factors"
    factor_type: ClassVar[type]
    accepted: ClassVar[str]

    def _check_factors(self, factors) -> None:
        """TypeError unless ``factors`` is one of the containers this structure takes."""
        if not isinstance(factors, self.factor_type):
            raise TypeError(f"{self.factors_argument} must be {self.accepted}, got {type(factors).__name__}")

    def _choose_engine(self, factors, backend: str | Backend | None, options) -> None:
        """Set ``backend`` (the factors' own when None) and ``engine``, after checking the factors' type."""
        self._check_factors(factors)
        self.backend = factors.native_backend if backend is None else Backend.parse(backend)
        self.engine = make_engine(self.structure, self.backend, options)

    @property
    def _viterbi(self) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    @property
    def argmax(self) -> Tensor:
        """The most probable structure (its format: the subclass's docstring)."""
        return self._viterbi[1]

    @property
    def max_score(self) -> Tensor:
        """score(argmax): (B,)."""
        return self._viterbi[0]

    def _known_log_partition(self) -> Tensor | None:
        """log Z if ``log_partition`` was computed already, for an operation that divides by it
        (``log_prob``); None for the randomized backend (its ``log_prob`` divides by the exact log Z,
        not the estimate) and where that value has no graph but one is being built now."""
        log_z = self.__dict__.get("log_partition")
        if log_z is None or self.backend is Backend.RANDOMIZED:
            return None
        return None if needs_grad(*self._potentials()) and not log_z.requires_grad else log_z

    def _potentials(self) -> list:
        """The tensors the distribution is a function of (a subclass's factors)."""
        raise NotImplementedError

    @staticmethod
    def _check_temperature(temperature: float) -> None:
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, got {temperature!r}")
