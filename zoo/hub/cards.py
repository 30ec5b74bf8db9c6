"""Model cards: rendered with ``huggingface_hub.ModelCard`` from ``zoo/hub/card_templates/model_card.md``,
the layout shared by every family, and the family's own parts (``intro.md``, ``metric.md``,
``limitations.md``, ``citation.bib``, themselves Jinja templates) in the folder its catalog declares
(``zoo.hub.families``; ``zoo/models/<family>/card_templates/<ModelClass>/``). The card is filled from the
model's ``config.json`` (class, arguments, architecture), its measured results (``results.json``: never
numbers we did not measure) and the ``zoo fit`` configuration that trained it, with the papers' numbers
(the family's ``paper_results``) beside ours.

Results are ``{"dataset": name, "metrics": {"val/ppl": 262.8, ...}}`` with the metric names the
tasks log; ``zoo validate | test ... --results FILE`` writes exactly this.
"""

from __future__ import annotations

import importlib
import json
import math
import os
from pathlib import Path
from typing import Any

import jinja2
import yaml

from zoo.hub.families import CARD_PARTS, family, paper_results
from zoo.models.base import family_class

CARDS = Path(__file__).resolve().parent / "card_templates"  # package data: installs carry it
LIBRARY_NAME = "structured-zoo"
LICENSE = "mit"

# Our logged metric name (after the stage) -> (model-index metric type, human name).
METRICS = {
    "ppl": ("perplexity", "perplexity"),
    "nll": ("nll", "negative log-likelihood (nats per event)"),
    "sentence_f1": ("f1", "sentence-level unlabeled F1 (%)"),
    "corpus_f1": ("f1", "corpus-level unlabeled F1 (%)"),
    "nll_sequence": ("nll", "negative log-likelihood (nats per sequence)"),
    "frame_accuracy": ("accuracy", "frame accuracy under the best one-to-one label map (fraction)"),
    "boundary_f1": ("f1", "segment boundary F1 (fraction)"),
    "segment_ratio": ("segment_ratio", "predicted segments over known segments"),
    "nll_sentence": ("nll", "negative log-likelihood (nats per sentence)"),
    "neg_elbo_sentence": ("neg_elbo", "negative ELBO (nats per sentence)"),
}
# Optional notes kept beside the metrics: how the model was trained (hardware, minutes), the quick
# reproducibility check (the metric on the first held-out batches, re-measured by the tests), and
# baselines measured on the same data and split ({model: {metric: value}}).
NOTES = ("training", "quick_check", "baselines")
SPLITS = {"val": "validation", "test": "test"}


def dataset_name(data: dict[str, Any] | None) -> str | None:
    """The dataset a LightningCLI ``data`` section ({"class_path", "init_args"}) reads, for cards: as the
    data module names it (``SequenceDataModule.card_dataset``); a class that cannot be imported here (no
    ``train`` extra) or names nothing: its name without ``DataModule``, lower-cased."""
    if not data or "class_path" not in data:
        return None
    module, _, name = data["class_path"].rpartition(".")
    try:
        card_dataset = getattr(importlib.import_module(module or "zoo.data"), name).card_dataset
    except (ImportError, AttributeError):
        return name.removesuffix("DataModule").lower()
    return card_dataset(data.get("init_args") or {})


def read_results(results: str | os.PathLike | dict | list, dataset: str | None = None) -> dict[str, Any]:
    """Measured results as ``{"dataset": str | None, "metrics": {name: float}}``.

    Accepts that format (optionally with ``NOTES`` dicts beside the metrics), a flat {metric: value}
    mapping, or a list of them (what ``trainer.validate`` / ``trainer.test`` return), as an object or
    a JSON file path. ``dataset`` fills a missing name.
    """
    if isinstance(results, (str, os.PathLike)):
        try:
            results = json.loads(Path(results).read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise ValueError(f"cannot read results JSON {results}: {error}") from None
    if isinstance(results, list):
        merged: dict[str, Any] = {}
        for part in results:
            if not isinstance(part, dict):
                raise ValueError(f"a list of results holds dicts of metrics, got {type(part).__name__}")
            merged.update(part)
        results = merged
    if not isinstance(results, dict):
        raise ValueError(f"results must be a dict of metrics, got {type(results).__name__}")
    metrics = results["metrics"] if "metrics" in results else results
    dataset = results.get("dataset", dataset) if "metrics" in results else dataset
    notes = {key: results[key] for key in NOTES if "metrics" in results and key in results}
    for key, note in notes.items():
        if not isinstance(note, dict):
            raise ValueError(f"results {key!r} must be a dict, got {note!r}")
    clean = {}
    for name, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"result {name!r} must be a finite number, got {value!r}")
        clean[str(name)] = float(value)
    return {"dataset": dataset, "metrics": clean, **notes}


def _family_part(model_class: str, name: str, context: dict[str, Any]) -> str:
    path = family(model_class).card_templates / name  # every part exists: register_family checks it
    return jinja2.Template(path.read_text(), keep_trailing_newline=True).render(**context).strip()


def eval_results(task_type: str, results: dict[str, Any]):
    """``huggingface_hub.EvalResult`` rows (model-index) of our measured metrics, for a family whose
    cards have the Hugging Face task ``task_type`` (its ``card_task_type``)."""
    from huggingface_hub import EvalResult

    rows = []
    dataset = results.get("dataset") or "unknown"
    for name, value in results["metrics"].items():
        stage, _, metric = name.partition("/")
        if stage not in SPLITS or metric not in METRICS:
            continue  # e.g. train/loss, val/nll_std: shown in the card's table, not in the model index
        metric_type, metric_name = METRICS[metric]
        rows.append(
            EvalResult(
                task_type=task_type,
                dataset_type=dataset,
                dataset_name=dataset,
                dataset_split=SPLITS[stage],
                metric_type=metric_type,
                metric_name=f"{SPLITS[stage]} {metric_name}",
                metric_value=value,
            )
        )
    return rows


