"""The zoo's checkpoint format: ``save_pretrained``, ``from_pretrained``, ``push_to_hub``.

A pretrained model is a folder (locally, or one Hugging Face Hub repo per model) holding

* ``config.json``: plain JSON, ``{"zoo_format_version", "zoo_version", "class_path", "init_args",
  "architecture", "dtype", "weights_sha256", "vocab_sha256"}``: the model class and every constructor
  argument; ``dtype`` is the weights' dtype in the file. Format 2 adds ``compute_dtype``: weights
  stored narrower (e.g. float16) than the dtype the model runs in (e.g. float32), cast up on load;
* ``model.safetensors``: the state dict (no pickle; format 5: the model's ``full_precision_keys`` in
  ``compute_dtype`` beside the others in ``dtype``); or, saved with ``max_shard_size`` and larger than
  it (format 4), the Hugging Face sharded layout: ``model-00001-of-0000N.safetensors`` ... and
  ``model.safetensors.index.json`` (which shard holds each tensor), with ``weights_sha256`` the
  index's checksum and ``weight_shards`` each shard's;
* ``README.md``: the model card (``zoo.hub.cards``), and optionally ``results.json`` (the measured
  metrics the card reports), ``training_config.yaml`` (the exact ``zoo fit`` configuration) and
  ``vocab.json`` (a text model's vocabulary, ``Vocabulary.to_dict()``; ``model.vocab`` once loaded).

Loading is strict and all-or-nothing: the file's keys, shapes and dtypes must be exactly the model's,
the weights and the vocabulary must match the checksums in ``config.json`` (and the vocabulary the
model's ``vocab_size``), the class must be a zoo model, and the format version must be one this
release reads; otherwise a ``CheckpointError`` says what was expected and what was found, and no
model is returned. docs/zoo-api.md describes the format and its versions.
"""

from __future__ import annotations

import enum
import fnmatch
import hashlib
import inspect
import json
import os
import tempfile
import warnings
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

import zoo
from zoo.models.base import ZooModel, is_under, weights_follow

if TYPE_CHECKING:
    from huggingface_hub import CommitInfo

    from zoo.data.vocab import Vocabulary

FORMAT_VERSION = 5  # bump when config.json or the weights' layout changes; older versions keep loading
# a folder is written in the lowest format that describes it: 2 with a ``compute_dtype``, 3 when its keys
# include names that a family gave its parameters in format 3 (the backend heads; ``legacy_keys``), 4
# when its weights are sharded, 5 when it keeps some in full precision beside narrower ones
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"  # a sharded folder's map of tensor -> shard (Hugging Face's)
# the shards' names, huggingface_hub's ``model{suffix}.safetensors`` (model-00001-of-00003.safetensors): a
# file of the user's that only looks like one (model-backup-of-monday.safetensors) is neither pushed nor
# removed
SHARD_PATTERN = "model-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9].safetensors"
CARD_NAME = "README.md"
RESULTS_NAME = "results.json"
TRAINING_CONFIG_NAME = "training_config.yaml"
VOCAB_NAME = "vocab.json"
LEARNING_CURVE_NAME = "learning_curve.png"
CHECKPOINT_FILES = (
    CONFIG_NAME, WEIGHTS_NAME, CARD_NAME, RESULTS_NAME, TRAINING_CONFIG_NAME, VOCAB_NAME, LEARNING_CURVE_NAME
)  # fmt: skip
CHECKPOINT_PATTERNS = (*CHECKPOINT_FILES, INDEX_NAME, SHARD_PATTERN)  # every file a folder may hold


class CheckpointError(ValueError):
    """A pretrained-model folder that cannot be loaded (missing, corrupt, foreign or mismatched)."""


