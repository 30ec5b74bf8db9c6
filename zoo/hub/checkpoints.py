"""Initial weights for training (``init_from``): a zoo task's Lightning checkpoint or any
``zoo.from_pretrained`` source, checked against the model before anything is loaded."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import torch
from torch import Tensor

from zoo.data.vocab import Vocabulary
from zoo.hub.pretrained import (
    CheckpointError,
    check_state_dict,
    read_config,
    read_vocab,
    read_weights,
    resolve,
)
from zoo.models.base import ZooModel


def load_model_weights(
    source: str, model: ZooModel, missing_ok: Collection[str] = ()
) -> tuple[dict[str, Tensor], Vocabulary | None]:
    """The state dict for ``model`` from ``source``: a zoo task's Lightning checkpoint (``.ckpt``: its
    ``model.*`` weights) or a ``zoo.from_pretrained`` source, whose config must name ``model``'s class;
    floating weights saved in another precision (a float16 folder) are cast to the model's. With the
    vocabulary the source records (None if none). ``missing_ok``: model keys the source may lack
    (checked here for a folder, by ``load_into`` for a checkpoint)."""
    path = Path(source)
    if not (path.suffix == ".ckpt" or path.is_file()):
        folder = resolve(source)
        config = read_config(folder)
        name, wanted = config["class_path"].rsplit(".", 1)[-1], type(model).__name__
        if name != wanted:
            raise CheckpointError(f"init_from={source!r} holds a {name}, but the task's model is a {wanted}")
        _check_read_the_same(source, config["init_args"], model)
        differences = {
            k: (v, model.config.get(k)) for k, v in config["init_args"].items() if model.config.get(k) != v
        }
        weights = model.upgrade_state_dict(read_weights(folder, config))
        expected = model.state_dict()
        weights = {  # weights stored in half precision are cast (exactly) to the model's float32
            k: v.to(expected[k].dtype)
            if k in expected and v.is_floating_point() and expected[k].is_floating_point()
            else v
            for k, v in weights.items()
        }
        try:
            check_state_dict(model, weights, source, missing_ok)
        except CheckpointError as error:
            raise CheckpointError(
                f"{error}. The checkpoint's arguments differ from the model's as (checkpoint, model): "
                f"{differences}"
            ) from None
        return weights, read_vocab(folder, config)
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    state = checkpoint.get("state_dict")
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} is not a Lightning checkpoint of a zoo task (no 'state_dict')")
    recorded = (checkpoint.get("hyper_parameters") or {}).get("model")
    if isinstance(recorded, dict) and isinstance(recorded.get("init_args"), dict):
        _check_read_the_same(source, recorded["init_args"], model)
    weights = {k[len("model.") :]: v for k, v in state.items() if k.startswith("model.")}
    if not weights:
        raise CheckpointError(f"{path} holds no model weights (no 'model.*' keys in its state_dict)")
    vocab = checkpoint.get("vocab")
    return weights, None if vocab is None else Vocabulary.from_dict(vocab)


def _check_read_the_same(source: str, init_args: dict, model: ZooModel) -> None:
    """CheckpointError where the source's model differs from ``model`` in an argument that says how the
    weights are read (``ZooModel.weights_read_with``): the shapes fit, the numbers would mean something
    else (an HSMM projection fitted on per-recording standardized frames, applied to raw ones)."""
    differ = {
        name: (init_args[name], model.config.get(name))
        for name in model.weights_read_with
        if name in init_args and init_args[name] != model.config.get(name)
    }
    if differ:
        listing = ", ".join(f"{name}={ours!r} (the model has {theirs!r})" for name, (ours, theirs)
                            in differ.items())  # fmt: skip
        raise CheckpointError(
            f"init_from={source!r} was trained with {listing}: its weights are read with that value, and "
            f"another would score the data with them wrongly; set the same value in the model's arguments"
        )
