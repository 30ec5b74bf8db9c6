"""``zoo export``: a Lightning checkpoint of ``zoo fit`` as a pretrained-model folder.

The checkpoint holds the task's plain-value hyperparameters (the model as its ``spec()``) and the
state dict (the model's weights under ``model.``); LightningCLI wrote the run's full configuration
(``config.yaml``) into the run's log folder, next to the ``checkpoints/`` folder, and it becomes the
folder's ``training_config.yaml`` (the card's exact training command; ``portable``: without the
machine's run folder, the checkpoint a resumed run restored, or a local ``vocab_from``). A text model's
vocabulary, which the task records in its checkpoints (``checkpoint["vocab"]``), becomes ``vocab.json``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch
import yaml

from zoo.data.vocab import Vocabulary
from zoo.hub.pretrained import CheckpointError, load_into, machine_state, save_pretrained
from zoo.models.base import ZooModel, weights_follow
from zoo.plot import plot_learning_curves


def run_file(checkpoint: Path, name: str) -> Path | None:
    """A file the run that wrote ``checkpoint`` left in its log folder, next to ``checkpoints/``
    (LightningCLI's ``config.yaml``, the CSV logger's ``metrics.csv``), if found."""
    for folder in (checkpoint.parent, checkpoint.parent.parent):
        if (folder / name).is_file():
            return folder / name
    return None


def portable(config: str) -> str:
    """A ``zoo fit`` configuration whose card commands run anywhere: without the training machine's run
    folder (``trainer.default_root_dir``: they write wherever their user runs them), and with null for its
    ``machine_state`` (the checkpoint a resumed run restored, a local ``vocab_from``: they use the folder's
    weights and vocabulary). Lines of a value left out or set to null go with it."""
    parsed = yaml.safe_load(config)
    nulled = set(machine_state(parsed)) if isinstance(parsed, dict) else set()
    lines, skipped = [], None  # skipped: the indent of the key whose value is left out
    for line in config.splitlines(keepends=True):
        indent = len(line) - len(line.lstrip(" "))
        if skipped is not None and line.strip() and indent > skipped:
            continue  # a further line of that value
        skipped = None
        key = line.strip().partition(":")[0]
        top = indent == 0  # ckpt_path is a top-level key; default_root_dir and vocab_from are arguments
        if key == "default_root_dir" and not top:  # a Trainer argument, the only one of that name
            skipped = indent
        elif key in nulled and top == (key == "ckpt_path"):
            skipped = indent
            lines.append(f"{' ' * indent}{key}: null\n")
        else:
            lines.append(line)
    return "".join(lines)


def export_checkpoint(
    checkpoint: str | os.PathLike,
    out_dir: str | os.PathLike,
    results: str | os.PathLike | dict | None = None,
    training_config: str | os.PathLike | None = None,
    storage_dtype: str | torch.dtype | None = None,
    learning_curve: str | os.PathLike | None = None,
    max_shard_size: int | str | None = None,
    overwrite: bool = False,
) -> Path:
    """Write the model of a ``zoo fit`` checkpoint as a pretrained-model folder; returns its path.

    Args:
        results: measured metrics (a JSON path or dict, ``zoo.hub.cards.read_results``'s formats).
        training_config: the YAML file that trained it (default: the run's ``config.yaml``, if found),
            written ``portable``.
        storage_dtype: the dtype to store the weights in (``save_pretrained``; default: the model's).
        learning_curve: a PNG of the run's curves (default: drawn from the run's ``metrics.csv``, if
            found beside the checkpoint, titled with ``out_dir``'s name: ``zoo.plot``).
        max_shard_size: write weights larger than this in shards (``save_pretrained``; default: one file).
        overwrite: replace the checkpoint files already in ``out_dir`` (``save_pretrained``).
    """
    checkpoint = Path(checkpoint)
    if checkpoint.is_dir() and (checkpoint / "config.json").is_file():
        raise CheckpointError(
            f"{checkpoint} is a pretrained-model folder already, not a zoo fit checkpoint (.ckpt): load it "
            "with zoo.from_pretrained, re-render its card with zoo card, or push it with zoo push"
        )
    if not checkpoint.is_file():
        raise CheckpointError(f"no checkpoint file {checkpoint}")
    try:
        content = torch.load(checkpoint, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many types for a corrupt or foreign file
        raise CheckpointError(f"{checkpoint} is not a readable Lightning checkpoint: {error}") from None
    spec = (content.get("hyper_parameters") or {}).get("model") if isinstance(content, dict) else None
    state = content.get("state_dict") if isinstance(content, dict) else None
    if not isinstance(spec, dict) or not isinstance(state, dict):
        raise CheckpointError(
            f"{checkpoint} is not a zoo task checkpoint (expected hyper_parameters['model'] = a model spec "
            "and a state_dict, as zoo fit writes)"
        )
    with weights_follow():
        model = ZooModel.from_config(spec)
    weights = {k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")}
    dtypes = {v.dtype for v in weights.values() if v.is_floating_point()}
    if len(dtypes) == 1:  # e.g. trained with precision="bf16-true"
        model.to(dtypes.pop())
    load_into(model, weights, str(checkpoint))
    if content.get("vocab") is not None:
        try:
            model.vocab = Vocabulary.from_dict(content["vocab"])
        except (TypeError, ValueError) as error:
            raise CheckpointError(f"{checkpoint}: the recorded vocabulary does not fit: {error}") from None
    if training_config is None:
        training_config = run_file(checkpoint, "config.yaml")
        if training_config is None:
            print(f"zoo export: no config.yaml found beside {checkpoint}: the card has no training command",
                  file=sys.stderr)  # fmt: skip
    text = portable(Path(training_config).read_text()) if training_config is not None else None
    with tempfile.TemporaryDirectory() as scratch:
        if learning_curve is None and (metrics := run_file(checkpoint, "metrics.csv")) is not None:
            curve = Path(scratch) / "curve.png"  # titled with the folder's name, the tag it is released as
            learning_curve = plot_learning_curves(metrics, curve, title=Path(out_dir).resolve().name)
        return save_pretrained(
            model, out_dir, results=results, training_config=text, storage_dtype=storage_dtype,
            learning_curve=learning_curve, max_shard_size=max_shard_size, overwrite=overwrite,
        )  # fmt: skip
