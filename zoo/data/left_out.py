"""What a reader leaves out of the user's data, said: a warning with the count and the first place (a
blank line, a sentence too short or too long for the model), so that a run or an evaluation on less than
the user's file never goes unnoticed."""

from __future__ import annotations

import warnings

__all__ = ["BLANK", "few", "kept_under", "warn_left_out"]

BLANK = "blank, no sentence (it would count as <eos> alone)"


def few(items: list, shown: int = 3) -> str:
    """The first ``shown`` of ``items`` and how many more: ``"a, b, c and 4 more"``."""
    named = ", ".join(map(str, items[:shown]))
    return named + (f" and {len(items) - shown} more" if len(items) > shown else "")


def warn_left_out(where: str, positions: list[int], total: int, unit: str, why: str) -> None:
    """Warn, when ``positions`` (of ``unit``s, numbered as the user's messages number them: lines from
    1, dataset rows from 0) is not empty, that they are left out of the ``total`` ``unit``s of ``where``
    (a file or a split) because ``why``."""
    if positions:
        warnings.warn(
            f"{where}: {len(positions)} of {total} {unit}s left out (first at {unit} {positions[0]}): {why}",
            stacklevel=3,
        )


def kept_under(sizes: list[int], limit: int, unit: str) -> list[int]:
    """The indices of the training sentences whose size (in ``unit``s) is at most ``limit``, the others
    said (``warn_left_out``); a ValueError where none is left."""
    keep = [i for i, n in enumerate(sizes) if n <= limit]
    if not keep:
        raise ValueError(f"max_length={limit} drops every training sentence")
    dropped = [i + 1 for i, n in enumerate(sizes) if n > limit]
    why = f"over max_length = {limit} {unit} (validation and test keep theirs)"
    warn_left_out("the training split", dropped, len(sizes), "sentence", why)
    return keep
