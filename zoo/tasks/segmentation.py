"""``SegmentationTask``: a ``LikelihoodTask`` for HSMMs over feature sequences (``zoo.models.GaussianHSMM``):
unsupervised segmentation of video, audio or sensor features.

On top of maximum likelihood (loss -sum log p(x) / sum frames; ``val/nll`` in nats per frame) it adds

* ``val/nll_sequence`` (and ``test/...``): nats per sequence, the papers' "NLL per video" (of an exact
  evaluation: a random one logs ``val/nll`` and ``val/nll_std`` over seeds only);
* when evaluation batches carry known segments (``batch["labels"]``, B x T long, -1 unknown; the data
  modules of ``zoo.data`` provide them when they have them): ``val/frame_accuracy``, the frame accuracy
  under the best one-to-one map from the model's labels (states, or rank components for rank-space) to
  the known ones (``zoo.metrics.MatchedFrameAccuracy``, one map for the whole set or per sequence), and
  ``val/boundary_f1``, the model's segment starts matched to the known boundaries within
  ``boundary_tolerance`` frames (``zoo.metrics.BoundaryF1``), and ``val/segment_ratio``, the model's
  segments over the known ones (``zoo.metrics.SegmentRatio``; above 1: over-segmentation); two
  consecutive segments of one label count as two;
* the input projection: when ``zoo fit`` starts with a model whose ``input_projection`` is not fitted yet,
  the data module fits it on its training split (standardization, or whitened PCA to the model's
  ``feature_dim``) and it becomes part of the model's weights (checkpoints carry it);
* ``predict_step``: the best segmentation of each sequence with log p; ``SegmentationWriter`` writes them
  as JSON lines in corpus order.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from zoo.errors import SetupError
from zoo.metrics import BoundaryF1, MatchedFrameAccuracy, NegativeLogLikelihood, SegmentRatio
from zoo.models.base import ZooModel
from zoo.tasks.likelihood import DEFAULT_EVAL_MEMORY, LikelihoodTask
from zoo.tasks.prediction_writer import EpochWriter

__all__ = ["SegmentationTask", "SegmentationWriter", "segments_of"]


def segments_of(segmentation: Tensor, length: int) -> list[list[int]]:
    """[[start, end, label], ...] (end exclusive, in frames) of one sequence's segmentation (T, the
    label at each segment start, -1 elsewhere; docs/semimarkov-api.md)."""
    row = segmentation[:length].tolist()
    starts = [t for t, label in enumerate(row) if label >= 0]
    if not starts or starts[0] != 0:
        raise ValueError(f"a segmentation must start a segment at frame 0, got {row}")
    ends = starts[1:] + [length]
    return [[s, e, int(row[s])] for s, e in zip(starts, ends)]


class SegmentationTask(LikelihoodTask):
    """Maximum likelihood training of an HSMM with segmentation metrics (module docstring).

    Args:
        model: a ``zoo.models.GaussianHSMM`` (or its spec dict); it must have ``segment(batch)``.
        lr, weight_decay, betas, lr_factor, lr_patience, init_from, eval_seeds, max_eval_length,
        max_eval_memory: as
            ``LikelihoodTask``.
        boundary_tolerance: frames between a predicted and a known boundary that still match.
        matching: "corpus" (one label map for the whole evaluation set) or "sequence" (one per sequence).
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
        max_eval_memory: int | str | None = DEFAULT_EVAL_MEMORY,
        boundary_tolerance: int = 2,
        matching: str = "corpus",
    ):
        super().__init__(
            model,
            lr=lr,
            weight_decay=weight_decay,
            betas=betas,
            lr_factor=lr_factor,
            lr_patience=lr_patience,
            init_from=init_from,
            eval_seeds=eval_seeds,
            max_eval_length=max_eval_length,
            max_eval_memory=max_eval_memory,
        )
        if not callable(getattr(self.model, "segment", None)):
            raise TypeError(
                f"SegmentationTask needs a model with segment(batch) (zoo.models.GaussianHSMM), got "
                f"{type(self.model).__name__}"
            )
        BoundaryF1(boundary_tolerance)  # validates the arguments now, not at the first validation
        MatchedFrameAccuracy(1, 1, matching)
        self.save_hyperparameters(
            {**dict(self.hparams), "boundary_tolerance": boundary_tolerance, "matching": matching}
        )
        self.sequence_nll = torch.nn.ModuleDict({stage: NegativeLogLikelihood() for stage in ("val", "test")})
        self.segmentation_metrics: torch.nn.ModuleDict | None = None
        self.init_from = init_from  # the pretrained weights' source: they fix the feature size

    def _data(self):
        return getattr(self.trainer, "datamodule", None) if self._trainer is not None else None

    def setup(self, stage: str) -> None:
        """Check the data's feature size, fit the input projection before training, and build the
        segmentation metrics for the data's known labels."""
        super().setup(stage)
        data = self._data()
        if data is None:
            return
        model = self.model
        projected = getattr(model, "input_projection", None) is not None
        wanted = model.input_dim if projected else model.feature_dim
        given = getattr(data, "input_dim", None)
        if given is not None and given != wanted:
            key = "input_dim" if projected else "feature_dim"
            setting = f"model.init_args.model.init_args.{key}: {given}"
            advice = f"set {setting} in the recipe"
            if self.init_from is not None:  # its weights fix the width: no setting changes it
                advice = (
                    f"the pretrained model of init_from={self.init_from!r} takes {wanted}-dim "
                    f"features, so give it those, or train from scratch (without init_from) with {setting}"
                )
            raise SetupError(  # zoo fit: one line, not a traceback
                f"the data have {given} features per frame but the model expects {wanted} ({key}): {advice}"
            )
        if stage == "fit" and projected and not model.input_projection.fitted:
            fit = getattr(data, "fit_feature_transform", None)
            if fit is None:
                raise ValueError(
                    f"the model's input projection ({model.input_dim} -> {model.feature_dim}) is not fitted "
                    f"and the data module {type(data).__name__} cannot fit one (no fit_feature_transform): "
                    "use a zoo.data segmentation data module or set model.input_projection first"
                )
            each = {"per_sequence": True} if model.input_projection.per_sequence else {}
            model.input_projection.set(*fit(model.feature_dim, **each))
        num_classes = getattr(data, "num_classes", None)
        if num_classes:
            h = self.hparams
            self.segmentation_metrics = torch.nn.ModuleDict(
                {
                    f"{s}_{name}": metric
                    for s in ("val", "test")
                    for name, metric in (
                        ("frame_accuracy", MatchedFrameAccuracy(model.num_labels, num_classes, h.matching)),
                        ("boundary_f1", BoundaryF1(h.boundary_tolerance)),
                        ("segment_ratio", SegmentRatio()),
                    )
                }
            ).to(self.device)

    def _evaluate(self, batch: dict[str, Tensor], stage: str, batch_idx: int) -> None:
        if self._random_evaluation():  # mean and spread over seeds of the per-frame NLL
            super()._evaluate(batch, stage, batch_idx)
        else:
            log_p = self(batch)
            frames = self.model.num_events(batch)
            for name, metric, events in (
                ("nll", self.metrics[f"{stage}_nll"], frames),
                ("nll_sequence", self.sequence_nll[stage], torch.ones_like(frames)),
            ):
                metric.update(log_p, events)
                self.log(f"{stage}/{name}", metric, batch_size=len(log_p))
        labels = batch.get("labels")
        if self.segmentation_metrics is None or labels is None or not bool((labels >= 0).any()):
            return
        segmentation, predicted = self.model.segment(batch)
        for name in ("frame_accuracy", "boundary_f1", "segment_ratio"):
            metric = self.segmentation_metrics[f"{stage}_{name}"]
            starts = {} if name == "frame_accuracy" else {"starts": segmentation}  # the model's own cuts
            metric.update(predicted, labels, batch["lengths"], **starts)
            self.log(f"{stage}/{name}", metric, prog_bar=name == "frame_accuracy", batch_size=len(labels))

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Any]:
        """log p and frames of each sequence, its segmentation (B x T, label at segment starts) and
        per-frame labels (B x T, -1 past the length), and ``index`` (position in the split)."""
        out = super().predict_step(batch, batch_idx)
        segmentation, frame_labels = self.model.segment(batch)
        out.update(segmentation=segmentation, frame_labels=frame_labels, lengths=batch["lengths"])
        return out


class SegmentationWriter(EpochWriter):
    """Writes ``SegmentationTask.predict_step``'s segmentations to ``output_path`` as JSON lines, one
    sequence a line in corpus order: ``{"index", "name", "frames", "log_likelihood", "segments":
    [[start, end, label], ...]}`` (the model's segments, in frames, end exclusive; consecutive segments
    may share a label; labels are the model's states, or rank components for rank-space; ``name`` from
    the data module's ``predict_names()`` when it has one).

    Args:
        output_path: the file to write (its directory is created).
        overwrite: replace an existing file at ``output_path`` (default: refused before anything is
            predicted).
    """

    def write(self, trainer, batches: list[dict]) -> None:
        names = self.from_data(trainer, "predict_names")
        rows = []
        for out in batches:
            for b, length in enumerate(out["lengths"].tolist()):
                index = int(out["index"][b]) if "index" in out else len(rows)
                rows.append(
                    {
                        "index": index,
                        "name": names[index] if names is not None else str(index),
                        "frames": length,
                        "log_likelihood": float(out["log_likelihood"][b]),
                        "segments": segments_of(out["segmentation"][b], length),
                    }
                )
        self.warn_unpredicted(trainer, (row["index"] for row in rows))
        self.write_json_lines(rows)
