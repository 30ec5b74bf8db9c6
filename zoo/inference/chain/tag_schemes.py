"""Transition constraints of span-tagging schemes (BIO, BIOES) for ``CRF``'s ``allowed_*`` arguments."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

# scheme -> (its tag prefixes: begin, inside, end, single), "O" outside any span
SCHEMES = {
    "BIO": ("B", "I", None, None),
    "IOB2": ("B", "I", None, None),
    "BIOES": ("B", "I", "E", "S"),
    "IOBES": ("B", "I", "E", "S"),
    "BIOUL": ("B", "I", "L", "U"),
}


def transition_constraints(labels: Sequence[str], scheme: str = "BIO") -> dict[str, Tensor]:
    """Which tags may start, follow one another and end under a span-tagging scheme.

    Args:
        labels: the N tag names in the CRF's tag order: "O" and "<prefix>-<type>" (e.g. "B-PER").
        scheme: "BIO" (also "IOB2": a span starts with B), "BIOES" ("IOBES") or "BIOUL" (BIOES
            with L for the end and U for a single-token span).
    Returns:
        ``allowed_transitions`` (N x N bool), ``allowed_start`` and ``allowed_end`` (N bool): the
        keyword arguments of ``CRF``. An inside tag continues a span of its own type only.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {sorted(SCHEMES)}, got {scheme!r}")
    begin, inside, end, single = SCHEMES[scheme]
    parsed = [_parsed(label, scheme, {begin, inside, end, single} - {None}) for label in labels]
    if len(set(labels)) != len(labels):
        raise ValueError(f"labels must be distinct, got {list(labels)}")
    opens = {begin, single, "O"} - {None}  # what may follow outside a span
    continues = {inside, end} - {None}  # what may follow inside a span, of the same type

    def closes(prefix: str) -> bool:  # a span (or none) is finished after this tag
        return prefix in ({"O", end, single} if end else {"O", begin, inside})

    def may_follow(previous: tuple[str, str | None], tag: tuple[str, str | None]) -> bool:
        (p_prefix, p_type), (prefix, kind) = previous, tag
        if prefix in continues:
            return p_prefix in {begin, inside} and p_type == kind
        return closes(p_prefix) and prefix in opens

    allowed_start = torch.tensor([prefix in opens for prefix, _ in parsed])
    allowed_end = torch.tensor([closes(prefix) for prefix, _ in parsed])
    allowed_transitions = torch.tensor([[may_follow(p, q) for q in parsed] for p in parsed])
    return {
        "allowed_transitions": allowed_transitions,
        "allowed_start": allowed_start,
        "allowed_end": allowed_end,
    }


def _parsed(label: str, scheme: str, prefixes: set[str]) -> tuple[str, str | None]:
    """("O", None) or (prefix, type) of one tag name, checked against the scheme's prefixes."""
    if label == "O":
        return "O", None
    prefix, dash, kind = str(label).partition("-")
    if not dash or not kind or prefix not in prefixes:
        raise ValueError(
            f"label {label!r} is not a {scheme} tag: expected 'O' or one of "
            f"{', '.join(sorted(p + '-<type>' for p in prefixes))}"
        )
    return prefix, kind
