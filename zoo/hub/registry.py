"""The model registry: architectures by name, pretrained weights by ``arch.tag`` (timm's convention).

* An **architecture** is a model class with default constructor arguments (family and size), named
  ``<family>_<size>_d<width>``: ``hmm_categorical_n16384_d256`` (a CategoricalHMM with 2^14 states,
  embeddings and hidden layers of 256), ``pcfg_nt30_pt60_d256``. The backend is not part of the name:
  ``create_model(name, backend=...)`` picks it, and each architecture carries the backend-specific
  arguments of its recipes (the rank of ``low-rank`` / ``rank-space``, K1 / K2 of ``randomized``).
* A **pretrained tag** names trained weights of an architecture: ``<arch>.<data>_<backend>[_<variant>]``
  (``hmm_categorical_n16384_d256.ptb_rank_space``); it maps to a Hub repo id (or local folder) and a
  pinned revision, loaded with ``zoo.from_pretrained``.

Each built-in family registers its architectures in its own catalog (``zoo/models/<family>/catalog.py``,
``zoo.hub.families``) when ``zoo`` is imported; docs/zoo-api.md says how to add one.
"""

from __future__ import annotations

import difflib
import fnmatch
from dataclasses import dataclass, field
from typing import Any

from zoo.inference import Backend


@dataclass(frozen=True)
class Architecture:
    """A registered architecture.

    Args:
        name: ``<family>_<size>_d<width>`` (lower case, underscores; no dots).
        class_path: the model class, e.g. ``zoo.models.CategoricalHMM``.
        config: the constructor arguments that define the architecture (its size), for every backend.
        defaults: other constructor arguments its recipes set (dropout, ...), for every backend.
        backends: backend -> the arguments that backend adds (e.g. ``{"rank": 4096}``); the backends
            with a recipe or published setting. Another backend is accepted if its arguments are given
            as overrides.
        default_backend: used when ``create_model`` gets no ``backend``.
        recipes: recipes/*.yaml that train this architecture (for the docs and cards).
        description: one line for ``zoo models``.
    """

    name: str
    class_path: str
    config: dict[str, Any]
    backends: dict[str, dict[str, Any]]
    default_backend: str
    defaults: dict[str, Any] = field(default_factory=dict)
    recipes: tuple[str, ...] = ()
    description: str = ""


@dataclass(frozen=True)
class PretrainedTag:
    """Trained weights of an architecture: ``source`` (Hub repo id or folder) at a pinned ``revision``."""

    name: str  # arch.tag
    source: str
    revision: str | None = None
    description: str = ""


_ARCHITECTURES: dict[str, Architecture] = {}
_PRETRAINED: dict[str, PretrainedTag] = {}


def register_architecture(architecture: Architecture) -> Architecture:
    """Add an architecture to the registry (ValueError for a duplicate or malformed name)."""
    name = architecture.name
    if not name or "." in name or name != name.lower() or " " in name:
        raise ValueError(f"an architecture name is lower case without dots or spaces, got {name!r}")
    if name in _ARCHITECTURES:
        raise ValueError(f"architecture {name!r} is already registered")
    for backend in (*architecture.backends, architecture.default_backend):
        Backend.parse(backend)
    if architecture.default_backend not in architecture.backends:
        raise ValueError(f"{name}: default_backend {architecture.default_backend!r} has no entry in backends")
    _ARCHITECTURES[name] = architecture
    return architecture


def register_pretrained(tag: PretrainedTag) -> PretrainedTag:
    """Add pretrained weights ``arch.tag`` of a registered architecture."""
    arch, dot, label = tag.name.partition(".")
    if not dot or not label:
        raise ValueError(f"a pretrained name is 'arch.tag', got {tag.name!r}")
    architecture(arch)
    if tag.name in _PRETRAINED:
        raise ValueError(f"pretrained weights {tag.name!r} are already registered")
    _PRETRAINED[tag.name] = tag
    return tag


def list_models(pattern: str | None = None, pretrained: bool = False) -> list[str]:
    """Sorted registered names matching the fnmatch ``pattern`` (e.g. ``"hmm_*"``, ``"*n4096*"``):
    architecture names, or with ``pretrained=True`` the ``arch.tag`` names that have weights."""
    names = _PRETRAINED if pretrained else _ARCHITECTURES
    return sorted(n for n in names if pattern is None or fnmatch.fnmatchcase(n, pattern))


def _unknown(name: str, known: list[str], what: str) -> ValueError:
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see zoo.list_models()"
    return ValueError(f"unknown {what} {name!r}{hint}")


def pretrained_tag(name: str) -> PretrainedTag:
    """The registered pretrained weights ``arch.tag`` (ValueError with close matches if unknown)."""
    if name not in _PRETRAINED:
        raise _unknown(name, list(_PRETRAINED), "pretrained model")
    return _PRETRAINED[name]


def architecture(name: str) -> Architecture:
    """The registered architecture ``name`` (ValueError with close matches if unknown)."""
    if name not in _ARCHITECTURES:
        raise _unknown(name, list(_ARCHITECTURES), "architecture")
    return _ARCHITECTURES[name]


def model_config(name: str, backend: str | None = None, **overrides: Any) -> dict[str, Any]:
    """The constructor arguments of architecture ``name`` with ``backend`` (default: the
    architecture's) and ``overrides``."""
    arch = architecture(name)
    chosen = Backend.parse(backend or arch.default_backend).value
    return {**arch.config, **arch.defaults, "backend": chosen, **arch.backends.get(chosen, {}), **overrides}


