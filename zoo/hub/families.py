"""What each model family declares about itself, next to its own module (``zoo/models/<family>/catalog.py``,
as timm declares ``default_cfgs`` beside ``@register_model``): its architectures (``register_architectures``),
its model-card templates, its table in docs/results.md, the papers' numbers to show beside ours, and what
the tests need to build and feed a tiny model. The cards, the results scripts and the tests read these
declarations; none of them names a family. docs/zoo-api.md says how to add one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from zoo.hub.registry import Architecture, register_architecture

CARD_PARTS = ("intro.md", "metric.md", "limitations.md", "citation.bib")


@dataclass(frozen=True)
class PaperResult:
    """One published number (a paper's table): the dataset name our results use
    (``zoo.hub.cards.dataset_name``), the model and setting as the paper names them, our metric name it
    corresponds to (``test/ppl``, ``test/nll``, ``test/sentence_f1``, ``test/nll_sequence``,
    ``test/nll_sentence``; the conventions of docs/results.md), the value and the source."""

    dataset: str
    model: str
    setting: str
    metric: str
    value: float
    source: str


def paper_rows(dataset: str, metric: str, rows: list[tuple[str, str, float, str]]) -> list[PaperResult]:
    """``PaperResult``s of one dataset and metric from (model, setting, value, source) rows."""
    return [
        PaperResult(dataset, model, setting, metric, value, source) for model, setting, value, source in rows
    ]


@dataclass(frozen=True)
class Family:
    """A model family's declarations.

    Args:
        model_class: the class's short name (``zoo.models.<model_class>``).
        card_templates: the folder of its card parts (``CARD_PARTS``: Jinja templates that see
            ``init_args``, ``backend``, ``dataset``, ``results`` ...), filled into
            ``zoo/hub/card_templates/model_card.md``.
        results_title: the title of its table of bundled checkpoints in docs/results.md.
        results_metrics: the test metrics that table shows.
        paper_results: the papers' numbers its cards show beside ours.
        test_sizes: constructor overrides that make any of its architectures tiny (the registry tests).
        example_batch: ``(model, generator) -> batch``: a ragged batch of 3 sequences of lengths 5, 3
            and 4 that a model of the family scores.
    """

    model_class: str
    card_templates: Path
    results_title: str
    results_metrics: tuple[str, ...]
    example_batch: Callable[[Any, torch.Generator], dict]
    paper_results: tuple[PaperResult, ...] = ()
    test_sizes: dict[str, Any] = field(default_factory=dict)


_FAMILIES: dict[str, Family] = {}


def register_family(family: Family) -> Family:
    """Add ``family`` (ValueError if its class is registered already or a card part is missing)."""
    if family.model_class in _FAMILIES:
        raise ValueError(f"family {family.model_class!r} is already registered")
    missing = [part for part in CARD_PARTS if not (family.card_templates / part).is_file()]
    if missing:
        raise ValueError(f"family {family.model_class!r}: no card parts {missing} in {family.card_templates}")
    _FAMILIES[family.model_class] = family
    return family


def family(model_class: str) -> Family:
    """The declarations of a family by its class's short name; ValueError naming the known ones."""
    if model_class not in _FAMILIES:
        raise ValueError(
            f"no family {model_class!r} is registered (known: {sorted(_FAMILIES)}); a family declares "
            "itself in its catalog module (docs/zoo-api.md)"
        )
    return _FAMILIES[model_class]


def families() -> list[Family]:
    """Every registered family, in registration order."""
    return list(_FAMILIES.values())


def paper_results(model_class: str, dataset: str | None = None) -> list[PaperResult]:
    """The published rows of a family (class short name), optionally on one dataset."""
    rows = _FAMILIES[model_class].paper_results if model_class in _FAMILIES else ()
    return [r for r in rows if dataset in (None, r.dataset)]


def token_batch(model, generator: torch.Generator) -> dict:
    """Words of the model's vocabulary, lengths 5, 3 and 4 (``Family.example_batch`` of the word models),
    each ending with the vocabulary's ``<eos>`` where the model has one (as its data's sentences do; a
    PCFG requires it)."""
    tokens = torch.randint(model.config["vocab_size"], (3, 5), generator=generator)
    lengths = torch.tensor([5, 3, 4])
    if getattr(model, "vocab", None) is not None:
        tokens[torch.arange(3), lengths - 1] = model.vocab.eos_id
    return {"tokens": tokens, "lengths": lengths}


def register_architectures(
    class_path: str, prefix: str, entries: list[tuple[str, dict, dict, str, tuple, str]], **shared: Any
) -> None:
    """Register ``prefix_<size>`` architectures of one class: (size, config, backends, default backend,
    recipes, description) each (``Architecture``'s fields; recipes as ``family/name``, without
    ``recipes/`` and ``.yaml``); ``shared`` arguments go into every architecture's ``defaults``."""
    for size, config, backends, default, recipes, description in entries:
        register_architecture(
            Architecture(
                name=f"{prefix}_{size}",
                class_path=class_path,
                config=config,
                backends=backends,
                default_backend=default,
                defaults=dict(shared),
                recipes=tuple(f"recipes/{r}.yaml" for r in recipes),
                description=description,
            )
        )
