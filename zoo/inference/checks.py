"""Boundary checks shared by every structure: shapes, lengths, finiteness, non-negativity.

Every check raises ``ValueError`` (or ``TypeError``) whose message says what was expected and what
was given, so a bad input never reaches a DP as a cryptic shape error or a silent wrong answer.
"""

from __future__ import annotations

import math
from collections import Counter

import torch
from torch import Tensor

from zoo.inference.precision import full_width
from zoo.inference.unsupported import refuse_unreadable


def as_tensor(name: str, value) -> Tensor:
    """Return ``value`` if it is a floating-point tensor, else raise a TypeError naming it."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if not value.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {value.dtype}")
    return value


def as_dp_tensor(name: str, value) -> Tensor:
    """``as_tensor`` for every dynamic program (chains, semi-Markov chains, trees): float32 and float64
    as given, bfloat16 computed in float32 (its 8-bit mantissa cannot carry a log Z summed over hundreds
    of positions; gradients flow back in bfloat16), float16 refused (a log Z of a few hundred frames
    exceeds its range, 65504) except under float16 autocast (Lightning's ``16-mixed``), where a network
    made it so: then computed in float32 as bfloat16 is."""
    value = as_tensor(name, value)
    if value.dtype == torch.float16 and not _float16_autocast(value):
        raise TypeError(
            f"{name} has dtype float16, whose range (largest 65504, smallest normal 6.1e-05) is too small "
            f"for these dynamic programs; pass float32 ({name}.float()) or bfloat16 (computed in float32)"
        )
    return full_width(value)


def _float16_autocast(value: Tensor) -> bool:
    """Whether float16 autocast is on for ``value``'s device type."""
    device_type = value.device.type
    return torch.is_autocast_enabled(device_type) and torch.get_autocast_dtype(device_type) == torch.float16


def as_optional_dp_tensor(name: str, value) -> Tensor | None:
    """``as_dp_tensor`` of an optional argument: None stays None."""
    return None if value is None else as_dp_tensor(name, value)


def check_same_dtype(owner: str, **tensors: Tensor | None) -> None:
    """Check that the tensors given to ``owner`` share one dtype and one device (None: an optional
    argument left out); else a TypeError names each tensor's dtype (or device) and one to convert.

    Call it after ``as_dp_tensor`` (bfloat16 is float32 by then) or ``as_tensor``. Attribute reads
    only: no kernel and no host synchronization (about a microsecond for a container's few tensors).
    """
    given = [(name, t) for name, t in tensors.items() if t is not None]
    dtype, device = given[0][1].dtype, given[0][1].device
    if all(t.dtype == dtype and t.device == device for _, t in given):
        return
    owner += "'" if owner.endswith("s") else "'s"  # sample_sentences'
    dtypes = [_short(t.dtype) for _, t in given]
    if len(set(dtypes)) > 1:
        odd, want = _odd_one(given, dtypes, prefer=_short(torch.get_default_dtype()))
        listing = ", ".join(f"{name} is {d}" for (name, _), d in zip(given, dtypes))
        raise TypeError(
            f"{owner} potentials must share one dtype: {listing}; "
            f"convert them (e.g. {odd}.{_DTYPE_METHOD.get(want, f'to(torch.{want})')})"
        )
    devices = [str(t.device) for _, t in given]
    odd, want = _odd_one(given, devices)
    listing = ", ".join(f"{name} is on {d}" for (name, _), d in zip(given, devices))
    raise TypeError(
        f"{owner} potentials must be on one device: {listing}; move them (e.g. {odd}.to('{want}'))"
    )


_DTYPE_METHOD = {"float32": "float()", "float64": "double()", "bfloat16": "bfloat16()"}


def _short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _odd_one(given: list, values: list[str], prefer: str | None = None) -> tuple[str, str]:
    """(the first argument off the value to convert to, that value). The value is the most common one
    (on a tie ``prefer``, else the first argument's), or that of a tensor named by a description, not an
    argument ("the grammar" of a TreeDistribution: the others follow it, and it has no ``.float()``)."""
    counts = Counter(values)
    want = max(counts, key=lambda v: (counts[v], v == prefer))
    want = next((v for (name, _), v in zip(given, values) if not name.isidentifier()), want)
    return next(name for (name, _), v in zip(given, values) if v != want), want


def check_shape(name: str, value: Tensor, expected: tuple, names: str) -> None:
    """Check ``value.shape`` against ``expected`` (ints or None for "any"); ``names`` like "B x T x N"."""
    ok = value.dim() == len(expected) and all(
        e is None or e == s for e, s in zip(expected, value.shape)
    )
    if not ok:
        want = " x ".join("?" if e is None else str(e) for e in expected)
        raise ValueError(
            f"{name} must have shape {names} = ({want}), got {tuple(value.shape)}"
        )


def check_finite(name: str, value: Tensor, allow_neg_inf: bool = True) -> None:
    """Reject NaN and +inf (and -inf unless ``allow_neg_inf``: a log-potential of -inf is a zero).

    One reduction (max, and min unless ``allow_neg_inf``; both propagate NaN) and one host
    synchronization, not an elementwise mask.
    """
    if value.numel() == 0:
        return
    lo, hi = (-math.inf, _largest(value)) if allow_neg_inf else _extremes(value)
    if math.isnan(hi):
        raise ValueError(f"{name} contains NaN{first_index(value.isnan())}")
    if hi == math.inf or (not allow_neg_inf and lo == -math.inf):
        what = "+inf" if allow_neg_inf else "infinite values"
        bad = value == math.inf if allow_neg_inf else value.isinf()
        raise ValueError(f"{name} contains {what}{first_index(bad)}; log-potentials must be finite or -inf")


def first_index(bad: Tensor) -> str:
    """' (first at index (i, j, ...) of a ... tensor)': where an error names a bad entry."""
    index = tuple(int(i) for i in bad.nonzero()[0])
    return f" (first at index {index} of a {' x '.join(map(str, bad.shape))} tensor)"


def check_nonnegative(name: str, value: Tensor) -> None:
    """Reject negative or non-finite entries of a feature / probability matrix (one reduction)."""
    if value.numel() == 0:
        return
    lo, hi = _extremes(value)
    if math.isnan(lo) or hi == math.inf:
        raise ValueError(f"{name} must be finite, got NaN or inf entries{first_index(~value.isfinite())}")
    if lo < 0:
        raise ValueError(
            f"{name} must be non-negative (a feature map such as exp or softmax), got minimum {lo:.4g}"
            f"{first_index(value < 0)}"
        )


def all_finite(value: Tensor) -> bool:
    """Whether every entry is finite: one reduction (``_extremes``), not an elementwise mask."""
    return value.numel() == 0 or all(math.isfinite(x) for x in _extremes(value))


def _largest(value: Tensor) -> float:
    """The max of a non-empty tensor, NaN if it holds one."""
    refuse_unreadable(value)
    return value.detach().amax().item()


def _extremes(value: Tensor) -> tuple[float, float]:
    """(min, max) of a non-empty tensor, NaN if it holds one, read in one host synchronization."""
    refuse_unreadable(value)
    value = value.detach()
    return tuple(torch.stack([value.amin(), value.amax()]).tolist())  # 1.5x faster than aminmax on a CPU


def check_lengths(
    lengths: Tensor | None, batch: int, max_len: int, device, shortest: int = 1, why: str = ""
) -> Tensor:
    """Return lengths as a long tensor of shape (B,), each in shortest..T (``why``: the reason for a
    shortest above 1, said in the error); None means all T."""
    if lengths is None:
        return torch.full((batch,), max_len, dtype=torch.long, device=device)
    if not isinstance(lengths, Tensor):
        lengths = torch.as_tensor(lengths)
    if lengths.dtype == torch.bool:
        raise TypeError(f"lengths must be integers, got a bool tensor {lengths.tolist()}")
    if lengths.is_floating_point():
        if not torch.equal(lengths, lengths.round()):
            raise ValueError(f"lengths must be integers, got {lengths.tolist()}")
    lengths = lengths.to(device=device, dtype=torch.long)
    if lengths.shape != (batch,):
        raise ValueError(f"lengths must have shape (B,) = ({batch},), got {tuple(lengths.shape)}")
    if (lengths < shortest).any() or (lengths > max_len).any():
        bounds = f"{shortest}..T = {shortest}..{max_len}"
        raise ValueError(f"lengths must lie in {bounds}{why}, got {lengths.tolist()}")
    return lengths


def check_sample_count(n, name: str = "n") -> None:
    """The number of samples (or best paths, ``name``) asked for: a positive int (not a bool)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"{name} must be a positive int, got {n!r}")


def check_label_sequences(name: str, value, batch: int, length: int) -> Tensor:
    """An integer B x T or S x B x T tensor of labels (states, segment starts) as long."""
    if not isinstance(value, Tensor) or value.is_floating_point():
        raise TypeError(f"{name} must be an integer tensor of shape B x T or S x B x T")
    if value.dim() not in (2, 3) or tuple(value.shape[-2:]) != (batch, length):
        raise ValueError(
            f"{name} must have shape B x T = ({batch}, {length}) or S x B x T, got {tuple(value.shape)}"
        )
    return value.long()
