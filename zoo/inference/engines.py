"""Choosing a structure's engine object from a backend and its options (shared by every structure)."""

from __future__ import annotations

from zoo.inference.backend import Backend
from zoo.inference.precision import FullPrecision


def make_engine(backend: Backend, engines: dict, options) -> FullPrecision:
    """The engine of ``backend`` from a structure's ``engines`` map, run in full float32 precision
    (``zoo.inference.precision``).

    The randomized backend needs ``options=RDPOptions(...)``; another backend takes options only if
    its engine class says so (``takes_options = True``, e.g. the tree rank-space engine's
    "state-space"), and is built without arguments otherwise.
    """
    return FullPrecision(_build(engines[backend], backend, options))


def _build(engine: type, backend: Backend, options):
    from zoo.inference.rdp import RDPOptions

    if backend is Backend.RANDOMIZED:
        if not isinstance(options, RDPOptions):
            raise ValueError(
                f"the 'randomized' backend needs options=RDPOptions(k1=..., k2=...), got {options!r}"
            )
        return engine(options)
    if options is None:
        return engine()
    if getattr(engine, "takes_options", False):
        return engine(options)
    raise ValueError(f"options are only used by the 'randomized' backend, not {backend.value!r}")
