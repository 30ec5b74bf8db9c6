"""``LikelihoodTask``: train and evaluate any sequence model by maximum likelihood.

The model (a ``ZooModel`` following docs/training-api.md) returns log p(sequence); the loss is
-sum log p / sum events of the batch. Validation and test report the NLL per event and, for text,
the perplexity, through DDP-safe metrics. A model whose evaluation is itself random (the randomized
backend beyond its exact-evaluation size) is evaluated with ``eval_seeds`` seeds, and the mean and
standard deviation over seeds are reported (``val/nll`` and ``val/nll_std``, likewise ``ppl``).
AdamW; the learning rate is multiplied by ``lr_factor`` when the validation NLL has not improved for
``lr_patience`` validations; gradient clipping is the Trainer's ``gradient_clip_val``.
"""

from __future__ import annotations

import inspect
import os
import re
import time
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor

from zoo.data.vocab import Vocabulary
from zoo.errors import SetupError
from zoo.hub.checkpoints import load_model_weights
from zoo.hub.pretrained import CheckpointError, load_into
from zoo.metrics import NegativeLogLikelihood, Perplexity
from zoo.models.base import ZooModel, renamed_key, weights_follow
from zoo.tasks.interrupt import InterruptDynamicPrograms
from zoo.tasks.prediction_writer import EpochWriter
from zoo.tasks.random_state import every_rank_state, set_state, this_rank_state

# evaluation's budget for the cost model's estimate of a batch (``max_eval_memory``): the device's memory
DEFAULT_EVAL_MEMORY = "auto"
UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
UNITS.update({f"{p}iB": 2 ** (10 * (i + 1)) for i, p in enumerate("KMGT")})


def evaluation_generator(
    batch_idx: int, device: torch.device, seed: int = 0, trainer=None
) -> torch.Generator:
    """The generator of a random evaluation's draws on batch ``batch_idx`` (seed 0: what validation,
    test and predict use for one estimate; the other seeds give the spread over seeds). Under DDP
    (``trainer``'s world size W > 1) the batch counts as number ``batch_idx * W + rank``, so that no two
    ranks draw alike; the ranks' batches are not one process's, so the estimates depend on W (each is
    as good: the same distribution)."""
    if trainer is not None and trainer.world_size > 1:
        batch_idx = batch_idx * trainer.world_size + trainer.global_rank
    return torch.Generator(device=device).manual_seed(seed * 1_000_003 + batch_idx)