def render_card(
    config: dict[str, Any],
    results: dict[str, Any] | None = None,
    training_config: str | None = None,
    repo_id: str | None = None,
    learning_curve: bool = False,
    bundled_tag: str | None = None,
):
    """The ``huggingface_hub.ModelCard`` of a pretrained-model folder's ``config.json`` contents.

    Args:
        results: measured results (``read_results``'s format, or anything it accepts).
        training_config: the YAML text of the ``zoo fit`` configuration that trained the model.
        repo_id: the Hub repo the card is for (usage examples name it; default: a local folder).
        learning_curve: whether the folder has ``learning_curve.png`` (the card shows it).
        bundled_tag: the tag of a checkpoint bundled with the package (``zoo/weights/<tag>``): the usage
            examples name it, as ``from_pretrained`` and ``init_from`` take it offline.
    """
    from huggingface_hub import ModelCard, ModelCardData

    model_class = config["class_path"].rsplit(".", 1)[-1]
    args = config["init_args"]
    backend = args.get("backend")
    results = read_results(results) if results is not None else None
    training = yaml.safe_load(training_config) if training_config else None
    dataset = (results or {}).get("dataset") or dataset_name((training or {}).get("data"))
    if results is not None and results.get("dataset") is None:
        results["dataset"] = dataset
    papers = paper_results(model_class, dataset)  # none on this data: the family's, marked as such
    name = config.get("architecture") or model_class
    model_name = f"{name} ({backend})" if backend else name
    source = repo_id or bundled_tag or "path/to/this/folder"
    context = {
        "model_name": model_name,
        "model_class": model_class,
        "class_path": config["class_path"],
        "architecture": config.get("architecture"),
        "backend": backend,
        "init_args": args,
        "dataset": dataset,
        "repo_id": repo_id,
        "bundled": repo_id is None and bundled_tag is not None,
        "source": source,
        "zoo_version": config.get("zoo_version"),
        "format_version": config.get("zoo_format_version"),
        "vocab": config.get("vocab_sha256") is not None,
        "vocab_size": args.get("vocab_size"),
        "training_config": training_config.strip() if training_config else None,
        "task_class": ((training or {}).get("model") or {}).get("class_path"),
        "results": results,
        "papers": papers or paper_results(model_class),
        "papers_on_other_data": bool(dataset) and not papers,
        "learning_curve": learning_curve,
    }
    for part in CARD_PARTS:
        context[part.split(".")[0]] = _family_part(model_class, part, context)
    tags = [LIBRARY_NAME, "pytorch", "structured-prediction", model_class.lower()]
    if backend:
        tags.append(f"backend-{backend}")
    measured = (results or {}).get("metrics", {})
    task_type = family_class(config["class_path"]).card_task_type
    metric_types = sorted({METRICS[m][0] for m in (n.partition("/")[2] for n in measured) if m in METRICS})
    card_data = ModelCardData(
        library_name=LIBRARY_NAME,
        license=LICENSE,
        tags=tags,
        datasets=[dataset] if dataset else None,
        metrics=metric_types or None,
        model_name=model_name,
        eval_results=(eval_results(task_type, results) if results else None) or None,
    )
    return ModelCard.from_template(card_data, template_path=str(CARDS / "model_card.md"), **context)


CARDS_INTRO = """# Model cards

Every released checkpoint carries its model card as the `README.md` of its folder: the bundled ones
in `zoo/weights/<arch.tag>/README.md` (below), a Hub repo as its `README.md`. Cards are rendered by
one piece of code, `zoo.hub.cards.render_card`, from the folder's `config.json` (the model), its
`results.json` (the measured numbers, with the hardware and minutes of training) and its
`training_config.yaml` (the exact `zoo fit` configuration), next to the papers' numbers
(each family's catalog, `zoo/models/<family>/catalog.py`); the templates are
`zoo/hub/card_templates/model_card.md` and each family's `zoo/models/<family>/card_templates/`.
`save_pretrained` and `zoo export` write a card, `zoo card DIR [--results R]` re-renders one,
`push_to_hub` uploads it.
This page is generated by `python scripts/cards_index.py` (a test keeps it current).
"""


def _index_row(tag: str, folder: Path) -> str:
    config = json.loads((folder / "config.json").read_text())
    results_path = folder / "results.json"
    results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    measured = ", ".join(f"{k} {v:.4g}" for k, v in sorted(results.get("metrics", {}).items())) or "—"
    family = config["class_path"].rsplit(".", 1)[-1]
    backend = config["init_args"].get("backend", "—")
    card = f"[card](../zoo/weights/{tag}/README.md)"
    return f"| `{tag}` | {family} | {backend} | {results.get('dataset', '—')} | {measured} | {card} |"


def bundled_cards_index() -> str:
    """cards/README.md: where the released checkpoints' cards live, how they are made, one row and
    link a bundled checkpoint (``python scripts/cards_index.py`` writes it)."""
    from zoo.hub.bundled import bundled_folders

    rows = [_index_row(tag, folder) for tag, folder in bundled_folders().items()]
    header = "| checkpoint | family | backend | data | measured | card |\n|---|---|---|---|---|---|"
    return f"{CARDS_INTRO}\n## Bundled checkpoints\n\n{header}\n" + "\n".join(rows) + "\n"
