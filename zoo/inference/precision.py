"""The engine's dynamic programs run in full float32, whatever the caller's precision settings.

Two common settings would otherwise lower the precision of every matrix product silently:
- ``torch.autocast`` (Lightning's ``bf16-mixed`` / ``16-mixed``) runs products in bfloat16 / float16;
- TF32 (``torch.set_float32_matmul_precision("high")``, which Lightning suggests on GPUs with tensor
  cores, or ``torch.backends.cuda.matmul.allow_tf32 = True``) keeps 10 mantissa bits of each input.
Either way a chain's log Z drifts by ~1e-4 nats a position (0.02 nats at T = 200) with no error raised.
Every engine call therefore turns autocast off and asks for "highest" float32 matmul precision for its
duration (restored after): the potentials are float32 (bfloat16 inputs are computed in float32, see
``checks.as_dp_tensor``) and so is every product. The networks that make the potentials keep the
caller's settings.
"""

from __future__ import annotations

import functools
from contextlib import ExitStack, contextmanager

import torch

AUTOCAST_DEVICES = ("cpu", "cuda")


_running = 0  # engine calls running now (every one enters ``full_precision``)


@contextmanager
def full_precision():
    """Autocast off on every device type where it is on, and float32 matmul precision "highest"; the
    call counts as a running engine call meanwhile (``engine_call_running``)."""
    global _running
    with ExitStack() as stack:
        for device_type in AUTOCAST_DEVICES:
            if torch.is_autocast_enabled(device_type):
                stack.enter_context(torch.autocast(device_type, enabled=False))
        _ieee_float32_matmul(stack)
        _running += 1
        try:
            yield
        finally:
            _running -= 1


def engine_call_running() -> bool:
    """Whether an engine computation (a forward, a backward, a decoding) is running: it writes nothing
    outside its own tensors and holds no lock, so a signal handler may stop it at any step
    (``zoo.tasks.interrupt``)."""
    return _running > 0


def _ieee_float32_matmul(stack: ExitStack) -> None:
    """Full float32 matrix products until ``stack`` closes, set through the API the caller used: torch
    raises when one reads the TF32 settings through the legacy API (``allow_tf32``,
    ``set_float32_matmul_precision``) after they were set through the per-backend one
    (``torch.backends.*.fp32_precision``, torch >= 2.9), or the other way round."""
    try:
        before = torch.get_float32_matmul_precision()  # raises once the per-backend API was used
    except RuntimeError:
        for backend in (torch.backends.cuda.matmul, torch.backends.mkldnn.matmul):
            previous = backend.fp32_precision
            if previous != "ieee":
                backend.fp32_precision = "ieee"
                stack.callback(setattr, backend, "fp32_precision", previous)
        return
    if before != "highest":
        torch.set_float32_matmul_precision("highest")
        stack.callback(torch.set_float32_matmul_precision, before)


def in_full_precision(fn):
    """Decorator: run ``fn`` under ``full_precision()``."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with full_precision():
            return fn(*args, **kwargs)

    return run


class FullPrecision:
    """An engine whose every method runs under ``full_precision()``; attributes pass through."""

    def __init__(self, engine):
        self.engine = engine

    def __getattr__(self, name):
        attr = getattr(self.engine, name)
        return in_full_precision(attr) if callable(attr) else attr

    def __repr__(self) -> str:
        return f"FullPrecision({self.engine!r})"
