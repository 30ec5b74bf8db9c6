"""Data: readers and preprocessing (no lightning here)."""

from zoo.data.trees import (
    REMOVED_TAGS,
    ParsedSentence,
    Tree,
    base_label,
    collapse_unary,
    normalize_word,
    parse_bracketed,
    preprocess,
    preprocess_trees,
    read_bracketed,
    read_mrg,
    remove_tags,
    spans_to_tensor,
)

__all__ = [
    "REMOVED_TAGS",
    "ParsedSentence",
    "Tree",
    "base_label",
    "collapse_unary",
    "normalize_word",
    "parse_bracketed",
    "preprocess",
    "preprocess_trees",
    "read_bracketed",
    "read_mrg",
    "remove_tags",
    "spans_to_tensor",
]