class LikelihoodTask(pl.LightningModule):
    """Maximum-likelihood training of a sequence model.

    Args:
        model: a ``ZooModel``, or its spec {"class_path": ..., "init_args": {...}} (how checkpoints
            store it: plain values only), or a registered architecture by name, {"architecture":
            "hmm_categorical_n512_d64", "backend": "exact", ...overrides} (``ZooModel.from_config``).
        lr, weight_decay, betas: AdamW.
        lr_factor, lr_patience: ReduceLROnPlateau on ``val/nll``.
        init_from: optional source of weights that initialize the model: fine-tuning with a fresh
            optimizer. A ``zoo fit`` checkpoint (``.ckpt``), or any ``zoo.from_pretrained`` source
            (a pretrained-model folder or a Hub repo id, honouring ``HF_HUB_OFFLINE``). The weights
            must fit the model exactly (same class, keys, shapes); nothing is loaded otherwise.
        init_missing_ok: names of the model's weights that ``init_from`` may lack; those it lacks keep
            their initialization, e.g. ``["inference.transition.feature_map.weight"]`` to start a low-rank VAE
            from an exact one. Every other weight must be there.
        eval_seeds: seeds of a random evaluation (models with ``evaluation_is_exact() == False``).
        max_eval_length: validation, test and predict refuse a batch with a longer sequence (events, as
            ``lengths`` counts them) before computing anything; None: the model family's limit
            (``model.max_eval_length``: the PCFG's cubic inside has one, chains have none).
        max_eval_memory: validation, test and predict refuse, before computing anything, a batch whose
            evaluation the family's cost model (``model.eval_memory``) puts above this many bytes:
            an int, a string with a unit ("8GiB", "512MiB", "2GB"), "auto" (the memory of the device
            that evaluates: the GPU's, else the machine's RAM) or None (no budget).
        predict_states: ``zoo predict`` decodes each sequence's most probable states where the model
            decodes; False leaves them out. A rank-space HMM's Viterbi over thousands of states is
            most of the cost (about 0.3 s a token at 4,096 states on one CPU core; its log p 1e-4 s).
    """

    def __init__(
        self,
        model: ZooModel | dict,
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        lr_factor: float = 0.5,
        lr_patience: int = 2,
        init_from: str | None = None,
        eval_seeds: int = 5,
        max_eval_length: int | None = None,
        init_missing_ok: list[str] | None = None,
        max_eval_memory: int | str | None = DEFAULT_EVAL_MEMORY,
        predict_states: bool = True,
    ):
        super().__init__()
        if not isinstance(eval_seeds, int) or eval_seeds < 2:
            raise ValueError(
                f"eval_seeds must be an int >= 2 (a standard deviation needs two), got {eval_seeds!r}"
            )
        if isinstance(model, dict):
            model = ZooModel.from_config(model)
        if not isinstance(model, ZooModel):
            raise TypeError(
                f"model must be a zoo model (ZooModel subclass) or its spec dict, got {type(model).__name__}"
            )
        self.model = model
        self.save_hyperparameters(
            {
                "model": model.spec(),
                "lr": lr,
                "weight_decay": weight_decay,
                "betas": list(betas),
                "lr_factor": lr_factor,
                "lr_patience": lr_patience,
                "init_from": None,  # the weights are in this checkpoint: reloading reads no other file
                "eval_seeds": eval_seeds,
                "max_eval_length": max_eval_length,
                "max_eval_memory": max_eval_memory,
            }
        )
        if max_eval_length is not None and (not isinstance(max_eval_length, int) or max_eval_length < 1):
            raise ValueError(f"max_eval_length must be a positive int or None, got {max_eval_length!r}")
        self.max_eval_length = max_eval_length or getattr(model, "max_eval_length", None)
        self.max_eval_memory = (
            max_eval_memory if max_eval_memory == "auto" else parse_bytes(max_eval_memory, "max_eval_memory")
        )
        if not isinstance(predict_states, bool):
            raise ValueError(f"predict_states must be true or false, got {predict_states!r}")
        self.predict_states = predict_states
        missing_ok = () if init_missing_ok is None else checked_missing_ok(init_missing_ok, self.model)
        if init_from is not None:
            try:
                weights, vocab = load_model_weights(init_from, self.model, missing_ok)
                load_into(self.model, weights, init_from, missing_ok)
            except CheckpointError as error:
                if "missing keys" not in str(error):
                    raise
                raise CheckpointError(
                    f"{error}. Weights the model has and init_from lacks (a backend's own, when the "
                    "backend changes) keep their initialization when named in init_missing_ok"
                ) from None
            self.model.vocab = vocab
            words = f", vocabulary of {vocab.size:,} tokens" if vocab is not None else ""
            values = sum(w.numel() for w in weights.values())
            rank_zero_info(
                f"init_from {init_from!r}: {len(weights)} weight tensors ({values:,} values) into the "
                f"{type(model).__name__}{words}"
            )
        self.metrics = torch.nn.ModuleDict(
            {
                f"{stage}_{name}": metric()
                for stage in ("val", "test")
                for name, metric in (("nll", NegativeLogLikelihood), ("ppl", Perplexity))
            }
        )
        self._text = False  # whether the evaluated batches are text (perplexity is reported then)
        self._events_seen, self._seconds, self._last_step_end = 0, 0.0, None  # learning-curve axes
        self._batch_events = 0  # the events of the batch being trained (training_step sets them)
        self._resumed_random_state = None  # the generators' states a resumed run's first batch starts from
        self.seed_metrics = torch.nn.ModuleDict(
            {
                stage: torch.nn.ModuleList(NegativeLogLikelihood() for _ in range(eval_seeds))
                for stage in ("val", "test")
            }
        )

    def configure_callbacks(self) -> list[pl.Callback]:
        """SIGTERM stops a running dynamic program at once (``zoo.tasks.interrupt``); one such callback
        a trainer (fit, then test, would otherwise announce that it replaces the first)."""
        trainer = self._trainer
        if trainer is not None and any(isinstance(c, InterruptDynamicPrograms) for c in trainer.callbacks):
            return []
        return [InterruptDynamicPrograms()]

    def setup(self, stage: str) -> None:
        """Check that the model and the data agree on the vocabulary size / number of keys, and give
        the model the data's vocabulary (``model.vocab``: checkpoints and exported folders keep it)."""
        data = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        for name in ("vocab_size", "num_keys"):
            wanted, given = getattr(data, name, None), getattr(self.model, name, None)
            if wanted is not None and given is not None and wanted != given:
                raise SetupError(
                    f"the model has {name} = {given} but the data has {wanted}: set "
                    f"model.init_args.model.init_args.{name}: {wanted} in the recipe"
                )
        vocab = getattr(data, "vocab", None)
        if isinstance(vocab, Vocabulary) and getattr(self.model, "vocab_size", None) is not None:
            check_same_vocab(self.model.vocab, vocab, "the initial weights' (init_from)")
            self.model.vocab = vocab

    def forward(self, batch: dict[str, Tensor]) -> Tensor:
        """log p of each sequence of the batch: (B,)."""
        return self.model.log_likelihood(batch)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        log_p = self(batch)
        events = self.model.num_events(batch)
        loss = -log_p.sum() / events.sum()
        self._record_step(-log_p.sum(), events.sum(), len(log_p))
        return loss

    def _record_step(self, loss_sum: Tensor, events: Tensor, sequences: int) -> None:
        """Keep the events a training step trains on and log ``train/loss``, the loss per event of the
        step's batches; both summed over the DDP processes in one reduction: their batches differ in
        length (one process's events times their number is not the total), and a process that trains
        on nothing this step (``ParsingTask``'s curriculum) adds nothing."""
        dtype = torch.promote_types(loss_sum.dtype, torch.float32)
        totals = torch.stack([loss_sum.detach().to(dtype), events.detach().to(dtype)])
        if self._distributed():
            totals = self.trainer.strategy.reduce(totals, reduce_op="sum")
            if not totals[1] > 0:  # no process trained on anything: no loss to log, as on one process
                self._batch_events = 0
                return
        self._batch_events = totals[1].round().long()
        self.log("train/loss", totals[0] / totals[1], prog_bar=True, batch_size=max(sequences, 1))

    def _distributed(self) -> bool:
        """Whether this task trains on several DDP processes."""
        return self._trainer is not None and self._trainer.world_size > 1

    def on_train_batch_start(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        """A resumed run's first batch draws from the random generators' states that the checkpoint
        kept (``zoo.tasks.random_state``): set here, not when the checkpoint is read, so that nothing a
        resumed run does before it (the sanity check's validation) draws from them."""
        if self._resumed_random_state is not None:
            set_state(self._resumed_random_state)
            self._resumed_random_state = None

    def on_train_batch_end(self, outputs, batch: dict[str, Tensor], batch_idx: int) -> None:
        """Log the events trained on so far (every process's: a batch that trains nothing, e.g. one
        the curriculum leaves out, adds none) and the training seconds,
        so a run's learning curves can be drawn against tokens and time (``zoo plot``); both go on
        across a resumed run."""
        self._events_seen, self._seconds = self._progress()
        self._batch_events, self._last_step_end = 0, time.perf_counter()
        # a tensor on the batch's device: no host synchronization a step (the logger reads it)
        self.log("train/tokens", torch.as_tensor(self._events_seen).float(), batch_size=1)
        self.log("train/seconds", self._seconds, batch_size=1)

    def _progress(self) -> tuple[Tensor | int, float]:
        """Events and seconds trained up to now, with the batch being trained (one whose
        ``on_train_batch_end`` has not run: a checkpoint callback's runs before the task's)."""
        return (
            self._events_seen + self._batch_events,
            self._seconds + time.perf_counter() - self._last_step_end,
        )

    def on_train_start(self) -> None:
        """Start the clock (a run resumed mid-epoch starts no epoch). A resumed run goes on as an
        uninterrupted one: its epoch's end steps the learning-rate scheduler (its validation is this
        run's), and one resumed at an epoch's end starts the next epoch afresh (Lightning, with
        ``max_steps``, would restart the finished epoch's loop: an empty step, the logged steps one off)."""
        self._last_step_end = time.perf_counter()
        loop = self.trainer.fit_loop
        loop._restarting = False  # its setter keeps it True under max_steps
        if loop.epoch_loop.batch_progress.current.ready == 0:
            loop.epoch_loop.restarting = False

    def on_train_epoch_start(self) -> None:
        self._last_step_end = time.perf_counter()  # validation and data set-up are not training time

    def on_train_epoch_end(self) -> None:
        """A run stopped mid-epoch by ``max_steps`` writes its ``last.ckpt`` then, as the docs say:
        Lightning's ModelCheckpoint (``save_last``, the recipes') wrote it at validation and epoch ends
        only, so the file held the previous one. Here, as a checkpoint written at the epoch's end (the
        callbacks' hook ran first), the epoch counts as cut short, and a resumed run trains its rest."""
        if self.trainer.max_steps < 0 or self.trainer.global_step < self.trainer.max_steps:
            return
        for callback in self.trainer.checkpoint_callbacks:
            if callback.save_last and callback._last_global_step_saved != self.trainer.global_step:
                callback._save_last_checkpoint(self.trainer, callback._monitor_candidates(self.trainer))

    def _random_evaluation(self) -> bool:
        return not getattr(self.model, "evaluation_is_exact", lambda: True)()

    def _evaluate(self, batch: dict[str, Tensor], stage: str, batch_idx: int) -> None:
        events = self.model.num_events(batch)
        self._text = "tokens" in batch
        if self._random_evaluation():  # one estimate per seed; mean and spread at the epoch's end
            for seed, metric in enumerate(self.seed_metrics[stage]):
                generator = evaluation_generator(batch_idx, events.device, seed, self._trainer)
                metric.update(self.model.log_likelihood(batch, generator=generator), events)
            return
        log_p = self(batch)
        metrics = [("nll", self.metrics[f"{stage}_nll"])]
        if "tokens" in batch:  # text: perplexity too
            metrics.append(("ppl", self.metrics[f"{stage}_ppl"]))
        for name, metric in metrics:
            metric.update(log_p, events)
            self.log(f"{stage}/{name}", metric, prog_bar=name == "ppl", batch_size=len(log_p))

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._check_budget(batch, "validation", batch_idx)
        self._evaluate(batch, "val", batch_idx)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._check_budget(batch, "test", batch_idx)
        self._evaluate(batch, "test", batch_idx)

    def _where(self, batch: dict[str, Tensor], stage: str) -> str:
        """Where the batch's longest sequence is in its split, for an error: " (line 7 of the input)" in
        a prediction whose data module numbers its input lines (``predict_lines``), else " (sequence 7 of
        the split, from 1, blank lines not counted)"; "" for a batch without ``index``."""
        if "index" not in batch:
            return ""
        index = int(batch["index"][batch["lengths"].argmax()])
        lines = getattr(self.trainer.datamodule, "predict_lines", None) if stage == "predict" else None
        if lines is not None:
            return f" (line {lines()[1][index]} of the input)"
        return f" (sequence {index + 1} of the split, blank lines not counted)"

    def _check_budget(self, batch: dict[str, Tensor], stage: str, batch_idx: int) -> None:
        """ValueError, before any computation, for a sequence longer than ``max_eval_length`` or a batch
        whose evaluation the model's cost model puts over ``max_eval_memory``."""
        limit = self.max_eval_length
        longest = int(batch["lengths"].max())
        if limit is not None and longest > limit:
            raise ValueError(
                f"{stage} batch {batch_idx} holds a sequence of {longest:,} events{self._where(batch, stage)}"
                f", over max_eval_length = {limit:,} ({type(self.model).__name__}: see its cost model); "
                f"drop such sequences from the {stage} data, or raise the limit "
                "(--model.init_args.max_eval_length)"
            )
        needed = self.model.eval_memory(len(batch["lengths"]), longest)
        budget = device_memory(self.device) if self.max_eval_memory == "auto" else self.max_eval_memory
        if budget is not None and needed is not None and needed > budget:
            raise ValueError(
                f"{stage} batch {batch_idx} ({len(batch['lengths'])} sequences of up to {longest:,} events) "
                f"would take about {needed / 2**30:.3g} GiB to evaluate ({type(self.model).__name__}."
                f"eval_memory, its cost model), over max_eval_memory = {budget / 2**30:.3g} GiB"
                f"{' (auto: the device memory)' if self.max_eval_memory == 'auto' else ''}; evaluate in "
                f"smaller batches (the data module's {self._batch_options()}), drop the longest {stage} "
                "sequences, or set the budget (--model.init_args.max_eval_memory 64GiB, or null for none)"
            )

    def _batch_options(self) -> str:
        """The batch-size arguments of the run's data module, as a refusal names them ("batch_frames /
        batch_size" for music and features; "batch_tokens / batch_size" for text and without one)."""
        data = getattr(self._trainer, "datamodule", None)
        accepted = inspect.signature(type(data)).parameters if data is not None else {}
        names = [n for n in ("batch_tokens", "batch_frames", "batch_size") if n in accepted]
        return " / ".join(names or ["batch_tokens", "batch_size"])

    def _log_seed_statistics(self, stage: str) -> None:
        """Mean and standard deviation over seeds of a random evaluation's NLL (and perplexity)."""
        metrics = self.seed_metrics[stage]
        if not self._random_evaluation():
            return
        nll = torch.stack([m.compute() for m in metrics]).float()
        for metric in metrics:
            metric.reset()
        self.log(f"{stage}/nll", nll.mean())
        self.log(f"{stage}/nll_std", nll.std())
        if self._text:
            self.log(f"{stage}/ppl", nll.exp().mean())
            self.log(f"{stage}/ppl_std", nll.exp().std())

    def on_validation_epoch_end(self) -> None:
        self._log_seed_statistics("val")

    def on_test_epoch_end(self) -> None:
        self._log_seed_statistics("test")

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        """log p and events of each sequence (perplexity of a sentence: exp(-log_p / events)), its most
        probable states (B x T, -1 past each length) where the model decodes (``decode``: the HMMs'
        Viterbi path, the structured VAE's MAP states of q) and ``predict_states`` is on, and ``index``
        (positions in the split) where the batch has it; a batch over the limits is refused first, as
        in validation and test. A random evaluation (importance sampling, the randomized backend's
        estimate) is seeded with the batch's index, as the test's (first) seed is."""
        self._check_budget(batch, "predict", batch_idx)
        events = self.model.num_events(batch)
        generator = evaluation_generator(batch_idx, events.device, trainer=self._trainer)
        out = {"log_likelihood": self.model.log_likelihood(batch, generator=generator), "events": events}
        if self.predict_states and callable(getattr(self.model, "decode", None)):
            out["states"] = self.model.decode(batch)
        if "index" in batch:
            out["index"] = batch["index"]
        return out

    @classmethod
    def load_from_checkpoint(cls, *args: Any, **kwargs: Any):
        """Lightning's, with the model built for the checkpoint's weights (``zoo.models.base.weights_follow``:
        no pretrained part, e.g. a GPT-2 encoder, is fetched first)."""
        with weights_follow():
            return super().load_from_checkpoint(*args, **kwargs)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Record the task's class path (``zoo_task``, and ``_class_path`` among the hyperparameters,
        where LightningCLI's reading of ``--ckpt_path`` finds it): with the plain-value hyperparameters
        it rebuilds the task; and the model's vocabulary, if any (plain values, for ``zoo export``)."""
        checkpoint["zoo_task"] = f"{type(self).__module__}.{type(self).__qualname__}"
        checkpoint["hyper_parameters"]["_class_path"] = checkpoint["zoo_task"]
        events, seconds = self._events_seen, self._seconds
        trainer = self._trainer
        batches = trainer.fit_loop.epoch_loop.batch_progress.current if trainer is not None else None
        if trainer is not None and trainer.training and batches.processed > batches.completed:
            events, seconds = self._progress()  # written within a batch's on_train_batch_end
        checkpoint["zoo_progress"] = {"events": int(events), "seconds": seconds}
        checkpoint["zoo_random_states"] = every_rank_state(trainer)
        if self.model.vocab is not None:
            checkpoint["vocab"] = self.model.vocab.to_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Give the model the vocabulary the checkpoint recorded (it must be the data's, if set up),
        take up the events and seconds trained so far, and resume a run stopped early as a run
        without the stop goes on (``resume_stopped_epoch``)."""
        resume_stopped_epoch(checkpoint.get("loops", {}).get("fit_loop"))
        progress = checkpoint.get("zoo_progress", {})
        self._events_seen, self._seconds = progress.get("events", 0), progress.get("seconds", 0.0)
        self._resumed_random_state = this_rank_state(checkpoint.get("zoo_random_states"), self._trainer)
        if checkpoint.get("vocab") is not None:
            vocab = Vocabulary.from_dict(checkpoint["vocab"])
            check_same_vocab(vocab, self.model.vocab, "the checkpoint's")
            self.model.vocab = vocab

    def configure_optimizers(self) -> dict[str, Any]:
        h = self.hparams
        optimizer = torch.optim.AdamW(
            self.parameters(), lr=h.lr, weight_decay=h.weight_decay, betas=tuple(h.betas)
        )
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="min", factor=h.lr_factor, patience=h.lr_patience
        )
        return {
            "optimizer": optimizer,
            # not strict: training without validation (limit_val_batches=0) keeps the learning rate
            "lr_scheduler": {
                "scheduler": scheduler,
                "monitor": "val/nll",
                "interval": "epoch",
                "strict": False,
            },
        }


def resume_stopped_epoch(fit_loop: dict[str, Any] | None) -> None:
    """Lightning's fit-loop state in a checkpoint written at the end of training or of an epoch (its
    epoch ``processed`` but not ``completed``) as a resume must read it: an epoch cut short (by
    ``max_steps``, ``max_time``, a stop) not processed, so the rest of it is trained; an epoch run to
    its end completed, with no batch of the next one run. Lightning would otherwise skip the rest of
    a cut-short epoch, or, with ``max_steps``, run an empty epoch and the next epoch's shuffle."""
    epochs = (fit_loop or {}).get("epoch_progress")
    batches = (fit_loop or {}).get("epoch_loop.batch_progress")
    if not epochs or not batches or epochs["current"]["processed"] != epochs["current"]["completed"] + 1:
        return
    if not batches["is_last_batch"]:
        for count in epochs.values():
            count["processed"] -= 1
        return
    for count in epochs.values():
        count["completed"] = count["processed"]
    batches["current"] = dict.fromkeys(batches["current"], 0)
    batches["is_last_batch"] = False


def device_memory(device: torch.device) -> int:
    """The memory of ``device`` in bytes: a GPU's own, else the machine's RAM."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def parse_bytes(value: int | str | None, name: str) -> int | None:
    """A size in bytes from an int or a string with a unit ("8GiB", "512 MiB", "2GB"); None stays
    None; ValueError naming ``name`` for anything else."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return value
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*", value) if isinstance(value, str) else None
    if match is None or float(match[1]) <= 0:
        raise ValueError(
            f"{name} must be a positive number of bytes, e.g. 8GiB, 512MiB or 2GB (units: "
            f"{', '.join(sorted(UNITS)[1:])}), or None; got {value!r}"
        )
    return int(float(match[1]) * UNITS[match[2] or ""])


def check_same_vocab(given: Vocabulary | None, data: Vocabulary | None, what: str) -> None:
    """SetupError naming the first differing id unless the two vocabularies (when both are set) agree:
    weights trained on one vocabulary mean other words under another."""
    if given is None or data is None or given == data:
        return
    differ = next((i for i, (a, b) in enumerate(zip(given.tokens, data.tokens)) if a != b), None)
    detail = (
        f"id {differ} is {given.tokens[differ]!r} there but {data.tokens[differ]!r} in the data"
        if differ is not None
        else f"eos / unk {given.eos!r} / {given.unk!r} there, {data.eos!r} / {data.unk!r} in the data"
    )
    raise SetupError(
        f"{what} vocabulary differs from the data's ({detail}): the word ids would mean other words. "
        "Give the data module that vocabulary (--data.init_args.vocab_from SOURCE; zoo fit does so for "
        "init_from unless the recipe names another), and words it lacks map to <unk>"
    )


def checked_missing_ok(names, model: ZooModel) -> list[str]:
    """``names`` (``init_missing_ok``) under the model's current names (a name it renamed since, in its
    ``legacy_keys``, under the new one); ValueError unless they are a list of the model's weight names."""
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"init_missing_ok must be a list of weight names, got {names!r}")
    renamed = [renamed_key(name, model.legacy_keys) for name in names]
    unknown = sorted(set(renamed) - set(model.state_dict()))
    if unknown:
        raise ValueError(
            f"init_missing_ok names {unknown}, which {type(model).__name__} does not have; its weights are "
            f"{sorted(model.state_dict())[:20]}"
        )
    return renamed


