"""Reading the text files users bring: a file that is not UTF-8 is an error naming the file and line,
its lines end where Python's universal newlines end them, and its text is in Unicode's NFC form."""

from __future__ import annotations

import codecs
import re
import unicodedata
from pathlib import Path

UTF16_MARKS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
NEWLINE = re.compile(r"\r\n|\r|\n")
NEWLINE_BYTES = re.compile(rb"\r\n|\r|\n")
LINE_MARK = re.compile("(\\A|\r\n|\r|\n)\ufeff")  # a byte-order mark that starts a line


def nfc(text: str) -> str:
    """``text`` in Unicode's composed normal form (NFC): "café" typed as "e" and a combining accent (as
    macOS file names and some keyboards make it) is the same word as "café" with "é" (U+00E9), whose
    forms print alike. Look-alikes that are not the same text stay apart: full-width letters, a
    zero-width space or a soft hyphen inside a word."""
    return text if text.isascii() else unicodedata.normalize("NFC", text)


def line_and_column(text: str | bytes, offset: int) -> tuple[int, int]:
    """The line and column (both from 1) of ``text[offset]``, lines ended as ``text_lines`` ends them
    (a file of old Mac line endings, a lone "\r" each, is not one long line)."""
    newline = NEWLINE if isinstance(text, str) else NEWLINE_BYTES
    ends = [m.end() for m in newline.finditer(text, 0, offset)]
    return len(ends) + 1, offset - (ends[-1] if ends else 0) + 1


def read_utf8(path: Path) -> str:
    """The text of ``path`` in NFC form (``nfc``) without a leading byte-order mark (Notepad's and
    Excel's "UTF-8" write one, which would stick to the first word); a file that is not UTF-8 text is a
    ValueError naming the file and the line: one that does not decode, and one with a NUL byte (UTF-16,
    Windows' "Unicode", decodes as UTF-8 when its text is ASCII, a NUL after each letter)."""
    data = path.read_bytes()
    if data.startswith(UTF16_MARKS) or b"\x00" in data:
        at = data.find(b"\x00") if not data.startswith(UTF16_MARKS) else 0
        line, _ = line_and_column(data, at)
        raise ValueError(
            f"{path} is not UTF-8 text: line {line} (byte {at}) "
            + ("starts UTF-16's byte-order mark" if at == 0 else "holds a NUL byte")
            + "; UTF-16 text (Windows' 'Unicode') re-encodes with iconv -f utf-16 -t utf-8"
        )
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return nfc(data[start:].decode("utf-8"))
    except UnicodeDecodeError as error:
        at = start + error.start
        (line, _), bad = line_and_column(data, at), data[at : at + 1]
        raise ValueError(
            f"{path} is not UTF-8 text: line {line} (byte {at}, {bad!r}) {error.reason}; "
            "re-encode it, e.g. iconv -f latin1 -t utf-8 (from Latin-1)"
        ) from None


def without_line_marks(text: str) -> str:
    """``text`` without the byte-order marks that start its lines (see ``text_lines``); tree files are
    parsed whole."""
    return LINE_MARK.sub(r"\1", text)


def text_lines(text: str) -> list[str]:
    """The lines of ``text``, ended by "\\n", "\\r\\n" or a lone "\\r" (old Mac files), as Python's
    universal newlines and ``datasets``' text reader end them; not by the other boundaries that
    ``str.splitlines`` knows (U+0085, U+2028, form feeds), which a line of text may hold. The newline
    that ends the last line starts no empty line. A byte-order mark that starts a line is dropped, as
    the one that starts a file is (``read_utf8``): two files with one, concatenated, hold one inside, and
    ``datasets`` drops it from each row."""
    lines = NEWLINE.split(without_line_marks(text))
    if lines[-1] == "":
        lines.pop()
    return lines
