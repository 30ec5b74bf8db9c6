"""Reading the text files users bring: a file that is not UTF-8 is an error naming the file and line."""

from __future__ import annotations

import codecs
from pathlib import Path


def read_utf8(path: Path) -> str:
    """The text of ``path`` without a leading byte-order mark (Notepad's and Excel's "UTF-8" write one,
    which would stick to the first word); a file that is not UTF-8 is a ValueError naming the file and
    the line."""
    data = path.read_bytes()
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as error:
        at = start + error.start
        line, bad = data[:at].count(b"\n") + 1, data[at : at + 1]
        raise ValueError(
            f"{path} is not UTF-8 text: line {line} (byte {at}, {bad!r}) {error.reason}; "
            "re-encode it, e.g. iconv -f latin1 -t utf-8"
        ) from None