# --- writing -----------------------------------------------------------------------------------
def public_class_path(model: ZooModel) -> str:
    """``zoo.models.Name`` when the class is exported there (stable across module moves), else its
    defining module's path."""
    import zoo.models

    cls = type(model)
    return (
        f"zoo.models.{cls.__name__}" if getattr(zoo.models, cls.__name__, None) is cls else model.class_path
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _format_version(model: ZooModel, weights: dict[str, Tensor], compute_dtype: bool, sharded: bool) -> int:
    """The lowest format that describes a folder: 5 if it stores some weights in full precision beside
    narrower ones (``ZooModel.full_precision_keys``; a reader of formats 1-4 casts the model to the
    narrower dtype first and refuses them), 4 if its weights are sharded, 3 if a key has a name given in
    format 3 (a reader of formats 1-2 would not know it), else 2 with a ``compute_dtype``, else 1."""
    floating = {t.dtype for t in weights.values() if t.is_floating_point()}
    if len(floating) > 1:
        return 5
    if sharded:
        return 4
    if any(is_under(key, name) for key in weights for name in model.legacy_keys.values()):
        return 3
    return 2 if compute_dtype else 1


def _write_atomic(path: Path, write) -> None:
    """``write(temporary_path)`` then rename over ``path``: an interrupted save never leaves half a file.
    The file gets the permissions of a plain ``open(path, "w")`` (0666 less the umask), not mkstemp's 0600."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(handle)
    try:
        write(temporary)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def parse_dtype(name: str | torch.dtype, what: str = "dtype") -> torch.dtype:
    """The floating torch dtype that ``name`` ("float16", "torch.bfloat16" or a dtype) names."""
    dtype = name if isinstance(name, torch.dtype) else getattr(torch, str(name).removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"{what} must name a floating torch dtype (e.g. 'float32'), got {name!r}")
    return dtype


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _floating_dtype(model: nn.Module) -> str:
    dtypes = {_dtype_name(t.dtype) for t in model.state_dict().values() if t.is_floating_point()}
    if len(dtypes) > 1:
        raise ValueError(f"the model mixes floating dtypes {sorted(dtypes)}; cast it to one before saving")
    return dtypes.pop() if dtypes else "float32"


def save_pretrained(
    model: ZooModel,
    directory: str | os.PathLike,
    *,
    results: str | os.PathLike | dict | list | None = None,
    training_config: str | os.PathLike | None = None,
    architecture: str | None = None,
    storage_dtype: str | torch.dtype | None = None,
    learning_curve: str | os.PathLike | None = None,
    max_shard_size: int | str | None = None,
    overwrite: bool = False,
) -> Path:
    """Write ``model`` as a pretrained-model folder (module docstring) and return its path.

    Args:
        results: measured metrics for the card and ``results.json`` (``zoo.hub.cards.read_results``'s
            formats: a dict, a list of dicts or a JSON file).
        training_config: the ``zoo fit`` configuration that trained the model: its YAML text, or the path of
            its file (a mapping, checked before anything is written).
        architecture: the registry name (``zoo.list_models()``); by default the architecture whose
            configuration the model's arguments match, if any.
        storage_dtype: write the floating weights in this dtype (e.g. ``torch.float16``: half the
            file) while the model keeps running in its own dtype, recorded as ``compute_dtype``
            (format 2): ``from_pretrained`` casts the stored weights back up. A value beyond its range
            is a ValueError. Default: the model's (an earlier save's of the same model, re-saved).
        learning_curve: a PNG of the training run's curves (``zoo.plot.plot_learning_curves``), kept as
            ``learning_curve.png`` and shown on the card.
        max_shard_size: weights larger than this (bytes, or a string such as ``"15MB"``) are written in
            shards of at most this size, Hugging Face's sharded layout (format 4): for a transfer or
            file-size limit. Default: one ``model.safetensors``.
        overwrite: replace or remove every checkpoint file already in the folder (below).
    The model's vocabulary (``model.vocab``, a text model's) is written as ``vocab.json``. Saved into
    an earlier save of the same model (class, arguments, weight values, and vocabulary where the model
    has one), it rewrites that save's ``config.json``, weights and card, keeps its storage dtype,
    ``results.json``, ``training_config.yaml`` and ``learning_curve.png`` where not given again, and
    its ``vocab.json`` where the model has none (e.g. one added by ``save_vocab``). Without ``overwrite``, a
    FileExistsError lists the files the save would otherwise replace or remove: those of another model's
    save, or any checkpoint file of a folder that is not a zoo checkpoint (e.g. your own README.md);
    other files (notes, code) are never touched.
    """
    from zoo.hub.cards import read_results
    from zoo.hub.registry import architecture_differences, match_architecture

    if not isinstance(model, ZooModel):
        raise TypeError(f"save_pretrained needs a zoo model (ZooModel subclass), got {type(model).__name__}")
    if architecture is not None:  # an unknown name, or another model's: an error before anything is written
        differences = architecture_differences(architecture, public_class_path(model), model.config)
        if differences is not None:
            raise ValueError(
                f"architecture={architecture!r} does not describe this model: {differences}; pass the "
                "architecture it was built as, or None (the registered one its arguments match, if any)"
            )
    results = read_results(results) if results is not None else None
    curve = _read_png(learning_curve) if learning_curve is not None else None
    training_config = _read_training_config(training_config) if training_config is not None else None
    compute_dtype = _floating_dtype(model)
    if compute_dtype == "float16":
        raise ValueError(
            "the model runs in float16, which every dynamic program refuses (its range, 65504, is too small "
            "for a log Z): cast it to float32 (model.float()) and store half-size weights with "
            "storage_dtype='float16'"
        )
    directory = Path(directory)
    asked = None if storage_dtype is None else parse_dtype(storage_dtype, "storage_dtype")
    earlier = None if overwrite else _earlier_save(model, directory, asked)
    if asked is not None:
        stored = _dtype_name(asked)
    elif earlier is not None and earlier.get("compute_dtype") == compute_dtype:
        stored = earlier["dtype"]  # a re-save keeps the storage its card describes
    else:
        stored = compute_dtype
    weights = _stored_weights(model, parse_dtype(stored))
    extras = {RESULTS_NAME: results, TRAINING_CONFIG_NAME: training_config, LEARNING_CURVE_NAME: curve}
    if model.vocab is None:
        extras[VOCAB_NAME] = None  # an earlier save's (e.g. one added by save_vocab) is kept
    kept = set() if earlier is None else {name for name, content in extras.items()
                                          if content is None and (directory / name).is_file()}  # fmt: skip
    if max_shard_size is not None:
        _check_each_fits(weights, max_shard_size)
    directory.mkdir(parents=True, exist_ok=True)
    weights_sha256, shards = _write_weights(directory, weights, max_shard_size, overwrite)
    vocab_sha256 = earlier["vocab_sha256"] if VOCAB_NAME in kept else _write_vocab(directory, model.vocab)
    class_path = public_class_path(model)
    config = {
        "zoo_format_version": _format_version(model, weights, stored != compute_dtype, bool(shards)),
        "zoo_version": zoo.__version__,
        "class_path": class_path,
        "init_args": dict(model.config),
        "architecture": architecture or match_architecture(class_path, model.config),
        "dtype": stored,
        **({} if stored == compute_dtype else {"compute_dtype": compute_dtype}),
        "weights_sha256": weights_sha256,
        **({"weight_shards": shards} if shards else {}),
        "vocab_sha256": vocab_sha256,
    }
    _write_json(directory / CONFIG_NAME, config)
    for name, content in extras.items():
        path = directory / name
        if name == VOCAB_NAME:
            continue  # written above
        if content is None:
            if name not in kept:
                path.unlink(missing_ok=True)
        elif name == RESULTS_NAME:
            save_results(directory, content)
        elif name == LEARNING_CURVE_NAME:
            _write_atomic(path, lambda p, data=content: Path(p).write_bytes(data))
        else:
            _write_atomic(path, lambda p, text=content: Path(p).write_text(text))
    write_card(directory)
    return directory


def _stored_weights(model: ZooModel, dtype: torch.dtype) -> dict[str, Tensor]:
    """The state dict with its floating tensors in ``dtype``, ``ZooModel.full_precision_keys`` in the
    model's own unless ``dtype`` holds them exactly (a folder loaded from float16 stays float16);
    ValueError where a finite value would be stored as inf (float16 ends at 65504)."""
    weights = {}
    for name, t in model.state_dict().items():
        stored = t.to(dtype) if t.is_floating_point() else t
        if name in model.full_precision_keys and not torch.equal(stored.to(t.dtype), t):
            stored = t
        if t.is_floating_point() and bool((torch.isinf(stored) & torch.isfinite(t)).any()):
            kind = _dtype_name(dtype)
            raise ValueError(
                f"{name} holds values beyond {kind}'s range (its largest |value| is "
                f"{float(t.detach().abs().max()):.6g}; {kind} ends at {torch.finfo(dtype).max:g}): they "
                "would be stored as inf. Store the weights in the model's own dtype (storage_dtype=None) "
                "or in bfloat16"
            )
        weights[name] = stored.detach().cpu().contiguous()
    return weights


def _earlier_save(model: ZooModel, directory: Path, storage: torch.dtype | None) -> dict[str, Any] | None:
    """The config of an earlier save of this same model in ``directory`` (None where the folder holds
    no checkpoint file), ``storage`` the dtype the save stores it in (None: the folder's own);
    FileExistsError where the save would replace or remove a file that is not an earlier save's of its
    own (save_pretrained's docstring)."""
    files = directory.iterdir() if directory.is_dir() else ()
    present = sorted(p.name for p in files if p.is_file() and _is_checkpoint_file(p.name))
    if not present:
        return None
    try:
        config = read_config(directory)
    except CheckpointError:
        raise FileExistsError(
            f"{directory} is not a zoo pretrained-model folder (no readable zoo {CONFIG_NAME}), and saving "
            f"there would replace or remove {', '.join(present)}: save to another folder, or pass "
            "overwrite=True (zoo export --overwrite) to replace them"
        ) from None
    if not _same_model(model, directory, config, storage or parse_dtype(config["dtype"])):
        raise FileExistsError(
            f"{directory} holds another model (a {config['class_path'].rsplit('.', 1)[-1]} with other "
            f"arguments, weights or vocabulary than this one's): saving there would replace or remove its "
            f"{', '.join(present)}. Save to another folder, or pass overwrite=True (zoo export --overwrite) "
            "to replace it"
        )
    return config


def _same_model(model: ZooModel, directory: Path, config: dict[str, Any], storage: torch.dtype) -> bool:
    """Whether the folder's model is ``model``: class, arguments (defaults included), weight values as
    the save would store them (in ``storage``: a trained model re-saved into its own float16 folder is
    the same model) and vocabulary (the folder's may be one the model lacks)."""
    from zoo.models.base import family_class

    if config["class_path"] != public_class_path(model):
        return False
    defaults = {  # arguments added since the folder was saved take their defaults
        name: p.default.value if isinstance(p.default, enum.Enum) else p.default  # zoo.Backend: its value
        for name, p in inspect.signature(family_class(config["class_path"])).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    if json.dumps({**defaults, **config["init_args"]}, sort_keys=True, default=str) != json.dumps(
        model.config, sort_keys=True, default=str
    ):
        return False
    try:
        saved = model.upgrade_state_dict(read_weights(directory, config))
        vocab = read_vocab(directory, config)
    except CheckpointError:
        return False
    if model.vocab is not None and (vocab is None or vocab.to_dict() != model.vocab.to_dict()):
        return False
    weights = _stored_weights(model, storage)
    return saved.keys() == weights.keys() and all(_same_values(saved[k], weights[k]) for k in weights)


def _same_values(a: Tensor, b: Tensor) -> bool:
    """Equal shapes and values (floating ones compared in float64: a float16-stored copy is equal)."""
    if a.is_floating_point() and b.is_floating_point():
        a, b = a.double(), b.double()
    return a.shape == b.shape and torch.equal(a, b)


def _check_each_fits(weights: dict[str, Tensor], max_shard_size: int | str) -> None:
    """ValueError where one tensor alone exceeds ``max_shard_size``: a shard holds whole tensors, and
    huggingface_hub's splitter would give it a shard of its own over the limit, silently."""
    from huggingface_hub.serialization._base import parse_size_to_int

    limit = parse_size_to_int(max_shard_size) if isinstance(max_shard_size, str) else int(max_shard_size)
    over = {name: t.numel() * t.element_size() for name, t in weights.items()}
    over = {name: size for name, size in over.items() if size > limit}
    if over:
        listing = ", ".join(f"{name} ({size:,} bytes)" for name, size in sorted(over.items()))
        raise ValueError(
            f"max_shard_size={max_shard_size!r} ({limit:,} bytes) is smaller than a tensor, and a shard "
            f"holds whole tensors: {listing}; give at least {max(over.values()):,} bytes, or store the "
            "weights narrower (storage_dtype='float16')"
        )


def _write_weights(
    directory: Path, weights: dict[str, Tensor], max_shard_size: int | str | None, overwrite: bool
) -> tuple[str, dict[str, str]]:
    """Write the state dict as ``model.safetensors``, or in shards of at most ``max_shard_size`` with
    their index where it is larger (``huggingface_hub.split_torch_state_dict_into_shards``), and remove
    the files of the other layout an earlier save left. Returns the checksum ``config.json`` records
    (of the file, or of the index) and each shard's (empty unless sharded)."""
    from huggingface_hub import split_torch_state_dict_into_shards
    from safetensors.torch import save_file

    def write(path: Path, tensors: dict[str, Tensor]) -> None:
        _write_atomic(path, lambda p: save_file(tensors, p, metadata={"format": "pt"}))

    earlier = {directory / WEIGHTS_NAME, directory / INDEX_NAME, *_earlier_shards(directory, overwrite)}
    split = None
    if max_shard_size is not None:
        split = split_torch_state_dict_into_shards(
            weights, filename_pattern="model{suffix}.safetensors", max_shard_size=max_shard_size
        )
    shards = {}
    if split is None or not split.is_sharded:
        written = directory / WEIGHTS_NAME
        write(written, weights)
        checksum, kept = _sha256(written), {written}
    else:
        for name, keys in split.filename_to_tensors.items():
            write(directory / name, {key: weights[key] for key in keys})
            shards[name] = _sha256(directory / name)
        _write_json(
            directory / INDEX_NAME, {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
        )
        checksum = _sha256(directory / INDEX_NAME)
        kept = {directory / INDEX_NAME, *(directory / name for name in shards)}
    for path in earlier - kept:
        path.unlink(missing_ok=True)
    return checksum, shards


def _earlier_shards(directory: Path, overwrite: bool) -> list[Path]:
    """The weight shards a save replaces: every file named as one (``SHARD_PATTERN``) with
    ``overwrite``; else those the folder's earlier save of the same model lists."""
    if overwrite:
        return list(directory.glob(SHARD_PATTERN))
    try:
        listed = json.loads((directory / CONFIG_NAME).read_text()).get("weight_shards") or {}
    except (OSError, ValueError, AttributeError):
        return []
    return [directory / name for name in listed if isinstance(name, str) and "/" not in name]


def _read_training_config(config: str | os.PathLike) -> str:
    """The YAML text of a ``zoo fit`` configuration given as text or as a file's path; ValueError unless
    it is a mapping (what LightningCLI writes)."""
    import yaml

    if not isinstance(config, (str, os.PathLike)):
        raise TypeError(f"training_config must be YAML text or a file's path, got {type(config).__name__}")
    is_path = isinstance(config, os.PathLike) or ("\n" not in config and Path(config).is_file())
    text = Path(config).read_text() if is_path else config
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ValueError(f"training_config is not valid YAML: {error}") from None
    if not isinstance(parsed, dict):
        one_line = "\n" not in text
        shown = str(config) if is_path else repr(text[:60]) + (" (no such file)" if one_line else "")
        raise ValueError(
            f"training_config must be a zoo fit configuration (a YAML mapping, as text or a file's path), "
            f"got {shown}"
        )
    local = machine_state(parsed)
    if local:
        given = ", ".join(f"{key}: {value}" for key, value in local.items())
        raise ValueError(
            f"training_config must name no state of this machine, got {given}: the card's commands run it "
            "with init_from set to the saved folder, and would resume that checkpoint or read that file "
            "instead; set them to null (as zoo export does, zoo.hub.export.portable)"
        )
    return text


def names_local_file(source: Any) -> bool:
    """Whether ``source`` (e.g. a ``vocab_from``) names a file or folder of this machine, not a pretrained
    tag or a Hub repo id (``org/name[@rev]``), which resolve anywhere."""
    if not isinstance(source, str):
        return False
    path = Path(source).expanduser()
    return (
        path.exists()
        or path.suffix in (".ckpt", ".json")
        or source.startswith((".", "/", "~"))
        or source.count("/") > 1
    )


def machine_state(config: dict[str, Any]) -> dict[str, Any]:
    """The entries of a ``zoo fit`` configuration that the card's commands (``--config training_config.yaml
    --model.init_args.init_from FOLDER``) must not take: ``ckpt_path`` (they would resume it) and a
    ``vocab_from`` naming a local file (``zoo fit`` sets it to the checkpoint it resumes, or to a local
    ``init_from``; null, the data take ``init_from``'s vocabulary)."""
    found = {} if config.get("ckpt_path") is None else {"ckpt_path": config["ckpt_path"]}
    data = config.get("data")
    args = data.get("init_args") if isinstance(data, dict) else None
    vocab_from = args.get("vocab_from") if isinstance(args, dict) else None
    if names_local_file(vocab_from):
        found["vocab_from"] = vocab_from
    return found


def _read_png(path: str | os.PathLike) -> bytes:
    """The bytes of a PNG file (checked by its signature: a card shows it as an image)."""
    data = Path(path).read_bytes()
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        raise ValueError(f"learning_curve must be a PNG image, got {path} (no PNG signature)")
    return data


def render_folder_card(directory: str | os.PathLike, repo_id: str | None = None):
    """The ``ModelCard`` of a pretrained-model folder from its config, ``results.json`` and
    ``training_config.yaml``; ``repo_id``: the Hub repo its usage examples name."""
    from zoo.hub.bundled import WEIGHTS
    from zoo.hub.cards import render_card

    directory = Path(directory)
    config = read_config(directory)
    results, training = directory / RESULTS_NAME, directory / TRAINING_CONFIG_NAME
    return render_card(
        config,
        results=results if results.is_file() else None,
        training_config=training.read_text() if training.is_file() else None,
        repo_id=repo_id,
        learning_curve=(directory / LEARNING_CURVE_NAME).is_file(),
        bundled_tag=directory.name if directory.resolve().parent == WEIGHTS else None,
    )


def save_results(directory: str | os.PathLike, results: str | os.PathLike | dict | list) -> Path:
    """Record measured results (``zoo.hub.cards.read_results``'s formats) as the folder's ``results.json``."""
    from zoo.hub.cards import read_results

    path = Path(directory) / RESULTS_NAME
    _write_json(path, read_results(results))
    return path


def write_card(directory: str | os.PathLike, repo_id: str | None = None) -> Path:
    """(Re-)render a folder's ``README.md`` (``render_folder_card``); returns its path."""
    path = Path(directory) / CARD_NAME
    card = str(render_folder_card(directory, repo_id))
    _write_atomic(path, lambda p: Path(p).write_text(card))
    return path


def save_vocab(directory: str | os.PathLike, vocab: Vocabulary | None) -> Path:
    """Add (or replace, or with None remove) the vocabulary of a saved folder, e.g. one exported from a
    checkpoint that recorded none: ``vocab.json``, its checksum in ``config.json``, and the card. The
    folder must load, and the vocabulary's size must be the model's ``vocab_size``; returns the folder."""
    directory = Path(directory)
    load_folder(directory).vocab = vocab  # a folder that does not load, or a misfit, changes nothing
    config = read_config(directory)
    config["vocab_sha256"] = _write_vocab(directory, vocab)
    _write_json(directory / CONFIG_NAME, config)
    write_card(directory)
    return directory


def _write_vocab(directory: Path, vocab: Vocabulary | None) -> str | None:
    """Write ``vocab.json`` (``eos``, ``unk``, then the tokens in id order, one a line), or remove it
    when ``vocab`` is None; its sha256 (None without a vocabulary)."""
    path = directory / VOCAB_NAME
    if vocab is None:
        path.unlink(missing_ok=True)
        return None
    data = vocab.to_dict()
    _write_json(path, {"eos": data["eos"], "unk": data["unk"], "tokens": data["tokens"]})
    return _sha256(path)


def _write_json(path: Path, content: Any) -> None:
    _write_atomic(path, lambda p: Path(p).write_text(json.dumps(content, indent=2, sort_keys=False) + "\n"))


# --- reading -----------------------------------------------------------------------------------
def read_config(directory: str | os.PathLike) -> dict[str, Any]:
    """The validated ``config.json`` of a pretrained-model folder (CheckpointError if foreign or newer)."""
    path = Path(directory) / CONFIG_NAME
    if not path.is_file():
        present = sorted(p.name for p in Path(directory).iterdir()) if Path(directory).is_dir() else []
        raise CheckpointError(
            f"{directory} is not a zoo pretrained-model folder: it has no {CONFIG_NAME} "
            f"(expected {CONFIG_NAME} and {WEIGHTS_NAME}; found {present or 'nothing'})"
        )
    try:
        config = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(
            f"{path} is not valid JSON ({error}): the file is corrupt or truncated"
        ) from None
    if not isinstance(config, dict) or "zoo_format_version" not in config:
        hint = ""
        if isinstance(config, dict) and "model_type" in config:
            hint = f" (it looks like a transformers config, model_type={config['model_type']!r})"
        keys = sorted(config)[:8] if isinstance(config, dict) else type(config).__name__
        raise CheckpointError(
            f"{path} is not a zoo model config{hint}: it has no 'zoo_format_version' (found {keys})"
        )
    version = config["zoo_format_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CheckpointError(f"{path}: zoo_format_version must be an int >= 1, got {version!r}")
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"{path} was written in zoo checkpoint format {version} (by structured-zoo "
            f"{config.get('zoo_version', '?')}); this structured-zoo {zoo.__version__} reads formats "
            f"1..{FORMAT_VERSION}: upgrade structured-zoo"
        )
    for key, kind in (("class_path", str), ("init_args", dict), ("weights_sha256", str), ("dtype", str)):
        if not isinstance(config.get(key), kind):
            raise CheckpointError(f"{path}: {key!r} must be a {kind.__name__}, got {config.get(key)!r}")
    if not isinstance(config.get("architecture"), (str, type(None))):
        raise CheckpointError(f"{path}: 'architecture' must be a str or null, got {config['architecture']!r}")
    if not isinstance(config.get("vocab_sha256"), (str, type(None))):  # absent before vocabularies
        raise CheckpointError(f"{path}: 'vocab_sha256' must be a str or null, got {config['vocab_sha256']!r}")
    for key in ("dtype", "compute_dtype"):
        if key in config:
            try:
                parse_dtype(config[key], repr(key))
            except ValueError as error:
                raise CheckpointError(f"{path}: {error}") from None
    shards = config.get("weight_shards")
    if shards is not None and not (
        isinstance(shards, dict)
        and shards
        and all(
            fnmatch.fnmatchcase(n, SHARD_PATTERN) and "/" not in n and isinstance(d, str)
            for n, d in shards.items()
        )
    ):
        raise CheckpointError(
            f"{path}: 'weight_shards' must map shard file names ({SHARD_PATTERN}) to checksums, "
            f"got {shards!r}"
        )
    if shards is not None and version < 4:
        raise CheckpointError(
            f"{path}: 'weight_shards' needs zoo_format_version 4 or later, the file says {version}"
        )
    if "compute_dtype" in config and version < 2:
        raise CheckpointError(
            f"{path}: 'compute_dtype' needs zoo_format_version 2 or later, the file says {version}"
        )
    if not config["class_path"].startswith("zoo."):
        raise CheckpointError(
            f"{path} names the class {config['class_path']!r}: only zoo model classes (zoo.*) are loaded"
        )
    if config.get("architecture") is not None:
        _check_architecture(path, config)
    return config


def _check_architecture(path: Path, config: dict[str, Any]) -> None:
    """CheckpointError unless ``architecture`` (the card names it) is the registered architecture that
    ``class_path`` and ``init_args`` are."""
    from zoo.hub.registry import architecture_differences, match_architecture

    name, class_path, args = config["architecture"], config["class_path"], config["init_args"]
    try:
        differences = architecture_differences(name, class_path, args)
    except ValueError as error:  # not registered here
        written = config.get("zoo_version", "?")
        differences = f"{error} (structured-zoo {zoo.__version__}; the folder's is {written})"
    if differences is None:
        return
    implied = match_architecture(class_path, args)
    what = f"architecture {implied!r}" if implied else "no registered architecture"
    raise CheckpointError(
        f"{path}: 'architecture' is {name!r}, but its class_path and init_args (a "
        f"{class_path.rsplit('.', 1)[-1]}) are {what}: {differences}; set 'architecture' to "
        f"{json.dumps(implied)}, as save_pretrained records it"
    )


def build_model(config: dict[str, Any], source: str = "the checkpoint") -> ZooModel:
    """A freshly initialized model of the class and arguments that ``config`` records."""
    spec = {"class_path": config["class_path"], "init_args": config["init_args"]}
    try:
        with weights_follow():  # every weight comes from the checkpoint: no pretrained part is fetched
            model = ZooModel.from_config(spec)
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{source}: cannot build {config['class_path']}: {error}") from None
    return model.to(parse_dtype(config["dtype"]))


def _check_sha256(path: Path, expected: str) -> None:
    """CheckpointError unless the file's sha256 is the one ``config.json`` records."""
    digest = _sha256(path)
    if digest != expected:
        raise CheckpointError(
            f"{path} does not match the checksum in {CONFIG_NAME} (sha256 {digest[:12]}..., expected "
            f"{expected[:12]}...): the file is corrupt, truncated or from another model"
        )


def read_weights(directory: str | os.PathLike, config: dict[str, Any]) -> dict[str, Tensor]:
    """The state dict in ``model.safetensors``, or in the shards ``config.json`` lists (``weight_shards``),
    every file verified against its checksum there, the shards against their index."""
    directory = Path(directory)
    shards = config.get("weight_shards")
    if shards is None:
        path = directory / WEIGHTS_NAME
        if not path.is_file():
            raise CheckpointError(f"{directory} has {CONFIG_NAME} but no {WEIGHTS_NAME}")
        _check_sha256(path, config["weights_sha256"])
        return _load_safetensors(path)
    index_path = directory / INDEX_NAME
    if not index_path.is_file():
        raise CheckpointError(
            f"{directory}: {CONFIG_NAME} lists {len(shards)} weight shards, but there is no {INDEX_NAME}"
        )
    _check_sha256(index_path, config["weights_sha256"])
    weights = {}
    for name, checksum in shards.items():
        path = directory / name
        if not path.is_file():
            raise CheckpointError(
                f"{directory} has no {name}, one of the {len(shards)} weight shards {CONFIG_NAME} lists"
            )
        _check_sha256(path, checksum)
        weights.update(_load_safetensors(path))
    mapped = json.loads(index_path.read_text()).get("weight_map", {})
    if set(mapped) != set(weights):
        raise CheckpointError(
            f"{index_path} maps {len(mapped)} tensors, but its shards hold {len(weights)}: the index and "
            "the shards are of different saves"
        )
    return weights


def _load_safetensors(path: Path) -> dict[str, Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"{path} is not a readable safetensors file: {error}") from None


def read_vocab(directory: str | os.PathLike, config: dict[str, Any]) -> Vocabulary | None:
    """The vocabulary in ``vocab.json``, verified against ``vocab_sha256`` in ``config.json``; None when
    the config records none (a model of no words, or a folder saved before vocabularies were)."""
    path = Path(directory) / VOCAB_NAME
    expected = config.get("vocab_sha256")
    if expected is None:
        if path.is_file():
            raise CheckpointError(
                f"{path} is not recorded in {CONFIG_NAME} (its 'vocab_sha256' is null or absent): remove "
                f"the file, or add it with zoo.hub.pretrained.save_vocab(folder, vocabulary)"
            )
        return None
    if not path.is_file():
        raise CheckpointError(
            f"{CONFIG_NAME} records a vocabulary (vocab_sha256) but {directory} has no {VOCAB_NAME}"
        )
    _check_sha256(path, expected)
    return _vocab_file(path)


def _vocab_file(path: Path) -> Vocabulary:
    """The vocabulary in a ``vocab.json`` (``Vocabulary.to_dict()`` JSON); CheckpointError if unreadable."""
    from zoo.data.vocab import Vocabulary

    try:
        return Vocabulary.from_dict(json.loads(path.read_text(encoding="utf-8-sig")))  # an editor's BOM too
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError, TypeError) as error:
        raise CheckpointError(f"{path} is not a readable vocabulary: {error}") from None


def load_vocab(source: str | os.PathLike) -> Vocabulary:
    """The vocabulary that ``source`` records: a ``vocab.json`` file, a zoo task checkpoint (``.ckpt``
    from ``zoo fit``), or any ``from_pretrained`` source (a folder, a pretrained tag, a Hub repo id).
    A source without a vocabulary is a ``CheckpointError``."""
    from zoo.data.vocab import Vocabulary

    path = Path(source).expanduser()
    if path.suffix == ".json" and path.is_file():
        return _vocab_file(path)
    if path.suffix == ".ckpt" and path.is_file():
        recorded = torch.load(path, map_location="cpu", weights_only=True).get("vocab")
        if recorded is None:
            raise CheckpointError(f"{path} records no vocabulary (a checkpoint of a model without words?)")
        return Vocabulary.from_dict(recorded)
    folder = resolve(source)
    vocab = read_vocab(folder, read_config(folder))
    if vocab is None:
        raise CheckpointError(f"{source} records no vocabulary ({folder} has no {VOCAB_NAME})")
    return vocab


def check_state_dict(
    model: nn.Module, weights: dict[str, Tensor], source: str, missing_ok: Collection[str] = ()
) -> None:
    """CheckpointError unless ``weights`` has exactly the model's keys, shapes and dtypes (it may lack
    the ``missing_ok`` keys: they keep the model's values)."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(weights) - set(missing_ok))
    unexpected = sorted(set(weights) - set(expected))
    problems = []
    if missing:
        problems.append(f"missing keys {missing[:10]}{' ...' if len(missing) > 10 else ''}")
    if unexpected:
        problems.append(f"unexpected keys {unexpected[:10]}{' ...' if len(unexpected) > 10 else ''}")
    for key in sorted(set(expected) & set(weights)):
        want, got = expected[key], weights[key]
        if want.shape != got.shape:
            problems.append(f"{key}: shape {tuple(got.shape)}, the model has {tuple(want.shape)}")
        elif want.dtype != got.dtype:
            problems.append(f"{key}: dtype {got.dtype}, the model has {want.dtype}")
    if problems:
        raise CheckpointError(
            f"the weights of {source} do not fit {type(model).__name__}: " + "; ".join(problems[:12])
        )


def load_into(
    model: nn.Module, weights: dict[str, Tensor], source: str, missing_ok: Collection[str] = ()
) -> None:
    """Copy ``weights`` into ``model`` after checking all of them first (never a partial load; only the
    named ``missing_ok`` keys may be absent, and keep the model's values). Keys a zoo model renamed
    since (its ``legacy_keys``) are read under their new names."""
    if isinstance(model, ZooModel):
        weights = model.upgrade_state_dict(weights)
    check_state_dict(model, weights, source, missing_ok)
    model.load_state_dict(weights, strict=not missing_ok)


def load_folder(directory: str | os.PathLike, dtype: str | torch.dtype | None = None) -> ZooModel:
    """The model saved in a local pretrained-model folder (with its vocabulary, if any), in eval mode,
    cast to ``dtype`` (default: the folder's ``compute_dtype``, else its weights' dtype; float32 for
    float16, which no dynamic program accepts: a folder written without a ``compute_dtype``)."""
    config = read_config(directory)
    if dtype is None:
        dtype = parse_dtype(config.get("compute_dtype", config["dtype"]))
        dtype = torch.float32 if dtype == torch.float16 else dtype
    dtype = parse_dtype(dtype)
    model = build_model(config, str(directory)).to(dtype)
    vocab = read_vocab(directory, config)
    try:
        model.vocab = vocab
    except ValueError as error:
        raise CheckpointError(f"{directory}: {VOCAB_NAME} does not fit the model: {error}") from None
    weights = model.upgrade_state_dict(read_weights(directory, config))
    _check_stored_dtypes(weights, config, model, directory)
    weights = {k: v.to(dtype) if v.is_floating_point() else v for k, v in weights.items()}  # exact upward
    load_into(model, weights, str(directory))
    return model.eval()


def _check_stored_dtypes(weights: dict[str, Tensor], config: dict[str, Any], model: ZooModel,
                         directory: Path) -> None:  # fmt: skip
    """CheckpointError unless every floating weight is stored in the folder's ``dtype``, or in its
    ``compute_dtype`` where the model keeps it in full precision (``ZooModel.full_precision_keys``)."""
    stored = parse_dtype(config["dtype"])
    compute = parse_dtype(config.get("compute_dtype", config["dtype"]))
    for key, value in weights.items():
        full = key in model.full_precision_keys
        allowed = {stored, compute} if full else {stored}
        if value.is_floating_point() and value.dtype not in allowed:
            recorded = f"dtype {_dtype_name(stored)}"
            if full:
                recorded += f" (compute_dtype {_dtype_name(compute)} for it)"
            raise CheckpointError(
                f"{directory}: {key} is stored in {_dtype_name(value.dtype)}, but {CONFIG_NAME} records "
                f"{recorded}"
            )


def resolve(
    source: str | os.PathLike,
    *,
    revision: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    local_files_only: bool | None = None,
    token: str | bool | None = None,
) -> Path:
    """The local folder of ``source``: the folder itself, a Hub repo's snapshot in the cache, or the
    registered source of a pretrained tag ``arch.tag`` (its pinned revision unless ``revision``).
    ``"org/name@rev"`` is the repo at revision ``rev`` (how ``init_from`` pins one).

    A Hub repo id is downloaded with ``snapshot_download`` (only the checkpoint's files), at
    ``revision`` (branch, tag or commit sha), into ``cache_dir`` (default: the Hub cache); with
    ``local_files_only`` (default: the ``HF_HUB_OFFLINE`` environment variable) only the cache is read.
    """
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError, LocalEntryNotFoundError

    from zoo.hub.registry import list_models, pretrained_tag

    if isinstance(source, str) and "@" in source and not Path(source).expanduser().exists():
        source, pinned = source.rsplit("@", 1)  # "org/name@rev": a Hub repo at a revision
        if revision is not None and revision != pinned:
            raise ValueError(f"{source}@{pinned} pins revision {pinned!r}; revision={revision!r} disagrees")
        revision = pinned
    if isinstance(source, str) and source in list_models(pretrained=True):
        if Path(source).expanduser().is_dir():  # a local folder first, as transformers does: said
            warnings.warn(
                f"{source}: a local folder of that name is loaded, not the pretrained tag; rename the folder "
                "to load the tag",
                stacklevel=3,
            )
        else:
            entry = pretrained_tag(source)  # a registered tag: its bundled folder or pinned Hub repo
            source, revision = entry.source, revision or entry.revision
    elif isinstance(source, str) and "/" not in source and not Path(source).expanduser().exists():
        _check_zoo_name(source)
    path = Path(source).expanduser()
    if path.is_dir():
        if revision is not None:
            raise ValueError(f"revision={revision!r} applies to Hub repos; {source} is a local folder")
        return path
    text = str(source)
    if path.suffix == ".ckpt" or text.startswith((".", "/", "~")) or text.count("/") > 1:
        raise CheckpointError(
            f"{source} is neither a local folder nor a Hub repo id ('org/name'); a Lightning .ckpt from "
            "zoo fit converts with: zoo export CKPT OUT_DIR"
        )
    offline = constants.HF_HUB_OFFLINE if local_files_only is None else bool(local_files_only)
    try:
        folder = snapshot_download(
            text,
            revision=revision,
            cache_dir=cache_dir,
            local_files_only=offline,
            token=token,
            allow_patterns=list(CHECKPOINT_PATTERNS),
            library_name="structured-zoo",
            library_version=zoo.__version__,
        )
    except HFValidationError as error:
        raise CheckpointError(
            f"{source} is neither a local folder nor a valid Hub repo id: {error}"
        ) from None
    except LocalEntryNotFoundError:
        cache = cache_dir or constants.HF_HUB_CACHE
        why = (
            "while downloading is off (local_files_only / HF_HUB_OFFLINE=1): download it once online"
            if offline
            else "and the Hub could not be reached (no network?): try again online"
        )
        raise CheckpointError(
            f"{source} is not a local folder, and it is not in the Hub cache ({cache}) at revision "
            f"{revision or 'main'} {why}, or pass a local folder"
        ) from None
    except HfHubHTTPError as error:
        raise CheckpointError(
            f"{source} is not a local folder, and the Hub could not provide it (revision "
            f"{revision or 'main'}): {error}"
        ) from None
    return Path(folder)


def _check_zoo_name(source: str) -> None:
    """A source without '/' that is no folder is no Hub repo of ours: say what it is close to (an
    architecture's pretrained tags, or the tags it misspells) before any download is tried."""
    import difflib

    from zoo.hub.registry import list_models

    tags = list_models(pretrained=True)
    if source in list_models():
        own = list_models(f"{source}.*", pretrained=True)
        detail = f"its pretrained tags are {', '.join(own)}" if own else "it has no pretrained weights yet"
        raise CheckpointError(
            f"{source!r} is an architecture, not a pretrained model: {detail} "
            f"(zoo.create_model({source!r}) builds it untrained)"
        )
    close = difflib.get_close_matches(source, tags, n=3, cutoff=0.8)
    if close:
        raise CheckpointError(
            f"{source!r} is not a pretrained tag, a local folder or a Hub repo id ('org/name'); "
            f"did you mean {', '.join(close)}?"
        )


def from_pretrained(
    source: str | os.PathLike,
    *,
    revision: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    local_files_only: bool | None = None,
    token: str | bool | None = None,
    dtype: str | torch.dtype | None = None,
) -> ZooModel:
    """The pretrained model at ``source`` (a registered pretrained tag ``arch.tag``, a local folder or
    a Hub repo id), rebuilt as the class its ``config.json`` names, weights strictly checked, in eval
    mode. A tag resolves to its registered source (the bundled folder, or a Hub repo at its pinned
    revision unless ``revision`` is given). ``dtype`` casts the loaded model (default: the folder's
    ``compute_dtype``, else the dtype its weights are stored in; float16 is refused: no dynamic program
    runs in it). Other arguments as ``resolve``."""
    if dtype is not None and parse_dtype(dtype) == torch.float16:  # a bad dtype: before any download
        raise ValueError(
            "dtype float16: every dynamic program refuses it (its range, 65504, is too small for a log Z); "
            "load in float32 or bfloat16 (computed in float32), or store half-size weights with "
            "save_pretrained(storage_dtype='float16')"
        )
    from zoo.hub.registry import check_tag_holds, list_models

    folder = resolve(
        source, revision=revision, cache_dir=cache_dir, local_files_only=local_files_only, token=token
    )
    try:
        model = load_folder(folder, dtype)
    except CheckpointError as error:
        if folder == Path(source):
            raise
        raise CheckpointError(f"{source} (revision {revision or 'main'}): {error}") from None
    if isinstance(source, str) and source in list_models(pretrained=True) and folder != Path(source):
        check_tag_holds(source, model)
    return model


# --- pushing -----------------------------------------------------------------------------------
def _is_checkpoint_file(name: str) -> bool:
    """A file of a pretrained-model folder (what a push uploads, and deletes where a folder lacks it)."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in CHECKPOINT_PATTERNS)


def _network_errors() -> tuple[type[Exception], ...]:
    """The errors of a Hub request that got no answer (no network, DNS, proxy, timeout): the transport
    errors of huggingface_hub's HTTP client (httpx before huggingface_hub 2, httpx2 since)."""
    import importlib

    errors = []
    for name in ("httpx2", "httpx"):
        try:
            errors.append(importlib.import_module(name).TransportError)
        except ImportError:
            continue
    return tuple(errors)


def push_to_hub(
    source: ZooModel | str | os.PathLike,
    repo_id: str,
    *,
    revision: str | None = None,
    private: bool | None = None,
    token: str | bool | None = None,
    commit_message: str | None = None,
) -> CommitInfo:
    """Upload a model (saved first) or a pretrained-model folder (checked to load first) to the Hub
    repo ``repo_id``, created if missing; one model per repo: one commit with every checkpoint file
    and the card rendered for ``repo_id``, deleting checkpoint files of an earlier push that this
    folder does not have (e.g. an old ``results.json``). ``revision``: a branch (created from main
    if missing). Returns the commit (``.oid`` is its sha, for pinned downloads)."""
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi
    from huggingface_hub.errors import HfHubHTTPError

    with tempfile.TemporaryDirectory(prefix="zoo-push-") as temporary:
        folder = save_pretrained(source, temporary) if isinstance(source, ZooModel) else Path(source)
        load_folder(folder)  # never push a checkpoint that does not load
        config = read_config(folder)
        card = str(render_folder_card(folder, repo_id)).encode()
        operations = [CommitOperationAdd(path_in_repo=CARD_NAME, path_or_fileobj=card)]
        present = sorted(p.name for p in folder.iterdir() if p.is_file() and _is_checkpoint_file(p.name))
        operations += [
            CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(folder / name))
            for name in present
            if name != CARD_NAME
        ]
        api = HfApi(token=token)
        try:
            api.create_repo(repo_id, private=private, exist_ok=True)
            if revision is not None:
                api.create_branch(repo_id, branch=revision, exist_ok=True)
            stale = {f for f in api.list_repo_files(repo_id, revision=revision) if _is_checkpoint_file(f)}
            operations += [CommitOperationDelete(path_in_repo=name) for name in sorted(stale - set(present))]
            return api.create_commit(
                repo_id,
                operations,
                revision=revision,
                commit_message=commit_message
                or f"{config.get('architecture') or config['class_path']} (structured-zoo {zoo.__version__})",
            )
        except _network_errors() as error:
            raise ConnectionError(
                f"{repo_id}: the Hub ({api.endpoint}) could not be reached (no network?): {error}; nothing "
                "was pushed: try again online"
            ) from None
        except HfHubHTTPError as error:
            status = getattr(error.response, "status_code", None)
            if status not in (401, 403):
                raise
            raise PermissionError(
                f"{repo_id}: the Hub refused the push ({status}: {str(error).splitlines()[0]}); nothing was "
                "pushed: log in (hf auth login), set HF_TOKEN, or pass a token with write access "
                "(zoo push --token, push_to_hub(token=...))"
            ) from None