def create_model(name: str, backend: str | None = None, pretrained: bool | None = None, **overrides: Any):
    """A model of the registered architecture ``name`` (or of pretrained weights ``arch.tag``).

    Args:
        name: an architecture (``zoo.list_models()``), or ``arch.tag`` naming pretrained weights.
        backend: "exact", "low-rank", "rank-space" or "randomized"; default: the architecture's (or
            the pretrained weights').
        pretrained: load the weights of ``arch.tag`` (or of the architecture's only tag). Default: a
            tag's weights, an architecture's fresh weights. ``False`` with a tag: fresh weights of the
            model the tag's weights belong to (its arguments and backend, then ``overrides``).
        overrides: constructor arguments replacing the architecture's (not with pretrained weights).
    """
    from zoo.models.base import ZooModel

    arch_name, _, tag = name.partition(".")
    if pretrained or (tag and pretrained is None):
        return _create_pretrained(name, arch_name, tag, backend, overrides)
    arch = architecture(arch_name)
    check_arguments(arch.class_path, overrides, name)
    if tag:
        from zoo.hub.pretrained import read_config, resolve

        entry = pretrained_tag(name)
        init_args = read_config(resolve(entry.source, revision=entry.revision))["init_args"]
        init_args = {**init_args, **({} if backend is None else {"backend": backend}), **overrides}
    else:
        init_args = model_config(name, backend, **overrides)
    return ZooModel.from_config({"class_path": arch.class_path, "init_args": init_args})


def check_arguments(class_path: str, names: Any, what: str) -> None:
    """ValueError naming each of ``names`` that the model class at ``class_path`` takes no argument of,
    with its close matches (``what``: the model's name in the message)."""
    from zoo.models.base import family_class

    message = refused_arguments(family_class(class_path), names, what)
    if message is not None:
        raise ValueError(message)


def refused_arguments(cls: type, names: Any, what: str, otherwise: str = "") -> str | None:
    """The message naming each of ``names`` that ``cls`` takes no argument of, with its close match (or
    ``otherwise`` formatted with the name, where there is none), and the arguments it takes; None when
    it takes them all. ``what``: its name in the message."""
    import inspect

    parameters = inspect.signature(cls).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return None
    unknown = [name for name in names if name not in parameters]
    if not unknown:
        return None
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, list(parameters), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else otherwise.format(name=name)
        hints.append(f"{name!r}{hint}")
    listed = ", ".join(parameters)
    return f"{what} ({cls.__name__}) takes no argument {', '.join(hints)}; its arguments: {listed}"


def _create_pretrained(name: str, arch_name: str, tag: str, backend: str | None, overrides: dict):
    from zoo.hub.pretrained import from_pretrained

    architecture(arch_name)
    if not tag:
        tags = list_models(f"{arch_name}.*", pretrained=True)
        if len(tags) != 1:
            raise ValueError(
                f"pretrained=True: {arch_name!r} has "
                + (f"several pretrained tags {tags}: name one" if tags else "no pretrained weights yet")
                + f"; train it with zoo fit (recipes: {', '.join(architecture(arch_name).recipes) or 'none'})"
            )
        name = tags[0]
    entry = pretrained_tag(name)
    if overrides:
        raise ValueError(
            f"{name}: pretrained weights fix the model's arguments, so they take no overrides, got "
            f"{sorted(overrides)} (pretrained=False builds the model of {name} with fresh weights and them)"
        )
    model = from_pretrained(entry.source, revision=entry.revision)  # the registry's, whatever the folder here
    check_tag_holds(name, model)
    if backend is not None and Backend.parse(backend).value != model.config["backend"]:
        raise ValueError(f"{name} was trained with backend {model.config['backend']!r}, not {backend!r}")
    return model


def check_tag_holds(name: str, model) -> None:
    """ValueError unless ``model``, loaded from the pretrained tag ``name`` (``arch.tag``), is of the
    tag's architecture (a registered tag may name any folder or repo)."""
    from zoo.hub.pretrained import public_class_path

    arch_name = name.partition(".")[0]
    if match_architecture(public_class_path(model), model.config) != arch_name:
        source = pretrained_tag(name).source
        raise ValueError(f"{name}: {source} does not hold a {arch_name}; its arguments: {model.config}")


def architecture_differences(name: str, class_path: str, config: dict[str, Any]) -> str | None:
    """How model arguments ``config`` of ``class_path`` differ from registered architecture ``name``'s
    (its class, and each argument of ``arch.config``), or None where they are that architecture."""
    arch = architecture(name)
    theirs, ours = arch.class_path.rsplit(".", 1)[-1], class_path.rsplit(".", 1)[-1]
    if theirs != ours:
        return f"{name} is a {theirs}, the model a {ours}"
    differ = [f"{k} = {config.get(k)!r} ({name}: {v!r})"
              for k, v in arch.config.items() if config.get(k) != v]  # fmt: skip
    return f"the model's {', '.join(differ)}" if differ else None


def match_architecture(class_path: str, config: dict[str, Any]) -> str | None:
    """The registered architecture of model arguments ``config``, if any: the class and every argument
    of ``arch.config`` agree (backend-specific and ``defaults`` arguments may differ)."""
    matches = (name for name in _ARCHITECTURES if architecture_differences(name, class_path, config) is None)
    return next(matches, None)
