"""Write one script's report into its own marked section of a shared Markdown page.

Several benchmark scripts share ``docs/benchmarks.md``; each owns the block between
``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` and rewrites only that block (appending it the
first time), so one script's run never erases another's.
"""

from __future__ import annotations

import re
from pathlib import Path


def write_section(page: Path, name: str, text: str, title: str = "# Benchmarks") -> None:
    """Replace (or append) the ``name`` block of ``page`` with ``text``."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{text.strip()}\n{end}"
    old = page.read_text() if page.exists() else f"{title}\n"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    new = pattern.sub(lambda _: block, old) if pattern.search(old) else old.rstrip() + "\n\n" + block
    page.write_text(new + "\n" if not new.endswith("\n") else new)
