"""SIGTERM stops a running dynamic program at once, not at the end of its batch.

Lightning handles SIGTERM by setting a flag that its loops read between batches, so one long batch
(a PCFG's inside pass over a 5,000-word line takes minutes) keeps the process alive long after a
scheduler or ``timeout`` asked it to stop. ``InterruptDynamicPrograms`` (every zoo task attaches it)
wraps Lightning's handler: after it ran, a SIGTERM that arrives while an engine computation is
running raises Lightning's ``SIGTERMException`` (exit status 143) there, at the next step of the DP
(Python runs signal handlers between bytecodes, and a DP is a Python loop of tensor operations).
An engine computation writes nothing outside its own tensors
(``zoo.inference.precision.engine_call_running``), so nothing saved is cut short; elsewhere (a
checkpoint being written) Lightning's own handling applies.
"""

from __future__ import annotations

import signal
import threading

import lightning.pytorch as pl
from lightning.pytorch.utilities.exceptions import SIGTERMException

from zoo.inference.precision import engine_call_running


class InterruptDynamicPrograms(pl.Callback):
    """Raise ``SIGTERMException`` inside a running engine computation on SIGTERM (after Lightning's
    own handler, which stops the DDP workers and sets its flag)."""

    def __init__(self):
        self._previous = None

    def _install(self) -> None:
        if self._previous is not None or threading.current_thread() is not threading.main_thread():
            return  # signal handlers live on the main thread
        self._previous = signal.getsignal(signal.SIGTERM)
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame) -> None:
        if callable(self._previous):
            self._previous(signum, frame)
        elif self._previous == signal.SIG_DFL and not engine_call_running():
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # nobody else handles it: terminate
            signal.raise_signal(signal.SIGTERM)
        if engine_call_running():  # exit status 128 + 15, as a process killed by SIGTERM
            raise SIGTERMException(128 + signum)

    # installed once Lightning has registered its handler (after ``setup``), for every kind of run
    def on_fit_start(self, trainer, pl_module) -> None:
        self._install()

    def on_validation_start(self, trainer, pl_module) -> None:
        self._install()

    def on_test_start(self, trainer, pl_module) -> None:
        self._install()

    def on_predict_start(self, trainer, pl_module) -> None:
        self._install()

    def teardown(self, trainer, pl_module, stage: str) -> None:
        """Lightning's own teardown (which runs first) has put back the handler it found; ours goes
        only if something installed it again since."""
        if self._previous is not None and signal.getsignal(signal.SIGTERM) == self._handle:
            signal.signal(signal.SIGTERM, self._previous)
        self._previous = None


__all__ = ["InterruptDynamicPrograms"]
