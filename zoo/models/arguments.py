"""Checks of the constructor arguments every model family shares: sizes, probabilities and the backend's
own arguments (``rank``; ``k1``, ``k2`` and ``proposal`` of ``randomized``). Each raises a ``ValueError``
that says what was expected and what was given."""

from __future__ import annotations

import math

from zoo.inference import Backend, RDPOptions
from zoo.inference.rdp import check_top_k_proposal

RANK_BACKENDS = (Backend.LOW_RANK, Backend.RANK_SPACE)


def check_int(name: str, value, low: int = 1) -> None:
    """``value`` is an int (not a bool) >= ``low``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


def check_probability(name: str, value) -> None:
    """``value`` is a number in [0, 1) (a dropout probability)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be a float in [0, 1), got {value!r}")


def check_positive(name: str, value) -> None:
    """``value`` is a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ValueError(f"{name} must be a positive float, got {value!r}")


def check_rank(
    backend: Backend,
    rank,
    meaning: str,
    *,
    backends: tuple[Backend, ...] = RANK_BACKENDS,
    size_name: str | None = None,
    size: int = 0,
    slower: str = "",
) -> None:
    """``rank`` is required by ``backends`` (an int >= 1; ``meaning`` says what R counts) and rejected by
    the others. With ``size_name``, backend low-rank's R is at most ``size``: a larger one is slower than
    the exact model, which ``slower`` names ("LHMM is slower than the softmax HMM")."""
    if backend in backends:
        if rank is None:
            raise ValueError(f"backend={backend.value!r} needs rank=R ({meaning}), got None")
        check_int("rank", rank)
        if size_name is not None and backend is Backend.LOW_RANK and rank > size:
            raise ValueError(
                f"rank must be at most {size_name}={size} for backend='low-rank' (a rank-{rank} {slower}: "
                f"use backend='exact'), got {rank}"
            )
    elif rank is not None:
        users = " and ".join(f"backend={b.value!r}" for b in backends)
        raise ValueError(f"rank is used only by {users}, got rank={rank!r} with backend={backend.value!r}")


def check_randomized(
    backend: Backend,
    k1,
    k2,
    proposal: str,
    *,
    proposals: tuple[str, ...],
    size_name: str,
    limit: int,
    unit: str,
    example: str,
    limit_reason: str | None = None,
    uniform: tuple[str, ...] = ("uniform",),
) -> None:
    """``k1`` and ``k2`` (what is kept exactly and sampled ``unit``, e.g. "per position") are required by
    backend randomized (ints >= 0 with 1 <= k1 + k2 <= ``limit``; ``proposal`` one of ``proposals``;
    not k2 = 0 with k1 < ``limit`` under the proposals ``uniform`` names, which rank nothing:
    ``rdp.check_top_k_proposal``) and rejected by the others. ``size_name`` ("num_states") names what
    is kept and, unless ``limit_reason`` says why the bound is smaller, the bound; ``example`` is a
    sensible choice for the error message."""
    if backend is Backend.RANDOMIZED:
        kept = size_name.removeprefix("num_")
        if k1 is None or k2 is None:
            raise ValueError(
                f"backend='randomized' needs k1 (top {kept} kept exactly) and k2 ({kept} sampled) {unit}, "
                f"e.g. {example}; got k1={k1!r}, k2={k2!r}"
            )
        check_int("k1", k1, low=0)
        check_int("k2", k2, low=0)
        if not 1 <= k1 + k2 <= limit:
            bound = f"{size_name} = 1..{limit}" if limit_reason is None else f"{limit} ({limit_reason})"
            raise ValueError(f"k1 + k2 must be in 1..{bound}, got k1={k1}, k2={k2}")
        if proposal not in proposals:
            raise ValueError(f"unknown proposal {proposal!r}; expected one of {proposals}")
        check_top_k_proposal(RDPOptions(k1, k2, proposal), limit, uniform)
    elif k1 is not None or k2 is not None:
        raise ValueError(
            f"k1 and k2 are used only by backend='randomized', got k1={k1!r}, k2={k2!r} "
            f"with backend={backend.value!r}"
        )
