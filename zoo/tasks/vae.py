"""``VAETask``: train a structured VAE by its ELBO, evaluate it by importance sampling.

A ``LikelihoodTask`` (same optimizer, scheduler, checkpoints, ``init_from``) whose training loss is
-sum ELBO / sum tokens (``model.elbo(batch)``, Fu et al. 2022 Eq. 32) and whose validation / test
report the importance-sampled NLL (``model.log_likelihood``, ``eval_samples`` samples of q):
``val/nll`` (nats per token, ``<|endoftext|>`` counted), ``val/ppl``, ``val/nll_sentence`` (nats per
sentence: the paper's Table 5 metric) and -ELBO per sentence ``val/neg_elbo_sentence`` beside it (from
the same samples: hard samples of q computed exactly, so never below ``val/nll_sentence``; the training
estimator's relaxed ELBO is ``train/elbo``), and q's state usage
(``zoo.metrics.PosteriorUsage``, q computed exactly): ``val/distinct_map_states``,
``val/sentence_state_information``, ``val/token_state_information`` and ``val/states_used``, which tell a
collapsed posterior. The importance
samples of batch i are seeded with i, so an evaluation is reproducible. Logged while training:
``train/loss``, ``train/elbo``, ``train/reconstruction``, ``train/entropy``, ``train/states``,
``train/words``, ``train/kl`` (per sentence) and ``train/kl_weight``.

KL warm-up (``kl_warmup_steps`` S > 0; Bowman et al. 2016): for the first S steps the training loss
weighs the KL part of the ELBO, log p(x~) + H(q), by beta = step / S (then 1), against posterior
collapse; the logged ELBO and every evaluation are the true ones.
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor

from zoo.errors import SetupError
from zoo.metrics import NegativeLogLikelihood, PosteriorUsage
from zoo.tasks.likelihood import LikelihoodTask, evaluation_generator

log = logging.getLogger(__name__)


class VAETask(LikelihoodTask):
    """ELBO training and importance-sampled evaluation of a ``zoo.models.StructuredVAE``; arguments
    as ``LikelihoodTask`` (``eval_seeds`` is unused: one seeded estimate per batch), and
    ``kl_warmup_steps`` (module docstring; 0: none)."""

    def __init__(self, *args, kl_warmup_steps: int = 0, **kwargs):
        # a checkpoint's hyperparameters name the task's class (``_class_path``, Lightning's key,
        # ``LikelihoodTask.on_save_checkpoint``); Lightning passes it on to a constructor with **kwargs
        kwargs.pop("_class_path", None)
        super().__init__(*args, **kwargs)
        if not (hasattr(self.model, "elbo") and hasattr(self.model, "importance_estimates")):
            raise TypeError(
                "VAETask trains a model with elbo(batch) and importance_estimates(batch, generator) methods, "
                f"got {type(self.model).__name__}"
            )
        if not isinstance(kl_warmup_steps, int) or isinstance(kl_warmup_steps, bool) or kl_warmup_steps < 0:
            raise ValueError(f"kl_warmup_steps must be an int >= 0, got {kl_warmup_steps!r}")
        self.kl_warmup_steps = kl_warmup_steps
        self.save_hyperparameters({**dict(self.hparams), "kl_warmup_steps": kl_warmup_steps})
        self.sentence_metrics = torch.nn.ModuleDict(
            {
                f"{stage}_{name}": NegativeLogLikelihood()
                for stage in ("val", "test")
                for name in ("nll", "elbo")
            }
        )
        self.posterior_usage = torch.nn.ModuleDict(
            {stage: PosteriorUsage(self.model.num_states) for stage in ("val", "test")}
        )

    def setup(self, stage: str) -> None:
        """Refuse data with a sentence longer than the encoder reads (``_check_positions``); before
        training, fit the decoder's shortlist (``decoder_vocab``) on the training split's token counts
        when the model has one that is not fitted yet."""
        super().setup(stage)
        decoder = self.model.decoder
        data = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        self._check_positions(data)
        if stage != "fit" or decoder.fitted or data is None:
            return
        counts = getattr(data, "token_counts", None)
        if counts is None:
            raise ValueError(
                f"the decoder's shortlist ({decoder.shortlist} words) is not fitted and the data module "
                f"{type(data).__name__} cannot count tokens (no token_counts): use "
                "zoo.data.CaptionsDataModule or call model.decoder.fit_shortlist(counts) first"
            )
        train = counts("train")
        ids = decoder.fit_shortlist(train)
        kept = train[ids].sum() / train.sum()
        log.info("decoder shortlist: %d ids cover %.2f %% of the training tokens", len(ids), 100 * kept)

    def _check_positions(self, data) -> None:
        """A SetupError where a split of ``data`` holds a sentence of more GPT-2 tokens than the encoder
        has positions: it stopped the run at its batch, with a traceback naming neither (max_words
        counts words, not tokens)."""
        limit = self.model.encoder.config.n_positions
        for split, dataset in (getattr(data, "datasets", None) or {}).items():
            lengths = getattr(dataset, "lengths", None)
            if lengths is None or not len(lengths) or int(lengths.max()) <= limit:
                continue
            over = torch.as_tensor(lengths) > limit
            raise SetupError(
                f"{int(over.sum())} of the {len(lengths)} sentences of the {split} split are longer than the "
                f"encoder's {limit} positions (max_positions): the first, sentence {int(over.nonzero()[0])}, "
                f"has {int(lengths[over][0])} GPT-2 tokens with <|endoftext|>; lower the data module's "
                "max_words, or build the model with a larger max_positions"
            )

    def _random_evaluation(self) -> bool:
        return False  # the importance samples are seeded per batch: one reproducible estimate

    def kl_weight(self) -> float:
        """beta of the current training step (module docstring)."""
        if self.kl_warmup_steps == 0:
            return 1.0
        return min(1.0, self.global_step / self.kl_warmup_steps)

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        parts = self.model.elbo(batch)
        events = self.model.num_events(batch)
        beta = self.kl_weight()
        kl_part = parts["states"] + parts["entropy"]  # minus KL(q || p(z)), weighed by beta while warming up
        objective = parts["elbo"] if beta == 1.0 else parts["words"] + beta * kl_part
        loss = -objective.sum() / events.sum()
        B = len(events)
        self._record_step(-objective.sum(), events.sum(), B)
        self.log("train/kl_weight", beta, batch_size=B)
        self.log("train/kl", -kl_part.detach().mean(), batch_size=B)  # KL(q || p(z)) per sentence
        for name, value in parts.items():
            self.log(f"train/{name}", value.detach().mean(), batch_size=B)
        return loss

    def _evaluate(self, batch: dict[str, Tensor], stage: str, batch_idx: int) -> None:
        events = self.model.num_events(batch)
        ones = torch.ones_like(events)
        generator = evaluation_generator(batch_idx, events.device, trainer=self._trainer)
        log_p, elbo = self.model.importance_estimates(batch, generator=generator)
        updates = (
            ("nll", self.metrics[f"{stage}_nll"], log_p, events),
            ("ppl", self.metrics[f"{stage}_ppl"], log_p, events),
            ("nll_sentence", self.sentence_metrics[f"{stage}_nll"], log_p, ones),
            ("neg_elbo_sentence", self.sentence_metrics[f"{stage}_elbo"], elbo, ones),
        )
        for name, metric, values, counts in updates:
            metric.update(values, counts)
            self.log(f"{stage}/{name}", metric, prog_bar=name == "nll_sentence", batch_size=len(events))
        self.posterior_usage[stage].update(*self.model.posterior_summary(batch), batch["lengths"])

    def _log_posterior_usage(self, stage: str) -> None:
        usage = self.posterior_usage[stage]
        if usage.update_called:  # compute() syncs the sums across processes under DDP
            for name, value in usage.compute().items():
                self.log(f"{stage}/{name}", value.float())
        usage.reset()

    def on_validation_epoch_end(self) -> None:
        super().on_validation_epoch_end()
        self._log_posterior_usage("val")

    def on_test_epoch_end(self) -> None:
        super().on_test_epoch_end()
        self._log_posterior_usage("test")
