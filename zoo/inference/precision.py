"""The engine's dynamic programs run in full float32, whatever the caller's precision settings.

Two common settings would otherwise lower the precision of every matrix product silently:
- ``torch.autocast`` (Lightning's ``bf16-mixed`` / ``16-mixed``) runs products in bfloat16 / float16;
- TF32 (``torch.set_float32_matmul_precision("high")``, which Lightning suggests on GPUs with tensor
  cores, or ``torch.backends.cuda.matmul.allow_tf32 = True``) keeps 10 mantissa bits of each input.
Either way a chain's log Z drifts by ~1e-4 nats a position (0.02 nats at T = 200) with no error raised.
Every engine call therefore turns autocast off and asks for "highest" float32 matmul precision for its
duration (restored after): the potentials are float32 (bfloat16 inputs are computed in float32, see
``checks.as_dp_tensor``) and so is every product. The networks that make the potentials keep the
caller's settings, except that the matmul precision is one setting of the process in torch: while any
thread runs an engine call, every thread's float32 products run at "highest" (slower where the caller
asked for TF32, not less accurate).
"""

from __future__ import annotations

import functools
import threading
from contextlib import ExitStack, contextmanager

import torch
from torch import Tensor

AUTOCAST_DEVICES = ("cpu", "cuda")


class _Calls(threading.local):
    depth = 0  # engine calls running now in this thread


_calls = _Calls()
# The matmul precision is one setting of the process (autocast is a thread's): the first engine call
# to start, in any thread, sets it, and the last to end restores it, so that no thread's call runs its
# products at the caller's lower precision because another thread's call ended first.
_setting_lock = threading.Lock()
_running = 0  # engine calls running now, every thread
_restore: ExitStack | None = None


@contextmanager
def full_precision():
    """Autocast off on every device type where it is on (in this thread), and float32 matmul precision
    "highest" (in the process, while any engine call runs); the call counts as a running engine call
    of this thread meanwhile (``engine_call_running``)."""
    with ExitStack() as stack:
        for device_type in AUTOCAST_DEVICES:
            if torch.is_autocast_enabled(device_type):
                stack.enter_context(torch.autocast(device_type, enabled=False))
        _start()
        _calls.depth += 1
        try:
            yield
        finally:
            _calls.depth -= 1
            _end()


def _start() -> None:
    global _running, _restore
    with _setting_lock:
        if _running == 0:
            restore = ExitStack()
            _ieee_float32_matmul(restore)
            _restore = restore
        _running += 1


def _end() -> None:
    global _running, _restore
    with _setting_lock:
        _running -= 1
        if _running == 0:  # the first call to start set _restore
            restore, _restore = _restore, None
            restore.close()


def engine_call_running() -> bool:
    """Whether an engine computation (a forward, a backward, a decoding) is running in this thread: it
    writes nothing outside its own tensors, so a signal handler (run in the main thread) may stop it at
    any step (``zoo.tasks.interrupt``)."""
    return _calls.depth > 0


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


def full_width(t: Tensor) -> Tensor:
    """``t`` in float32 where it is bfloat16 or float16 (autocast's outputs), else as it is."""
    return t.float() if t.dtype in (torch.bfloat16, torch.float16) else t


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
        if name == "engine" or name.startswith("__"):  # a copy or unpickling before __dict__ is set
            raise AttributeError(name)
        attr = getattr(self.engine, name)
        return in_full_precision(attr) if callable(attr) else attr

    def __repr__(self) -> str:
        return f"FullPrecision({self.engine!r})"
