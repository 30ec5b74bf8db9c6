"""The four inference backends, as a string Enum."""

from __future__ import annotations

from enum import Enum


class Backend(str, Enum):
    """How a structure's dynamic program is computed.

    ``exact``: the classical DP on dense potentials. ``low-rank``: transitions constrained to
    non-negative feature products (Chiu et al. 2021). ``rank-space``: CPD of the merged factor, DP over
    rank nodes (Yang et al. 2022). ``randomized``: top-K1 plus K2 importance-sampled states per step
    (Fu et al. 2022).

    Values are the hyphenated spellings; ``Backend.parse`` also accepts underscores and any case.
    Store ``backend.value`` (a plain ``str``) in saved hyperparameters, never the Enum object.
    """

    EXACT = "exact"
    LOW_RANK = "low-rank"
    RANK_SPACE = "rank-space"
    RANDOMIZED = "randomized"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: str | Backend) -> Backend:
        """Return the Backend named by ``value`` ("low_rank", "Low-Rank", Backend.LOW_RANK, ...)."""
        if isinstance(value, cls):
            return value
        if not isinstance(value, str):
            raise TypeError(
                f"backend must be a str or zoo.Backend, got {type(value).__name__}: {value!r}"
            )
        key = value.strip().lower().replace("_", "-")
        for member in cls:
            if member.value == key:
                return member
        choices = ", ".join(repr(m.value) for m in cls)
        raise ValueError(f"unknown backend {value!r}; expected one of {choices}")
