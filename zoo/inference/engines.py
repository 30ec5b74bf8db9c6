"""The engine registry: each structure's engine class per backend, and an engine object from it.

An engine module registers its class where it is defined (``@register_engine("chain", "low-rank")``);
a structure's distribution asks ``make_engine`` for the backend it was given. A fifth backend is one
engine file per structure that offers it, registered the same way.
"""

from __future__ import annotations

from zoo.inference.backend import Backend
from zoo.inference.precision import FullPrecision

_ENGINES: dict[str, dict[Backend, type]] = {}


class Engine:
    """The base of every structure's engines: its backend's ``name``, the factor containers it
    consumes (``factor_types``), what it computes how (``capabilities``: operation -> (kind, note),
    ``zoo.inference.kinds``), and ``prepare``, which checks (and may convert) the factors."""

    name: str = ""
    factor_types: tuple = ()
    capabilities: dict[str, tuple[str, str]] = {}

    def prepare(self, factors, lengths=None):
        """The factors this backend consumes; TypeError naming the containers it takes otherwise.
        ``lengths`` (B,): a sequence's, where the backend reads the factors before an operation."""
        if not isinstance(factors, self.factor_types):
            wanted = " or ".join(t.__name__ for t in self.factor_types)
            raise TypeError(f"the {self.name!r} backend needs {wanted}, got {type(factors).__name__}")
        return factors


def register_engine(structure: str, backend: str | Backend):
    """Class decorator: the engine class of ``backend`` for ``structure`` ("chain", "semimarkov",
    "tree")."""
    parsed = Backend.parse(backend)

    def add(engine: type) -> type:
        _ENGINES.setdefault(structure, {})[parsed] = engine
        return engine

    return add


def engines_of(structure: str) -> dict[Backend, type]:
    """The engine classes registered for ``structure``, by backend (in the Backend enum's order)."""
    registered = _ENGINES.get(structure, {})
    return {backend: registered[backend] for backend in Backend if backend in registered}


def make_engine(structure: str, backend: Backend, options) -> FullPrecision:
    """The engine of ``backend`` for ``structure``, run in full float32 precision
    (``zoo.inference.precision``).

    The randomized backend needs ``options=RDPOptions(...)``; another backend takes options only if
    its engine class says so (``takes_options = True``, e.g. the tree rank-space engine's
    "state-space"), and is built without arguments otherwise.
    """
    engines = engines_of(structure)
    if backend not in engines:
        offered = ", ".join(repr(b.value) for b in engines) or "none"
        raise ValueError(f"the {structure} structure has no {backend.value!r} backend; it has {offered}")
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
    raise ValueError(
        f"options are only used by the 'randomized' backend (RDPOptions) and the tree's 'rank-space' one "
        f"('state-space'), not by {backend.value!r}"
    )
