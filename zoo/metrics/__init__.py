"""Evaluation metrics (torchmetrics ``Metric``s, DDP-safe)."""

from zoo.metrics.likelihood import NegativeLogLikelihood, Perplexity
from zoo.metrics.parsing import CorpusF1, SentenceF1, span_sets

__all__ = ["CorpusF1", "NegativeLogLikelihood", "Perplexity", "SentenceF1", "span_sets"]
