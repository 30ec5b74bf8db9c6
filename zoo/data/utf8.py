"""Reading the text files users bring: a file that is not UTF-8 is an error naming the file and line."""

from __future__ import annotations

from pathlib import Path


def read_utf8(path: Path) -> str:
    """The text of ``path``; a file that is not UTF-8 is a ValueError naming the file and the line."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line, bad = data[: error.start].count(b"\n") + 1, data[error.start : error.start + 1]
        raise ValueError(
            f"{path} is not UTF-8 text: line {line} (byte {error.start}, {bad!r}) {error.reason}; "
            "re-encode it, e.g. iconv -f latin1 -t utf-8"
        ) from None
