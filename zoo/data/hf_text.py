"""Word-level text through Hugging Face ``datasets``: a Hub dataset id, or local text / JSON / parquet
files, loaded (cached, memory-mapped) and split into words with a batched ``map`` (cached too).

A source is a dict, as a recipe writes it::

    hf_dataset:
      path: ptb_text_only            # a Hub dataset id, or a builder: "text", "json", "parquet", "csv"
      name: null                     # the dataset's configuration, if it has several
      revision: null                 # a branch, tag or commit of a Hub dataset
      data_files: null               # the builders' files: {"train": ..., "validation": ..., "test": ...}
      column: sentence               # the text column ("text" for the "text" builder)
      splits: {train: train, valid: validation, test: test}   # our split -> the dataset's split

``HF_DATASETS_OFFLINE=1`` reads only the cache (and local files).
"""

from __future__ import annotations

from typing import Any

SPLIT_NAMES = {"train": "train", "valid": "validation", "test": "test"}
INSTALL_HINT = 'pip install "structured-zoo[data]"  (or: pip install datasets)'
KEYS = {"path", "name", "revision", "data_files", "column", "splits"}


def check_source(source: dict[str, Any]) -> dict[str, Any]:
    """The source with its defaults; ValueError naming what is wrong."""
    if not isinstance(source, dict) or "path" not in source:
        raise ValueError(
            f"hf_dataset must be a dict with at least 'path' (a Hub id or a builder), got {source!r}"
        )
    unknown = set(source) - KEYS
    if unknown:
        raise ValueError(f"hf_dataset has unknown keys {sorted(unknown)}; it takes {sorted(KEYS)}")
    column = source.get("column") or ("text" if source["path"] == "text" else "sentence")
    splits = {**SPLIT_NAMES, **(source.get("splits") or {})}
    return {**source, "column": column, "splits": splits}


def replacing(hf_dataset: dict[str, Any] | None, name: str, value) -> dict[str, Any] | None:
    """A data module's ``hf_dataset``, checked, where it replaces the path argument ``name`` (given
    both: ValueError)."""
    if hf_dataset is None:
        return None
    check_source(hf_dataset)
    if value is not None:
        raise ValueError(f"give {name} or hf_dataset, not both (got {value!r} and {hf_dataset!r})")
    return hf_dataset


def load_sentences(source: dict[str, Any], split: str) -> list[list[str]]:
    """The words of each non-blank line of ``split`` ("train", "valid" or "test") of ``source``."""
    try:
        import datasets
    except ImportError as error:
        raise ImportError(f"hf_dataset needs the datasets package: {INSTALL_HINT}") from error
    source = check_source(source)
    wanted = source["splits"][split]
    data = datasets.load_dataset(
        source["path"],
        source.get("name"),
        data_files=source.get("data_files"),
        revision=source.get("revision"),
        split=wanted,
    )
    column = source["column"]
    if column not in data.column_names:
        raise ValueError(
            f"hf_dataset {source['path']!r} split {wanted!r} has no column {column!r} (its columns: "
            f"{data.column_names}); set hf_dataset.column"
        )
    words = data.map(
        lambda rows: {"words": [line.split() for line in rows[column]]},
        batched=True,
        remove_columns=data.column_names,
        desc=f"words of {split}",
    )
    return [w for w in words["words"] if w]
