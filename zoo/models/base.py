"""``ZooModel``: the base of every model family; it records its constructor arguments.

A zoo model is rebuilt from plain values: its class path and the arguments it was constructed with
(``config``). Checkpoints store those instead of a pickled module, so they load under torch >= 2.6
(weights-only unpickling) and across library versions; LightningCLI configs hold the same values.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import functools
import importlib
import inspect
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from torch import Tensor, nn

if TYPE_CHECKING:
    from zoo.data.vocab import Vocabulary

PLAIN = (bool, int, float, str, type(None))
_WEIGHTS_FOLLOW = contextvars.ContextVar("zoo_weights_follow", default=False)


@contextlib.contextmanager
def weights_follow() -> Iterator[None]:
    """Within it, models are built only to receive a complete set of saved weights (``from_pretrained``,
    ``zoo export``, a task checkpoint, ``init_from``): a family skips fetching pretrained parts (the
    structured VAE's GPT-2 encoder) and builds them from its arguments, which describe them."""
    token = _WEIGHTS_FOLLOW.set(True)
    try:
        yield
    finally:
        _WEIGHTS_FOLLOW.reset(token)


@contextlib.contextmanager
def gradients_in_evaluation(batch: dict) -> Iterator[dict]:
    """Marginals are gradients of log Z: inside Lightning's evaluation (inference mode, no_grad) they
    need gradients back on and a copy of the batch (tensors made in inference mode cannot enter
    autograd). Yields that copy."""
    import torch

    with torch.inference_mode(False), torch.enable_grad():
        yield {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def scoring(method):
    """For a family's ``log_likelihood(batch, ...)``: it builds an autograd graph in training mode, when a
    tensor of the batch requires grad (gradients with respect to the inputs), or when called with
    ``requires_grad=True`` (gradients of a model in eval mode, such as ``from_pretrained``'s); otherwise
    (eval mode) it runs under ``torch.no_grad()``: less memory, and the engine's no-grad paths."""
    import torch

    @functools.wraps(method)
    def score(self, batch: dict, *args, requires_grad: bool = False, **kwargs):
        needs_graph = (
            requires_grad
            or self.training
            or any(isinstance(v, torch.Tensor) and v.requires_grad for v in batch.values())
        )
        with contextlib.nullcontext() if needs_graph else torch.no_grad():
            return method(self, batch, *args, **kwargs)

    signature = inspect.signature(method)
    flag = inspect.Parameter("requires_grad", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=bool)
    score.__signature__ = signature.replace(parameters=[*signature.parameters.values(), flag])
    return score


@contextlib.contextmanager
def evaluating(module: nn.Module) -> Iterator[None]:
    """Within it the module is in eval mode (no dropout, no state dropout, the exact evaluation path);
    its mode is restored after. For what a user asks of the whole model: decoding, parsing, sampling."""
    training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(training)


def decoding(method):
    """For what a user asks of the whole trained model (``decode``, ``segment``, ``sample``): it runs in
    eval mode (``evaluating``) and under ``torch.no_grad()``, after refusing a float16 model
    (``zoo.models.inputs.check_compute_dtype``; what reads a batch refuses it there too)."""
    import torch

    from zoo.models.inputs import check_compute_dtype

    @functools.wraps(method)
    def decode(self, *args, **kwargs):
        check_compute_dtype(self)
        with evaluating(self), torch.no_grad():
            return method(self, *args, **kwargs)

    return decode


def renamed(old: str, new: str):
    """A method ``old`` kept for one release as an alias of ``new``: it calls ``new`` and warns
    (``FutureWarning``) that the name will go."""

    def alias(self, *args, **kwargs):
        import warnings

        warnings.warn(
            f"{type(self).__name__}.{old}() is renamed {new}() and will be removed in the next release",
            FutureWarning,
            stacklevel=2,
        )
        return getattr(self, new)(*args, **kwargs)

    alias.__name__ = old
    alias.__doc__ = f"Deprecated: the old name of ``{new}``."
    return alias


def weights_will_follow() -> bool:
    """Whether the model being built will receive saved weights (inside ``weights_follow``)."""
    return _WEIGHTS_FOLLOW.get()


def is_under(key: str, name: str) -> bool:
    """Whether state-dict ``key`` is the weight ``name`` or lies in the module ``name``."""
    return key == name or key.startswith(name + ".")


def renamed_key(key: str, renames: Mapping[str, str]) -> str:
    """``key`` under ``renames`` ({old name: new name}): a key that is an old name, or lies under one
    (``old.`` ...), takes the new name in its place; other keys are unchanged."""
    for old, new in renames.items():
        if is_under(key, old):
            return new + key[len(old) :]
    return key


def _rename_legacy_keys(module: ZooModel, state_dict: dict, prefix: str, *args) -> None:
    """``load_state_dict`` pre-hook of every zoo model: renames its ``legacy_keys`` in place, so that
    weights saved under the old names (a Lightning checkpoint, a folder of an older format) load."""
    for key in [k for k in state_dict if k.startswith(prefix)]:
        new = prefix + renamed_key(key[len(prefix) :], module.legacy_keys)
        if new != key:
            state_dict[new] = state_dict.pop(key)


def _plain(name: str, value: Any) -> Any:
    """``value`` if it is a plain value (or a list / tuple / dict of them), else a TypeError."""
    if isinstance(value, enum.Enum):  # e.g. zoo.Backend: stored as its string value
        return _plain(name, value.value)
    if isinstance(value, PLAIN):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(name, v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(name, v) for k, v in value.items()}
    raise TypeError(
        f"model argument {name!r} must be a plain value (bool, int, float, str, None, or lists / dicts "
        f"of them), got {type(value).__name__}"
    )


def family_class(class_path: str) -> type[ZooModel]:
    """The ZooModel subclass at ``class_path`` ("zoo.models.PCFG"); ValueError when there is none."""
    module_name, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError, ValueError) as error:
        raise ValueError(f"unknown model class {class_path!r}: {error}") from None
    if not (isinstance(cls, type) and issubclass(cls, ZooModel)):
        raise ValueError(f"{class_path!r} is not a zoo model (a ZooModel subclass)")
    return cls


READ_ONLY_CONFIG = (
    "model.config is read-only: it records the arguments the model was built with; build a new model with "
    "the changes (zoo.create_model(name, **changes), or ZooModel.from_config({'class_path': ..., "
    "'init_args': {**model.config, **changes}}))"
)


class FrozenConfig(dict):
    """A model's ``config``: the arguments it was built with, read-only (a changed entry would not change
    the model, but a save would record it: a checkpoint that does not load, or a wrong dropout). Build
    another model with the changes: ``ZooModel.from_config`` / ``zoo.create_model(..., **changes)``."""

    def _refuse(self, *args, **kwargs):
        raise TypeError(READ_ONLY_CONFIG)

    __setitem__ = __delitem__ = update = pop = popitem = setdefault = clear = __ior__ = _refuse

    def __reduce__(self):  # pickling and deepcopy rebuild it whole (not item by item)
        return (FrozenConfig, (dict(self),))


class ZooModel(nn.Module):
    """An nn.Module whose ``config`` holds its constructor arguments as plain values.

    Subclasses write an ordinary ``__init__``; the arguments of the outermost constructor call are
    recorded (defaults included) after it returns. ``class_path`` + ``config`` rebuild the model:
    ``ZooModel.from_config({"class_path": ..., "init_args": ...})``.
    """

    config: dict[str, Any]
    _vocab: Vocabulary | None = None
    # the Hugging Face task of the family's model cards (their model index)
    card_task_type: str = "other"
    # the longest sequence evaluation takes (events, as ``lengths`` counts them), from the family's cost
    # model (each family's docstring states it); None: no limit (cost linear in the length)
    max_eval_length: int | None = None
    # state-dict keys a family renamed, {old name: new name} (e.g. {"trans_mlp": "transition.mlp"}, when
    # the backend heads of checkpoint format 3 took over the parameters): weights saved under the old
    # names keep loading, through ``upgrade_state_dict`` and a ``load_state_dict`` pre-hook
    legacy_keys: ClassVar[dict[str, str]] = {}
    # arguments that say how the weights are read without changing their shapes (an HSMM's
    # standardize_sequences: whether its input projection was fitted on per-recording standardized
    # frames): initial weights (``init_from``) fit only a model with the same values
    weights_read_with: ClassVar[tuple[str, ...]] = ()
    # state-dict keys saved in the model's own dtype whatever ``save_pretrained``'s storage_dtype:
    # statistics fitted from data, whose rounding moves every score (an HSMM's input projection: a mean
    # of 1000.275 stored as 1000.5 in float16 moved a 50-frame log p by 39 nats)
    full_precision_keys: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        super().__init__()
        self.register_load_state_dict_pre_hook(_rename_legacy_keys)

    def upgrade_state_dict(self, weights: Mapping[str, Any]) -> dict[str, Any]:
        """``weights`` with the keys of older layouts (``legacy_keys``) renamed to this model's."""
        return {renamed_key(key, self.legacy_keys): value for key, value in weights.items()}

    def num_events(self, batch: dict) -> Tensor:
        """What per-event metrics (perplexity, NLL per frame) and the training loss are normalized by: the
        batch's ``lengths`` (a tensor or a list) as a (B,) tensor on the model's device. Lengths count
        tokens with their end token (``<eos>``, ``<|endoftext|>``; Kim et al. for the PCFG) or frames."""
        import torch

        return torch.as_tensor(batch["lengths"], device=next(self.parameters()).device)

    def eval_memory(self, batch_size: int, length: int) -> int | None:
        """Bytes that evaluating a batch of ``batch_size`` sequences padded to ``length`` takes at most,
        by the family's cost model (an upper estimate of the peak: ``scripts/eval_memory.py`` checks it
        against measured peaks); None: the family has no estimate."""
        return None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None:
            return
        signature = inspect.signature(init)

        @functools.wraps(init)
        def recording_init(self, *args, **kw):
            outermost = not getattr(self, "_recording", False)
            if outermost:
                object.__setattr__(self, "_recording", True)
            try:
                init(self, *args, **kw)
            finally:
                if outermost:
                    object.__setattr__(self, "_recording", False)
            if outermost:
                bound = signature.bind(self, *args, **kw)
                bound.apply_defaults()
                arguments = dict(list(bound.arguments.items())[1:])
                config = FrozenConfig({k: _plain(k, v) for k, v in arguments.items()})
                object.__setattr__(self, "config", config)

        cls.__init__ = recording_init

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "config":  # recorded once, by the constructor (FrozenConfig)
            raise TypeError(READ_ONLY_CONFIG)
        super().__setattr__(name, value)

    @property
    def vocab(self) -> Vocabulary | None:
        """The word vocabulary of a model of word ids (``zoo.data.Vocabulary``: ``encode`` / ``decode``),
        or None. ``save_pretrained`` writes it (``vocab.json``) and ``from_pretrained`` attaches it; a
        task sets it from its data. Assigning checks that its size is the model's ``vocab_size``."""
        return self._vocab

    @vocab.setter
    def vocab(self, vocab: Vocabulary | None) -> None:
        from zoo.data.vocab import Vocabulary

        if vocab is not None:
            name = type(self).__name__
            if not isinstance(vocab, Vocabulary):
                raise TypeError(f"vocab must be a zoo.data.Vocabulary or None, got {type(vocab).__name__}")
            size = getattr(self, "vocab_size", None)
            if size is None:
                raise ValueError(f"{name} reads no word ids (it has no vocab_size): it takes no vocabulary")
            if vocab.size != size:
                raise ValueError(
                    f"the vocabulary has {vocab.size} tokens but the {name} has vocab_size = {size}: "
                    "they must be equal (token i is the model's word id i)"
                )
        self._vocab = vocab

    @property
    def class_path(self) -> str:
        return f"{type(self).__module__}.{type(self).__qualname__}"

    def spec(self) -> dict[str, Any]:
        """{"class_path": ..., "init_args": config}: everything needed to rebuild the model."""
        return {"class_path": self.class_path, "init_args": dict(self.config)}

    @staticmethod
    def from_config(spec: dict[str, Any]) -> ZooModel:
        """Rebuild a model from ``spec()`` (fresh parameters; load a state dict for the weights), or
        build a registered architecture by name: ``{"architecture": "hmm_categorical_n512_d64",
        "backend": "exact", **overrides}`` is ``zoo.create_model(...)`` (a recipe may name its
        architecture instead of restating the sizes)."""
        if isinstance(spec, dict) and "architecture" in spec:
            from zoo.hub.registry import create_model

            arguments = dict(spec)
            return create_model(arguments.pop("architecture"), **arguments)
        if not isinstance(spec, dict) or "class_path" not in spec:
            raise ValueError(
                "a model spec is a dict with 'class_path' and 'init_args', or with 'architecture' (a "
                f"registered name, zoo models) and optionally 'backend' and other arguments; got {spec!r}"
            )
        return family_class(spec["class_path"])(**spec.get("init_args", {}))

    # --- the zoo's checkpoint format (zoo.hub.pretrained) -------------------------------------
    def save_pretrained(self, directory, **kwargs):
        """Write ``config.json``, ``model.safetensors`` and the card ``README.md`` to ``directory``
        (keyword arguments: ``zoo.hub.pretrained.save_pretrained``); returns the folder's path."""
        from zoo.hub.pretrained import save_pretrained

        return save_pretrained(self, directory, **kwargs)

    @classmethod
    def from_pretrained(cls, source, **kwargs) -> ZooModel:
        """The model at ``source`` (a folder or Hub repo id; keyword arguments:
        ``zoo.hub.pretrained.from_pretrained``); called on a subclass, the checkpoint must be of it."""
        from zoo.hub.pretrained import CheckpointError, from_pretrained

        model = from_pretrained(source, **kwargs)
        if not isinstance(model, cls):
            raise CheckpointError(f"{source} holds a {type(model).__name__}, not a {cls.__name__}")
        return model

    def push_to_hub(self, repo_id: str, **kwargs):
        """Save and upload to the Hub repo ``repo_id`` (keyword arguments:
        ``zoo.hub.pretrained.push_to_hub``)."""
        from zoo.hub.pretrained import push_to_hub

        return push_to_hub(self, repo_id, **kwargs)
