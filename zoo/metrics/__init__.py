"""Evaluation metrics (torchmetrics ``Metric``s, DDP-safe)."""

from zoo.extras import require

require("train", "zoo.metrics")
require("plots", "zoo.metrics (the segmentation metrics' matching)")

from zoo.metrics.likelihood import NegativeLogLikelihood, Perplexity  # noqa: E402
from zoo.metrics.parsing import CorpusF1, SentenceF1, span_sets  # noqa: E402
from zoo.metrics.posterior import PosteriorUsage  # noqa: E402
from zoo.metrics.segmentation import BoundaryF1, MatchedFrameAccuracy, SegmentRatio  # noqa: E402

__all__ = [
    "BoundaryF1",
    "CorpusF1",
    "MatchedFrameAccuracy",
    "NegativeLogLikelihood",
    "Perplexity",
    "PosteriorUsage",
    "SegmentRatio",
    "SentenceF1",
    "span_sets",
]