class LikelihoodWriter(EpochWriter):
    """Writes ``LikelihoodTask.predict_step``'s scores to ``output_path`` as JSON lines, one sequence a
    line in the order of the predicted split: ``{"index", "events", "log_likelihood", "nll"}`` (``nll``:
    -log p / events, nats a token or frame; a sentence's perplexity is exp(nll)), with ``states`` (the
    most probable state of each event, for the models that decode: the HMMs' Viterbi path, the structured
    VAE's MAP states of q) and ``words`` (each event's word or token, the end token last, from a data
    module with ``predict_words()``: PTB's words as read, the captions' GPT-2 tokens as text) and
    ``line`` (the input line it was read from, from 1, where the data module has ``predict_lines()``:
    blank lines are left out, so ``index`` counts sentences and ``line`` finds each in the file).

    Args:
        output_path: the file to write (its directory is created).
        overwrite: replace an existing file at ``output_path`` (default: refused before anything is
            predicted).
    """

    def write(self, trainer, batches: list[dict]) -> None:
        words = self.from_data(trainer, "predict_words")
        inputs = self.from_data(trainer, "predict_lines")
        rows = []
        for out in batches:
            for b, events in enumerate(out["events"].tolist()):
                index = int(out["index"][b]) if "index" in out else len(rows)
                log_p = float(out["log_likelihood"][b])
                row = {"index": index, "events": int(events), "log_likelihood": log_p, "nll": -log_p / events}
                if "states" in out:
                    states = out["states"][b]
                    row["states"] = states[states >= 0].tolist()
                if words is not None:
                    row["words"] = words[index]
                if inputs is not None:
                    row["line"] = inputs[1][index]
                rows.append(row)
        self.warn_unpredicted(trainer, (row["index"] for row in rows))
        self.write_json_lines(rows)
