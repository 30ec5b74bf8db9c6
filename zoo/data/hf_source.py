"""Data through Hugging Face ``datasets``: a Hub dataset id, or local text / JSON / parquet files,
loaded (cached, memory-mapped). Text is split into words with a batched ``map`` (cached too); music
and feature sequences are read from their columns.

A source is a dict, as a recipe writes it::

    hf_dataset:
      path: ptb_text_only            # a Hub dataset id, a builder ("text", "json", "parquet", "csv"), or
                                     # the folder a DatasetDict was saved to (save_to_disk)
      name: null                     # the dataset's configuration, if it has several
      revision: null                 # a branch, tag or commit of a Hub dataset
      data_files: null               # the builders' files: {"train": ..., "validation": ..., "test": ...}
      column: sentence               # the data column (below)
      labels: null                   # feature sequences only: a column of per-frame labels
      splits: {train: train, valid: validation, test: test}   # our split -> the dataset's split

Columns by kind (the default name in brackets): text, one sentence a row (``sentence``; ``text`` for
the "text" builder), a string split at whitespace or a list of its words (strings); a null or blank row
is a blank line, read as in text files (left out with a warning; a PCFG's predictions keep its place as
an empty line; in a CSV file only an empty cell is one: "NA" or "null" is a sentence, not pandas'
missing value); music, one piece a row as its frames of MIDI pitches, ``[[60, 64, 67], [], ...]``
(``notes``, the Boulanger-Lewandowski layout); feature sequences, one sequence a row as its frames of
numbers (``features``), with optional per-frame integer labels (-1 unknown) in ``labels``; CrossTask
videos, one a row with ``task``, ``video``, ``features`` and step annotations (``steps``; named by
``labels``), ``zoo.data.crosstask``.
``HF_DATASETS_OFFLINE=1`` reads only the cache (and local files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zoo.data.digest import files_digest
from zoo.data.left_out import BLANK, warn_left_out
from zoo.data.utf8 import nfc, read_utf8
from zoo.errors import SetupError

SPLIT_NAMES = {"train": "train", "valid": "validation", "test": "test"}
INSTALL_HINT = 'pip install "structured-zoo[data]"  (or: pip install datasets)'
KEYS = {"path", "name", "revision", "data_files", "column", "labels", "splits"}


def check_source(source: dict[str, Any], column: str = "sentence") -> dict[str, Any]:
    """The source with its defaults (``column``: the kind's default data column); ValueError naming
    what is wrong."""
    if not isinstance(source, dict) or "path" not in source:
        raise ValueError(
            f"hf_dataset must be a dict with at least 'path' (a Hub id or a builder), got {source!r}"
        )
    unknown = set(source) - KEYS
    if unknown:
        raise ValueError(f"hf_dataset has unknown keys {sorted(unknown)}; it takes {sorted(KEYS)}")
    column = source.get("column") or ("text" if source["path"] == "text" else column)
    splits = {**SPLIT_NAMES, **(source.get("splits") or {})}
    return {**source, "column": column, "splits": splits}


def replacing(hf_dataset: dict[str, Any] | None, name: str, value) -> dict[str, Any] | None:
    """A data module's ``hf_dataset``, checked, where it replaces the path argument ``name`` (given
    both: ValueError)."""
    if hf_dataset is None:
        return None
    check_source(hf_dataset)
    if value is not None:
        unset = " ".join(f"--data.init_args.{n} null" for n in name.split(" / "))
        raise ValueError(
            f"give {name} or hf_dataset, not both (got {value!r} and {hf_dataset!r}); a recipe's {name} is "
            f"unset on the command line with {unset}"
        )
    return hf_dataset


def source_name(source: dict[str, Any]) -> str:
    """A ``datasets`` source by what it is: the Hub dataset id (configuration, revision), or a builder's
    local files by their folder and the sha256 of their contents (files that are not here: their
    folder alone)."""
    path = source.get("path", "?")
    if path not in ("text", "json", "parquet", "csv"):
        name = f"{path}/{source['name']}" if source.get("name") else str(path)
        return f"{name}@{source['revision']}" if source.get("revision") else name
    files = [Path(str(f)) for f in data_file_list(source.get("data_files"))]
    if not files:
        return f"{path} files"
    named = f"{path} files in {files[0].parent.name}"
    if not all(f.is_file() for f in files):
        return named
    return f"{named} (sha256 {files_digest(sorted(set(files)))})"


def data_file_list(files) -> list:
    """Every entry of a ``data_files`` value (a path, a list, or a dict of splits to either)."""
    entries = files.values() if isinstance(files, dict) else [files] if files else []
    return [f for entry in entries for f in (entry if isinstance(entry, list) else [entry])]


def load_split(source: dict[str, Any], split: str, column: str = "sentence") -> tuple[Any, dict[str, Any]]:
    """``split`` ("train", "valid" or "test") of ``source`` as a ``datasets.Dataset`` that has the data
    column (``column``: the kind's default name) and the ``labels`` column if the source names one,
    and the source with its defaults (``check_source``)."""
    try:
        import datasets
    except ImportError as error:
        raise ImportError(f"hf_dataset needs the datasets package: {INSTALL_HINT}") from error
    source = check_source(source, column)
    wanted = source["splits"][split]
    check_not_one_saved_dataset(source["path"])
    try:
        data = datasets.load_dataset(
            source["path"],
            source.get("name"),
            data_files=source.get("data_files"),
            revision=source.get("revision"),
            split=wanted,
            # pandas reads the words NA, null, None, nan, n/a ... as missing values: rows of text lost
            **({"keep_default_na": False} if source["path"] == "csv" else {}),
        )
    except datasets.exceptions.DatasetGenerationError as error:
        check_local_files_are_utf8(source)  # the usual cause with local text: say which file and line
        raise SetupError(generation_failure(source, error)) from error
    except ValueError as error:
        if "Unknown split" not in str(error):
            raise
        raise ValueError(
            f"hf_dataset {source['path']!r} has no split {wanted!r}, which the {split} split reads "
            f"({error}): name the one to read in the hf_dataset dict, e.g. splits: {{{split}: {split}}}"
        ) from None
    for key in ("column", "labels"):
        if source.get(key) is not None and source[key] not in data.column_names:
            raise ValueError(
                f"hf_dataset {source['path']!r} split {wanted!r} has no column {source[key]!r} (its "
                f"columns: {data.column_names}); set hf_dataset.{key}"
            )
    return data, source


def generation_failure(source: dict[str, Any], error: Exception) -> str:
    """What ``datasets`` could not build, from the cause its ``DatasetGenerationError`` wraps (its own
    message is 'An error occurred while generating the dataset')."""
    import pyarrow
    from datasets.table import CastError

    cause = error.__cause__ or error.__context__ or error
    message = f"datasets could not build hf_dataset {source['path']!r} ({type(cause).__name__}: {cause})"
    if isinstance(cause, (pyarrow.ArrowInvalid, pyarrow.ArrowTypeError, CastError)):
        message += (
            ": datasets reads every split's files with one schema, so each column must hold one type in "
            "all of them (numbers in one file and text in another fail)"
        )
    return message


def check_not_one_saved_dataset(path) -> None:
    """A folder that ``save_to_disk`` wrote from one ``Dataset`` has no splits to read: ValueError saying
    what to save instead (a ``DatasetDict``'s folder, with its splits, is read like a Hub dataset)."""
    folder = Path(str(path)).expanduser()
    if (folder / "state.json").is_file() and not (folder / "dataset_dict.json").is_file():
        raise ValueError(
            f"hf_dataset path {str(path)!r} is one Dataset saved with save_to_disk: it has no train / "
            "validation / test splits. Save a DatasetDict instead, DatasetDict(train=..., validation=..., "
            "test=...).save_to_disk(folder), whose folder hf_dataset reads (path: the folder)"
        )


def check_local_files_are_utf8(source: dict[str, Any]) -> None:
    """ValueError naming the file and line of the first local ``data_files`` entry of a text builder
    ("text", "json", "csv") that is not UTF-8 (``zoo.data.utf8``)."""
    if source["path"] not in ("text", "json", "csv"):
        return
    for name in data_file_list(source.get("data_files")):
        if Path(str(name)).is_file():
            read_utf8(Path(str(name)))


def row_words(cell, where: str) -> list[str]:
    """The words of one text cell: a string split at whitespace, as a line of a text file; a list of
    strings (a column of already-split words) as the line they join into; a null as a blank line.
    ValueError naming ``where`` (the split and row) for anything else."""
    if cell is None:
        return []
    if isinstance(cell, list) and all(isinstance(word, str) for word in cell):
        cell = " ".join(cell)
    if not isinstance(cell, str):
        raise ValueError(
            f"{where}: expected a line of text (a string) or its words (a list of strings), got "
            f"{type(cell).__name__} {str(cell)[:80]}"
        )
    return nfc(cell.removeprefix("\ufeff")).split()  # a byte-order mark: datasets' text reader keeps it


def _words(source: dict[str, Any], split: str):
    """The batched ``map`` function of ``split``'s rows (their indices given) to their words."""
    column = source["column"]

    def words(rows: dict, indices: list[int]) -> list[list[str]]:
        where = f"hf_dataset {split} row {{}}, column {column!r}"
        return [row_words(cell, where.format(i)) for cell, i in zip(rows[column], indices)]

    return words


def load_sentences(source: dict[str, Any], split: str, keep_blank: bool = False) -> list[list[str]]:
    """The words of each row of ``split`` ("train", "valid" or "test") of ``source`` (``row_words``),
    blank rows left out with a warning (``keep_blank``: kept as empty lists, for row numbers)."""
    data, source = load_split(source, split)
    words = _words(source, split)
    mapped = data.map(
        lambda rows, indices: {"words": words(rows, indices)},
        batched=True,
        with_indices=True,
        remove_columns=data.column_names,
        desc=f"words of {split}",
    )
    sentences = list(mapped["words"])
    if keep_blank:
        return sentences
    blank = [i for i, w in enumerate(sentences) if not w]
    warn_left_out(f"hf_dataset {split} split", blank, len(sentences), "row", BLANK)
    return [w for w in sentences if w]


def load_row_token_ids(source: dict[str, Any], split: str, encode) -> tuple[list[list[int]], list[bool]]:
    """The token ids of every row of ``split`` of ``source`` (rows numbered from 0, as ``datasets``
    numbers them) and which rows are blank: ``encode(words)`` of each non-blank row (a picklable callable,
    e.g. ``functools.partial(vocab.encode, add_eos=True)``; an empty list refuses the row), [] for a blank
    one, in a batched ``map`` cached by ``datasets`` under the fingerprint of the data and of ``encode``
    (its vocabulary included)."""
    data, source = load_split(source, split)
    words = _words(source, split)

    def encoded(rows: dict, indices: list[int]) -> dict[str, list]:
        sentences = words(rows, indices)
        return {"ids": [encode(w) if w else [] for w in sentences], "blank": [not w for w in sentences]}

    ids = data.map(
        encoded, batched=True, with_indices=True, remove_columns=data.column_names,
        desc=f"token ids of {split}",
    )  # fmt: skip
    if "ids" not in ids.column_names:  # no rows
        return [], []
    return list(ids["ids"]), list(ids["blank"])


def load_token_ids(source: dict[str, Any], split: str, encode) -> list[list[int]]:
    """The token ids of the rows of ``split`` of ``source`` that are neither blank nor refused by
    ``encode`` (``load_row_token_ids``; ``load_sentences`` says what is blank)."""
    return [row for row in load_row_token_ids(source, split, encode)[0] if row]


def load_pieces(source: dict[str, Any], split: str) -> list[list[list[int]]]:
    """The pieces of ``split`` of a music ``source``: each a list of frames of MIDI pitches."""
    data, source = load_split(source, split, "notes")
    return list(data[source["column"]])


def load_feature_sequences(source: dict[str, Any], split: str) -> tuple[list, list | None]:
    """The sequences of ``split`` of a feature ``source`` (each a list of frames of numbers) and their
    per-frame labels (None when the source names no ``labels`` column)."""
    data, source = load_split(source, split, "features")
    labels = source.get("labels")
    return list(data[source["column"]]), (list(data[labels]) if labels is not None else None)
