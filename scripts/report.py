"""Write one script's report into its own marked section of a shared Markdown page; store the run
outputs a report is rendered from.

Several benchmark scripts share ``docs/benchmarks.md``; each owns the block between
``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` and rewrites only that block (appending it the
first time), so one script's run never erases another's. The results scripts keep their runs'
outputs in ``docs/data/*.json`` (``store_output``) and render their sections from those files.
"""

from __future__ import annotations

import fcntl
import json
import re
from pathlib import Path


def store_output(path: Path, key: str, output: dict) -> None:
    """Set ``key`` of the JSON object in ``path`` to ``output`` (the file locked while it is rewritten:
    several runs in separate processes may share it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        file.seek(0)
        text = file.read()
        stored = json.loads(text) if text.strip() else {}
        stored[key] = output
        file.seek(0)
        file.truncate()
        file.write(json.dumps(stored, indent=1, sort_keys=True) + "\n")


def write_section(page: Path, name: str, text: str, title: str = "# Benchmarks") -> None:
    """Replace (or append) the ``name`` block of ``page`` with ``text``."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{text.strip()}\n{end}"
    old = page.read_text() if page.exists() else f"{title}\n"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    new = pattern.sub(lambda _: block, old) if pattern.search(old) else old.rstrip() + "\n\n" + block
    page.write_text(new + "\n" if not new.endswith("\n") else new)
