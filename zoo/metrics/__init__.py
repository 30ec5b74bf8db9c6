"""Evaluation metrics (torchmetrics ``Metric``s, DDP-safe)."""

from zoo.metrics.likelihood import NegativeLogLikelihood, Perplexity
from zoo.metrics.parsing import CorpusF1, SentenceF1, span_sets
from zoo.metrics.posterior import PosteriorUsage
from zoo.metrics.segmentation import BoundaryF1, MatchedFrameAccuracy, SegmentRatio

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
