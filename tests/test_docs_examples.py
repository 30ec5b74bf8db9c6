"""Every Python example in the README and docs/ runs as written.

The blocks of one file run in order in one namespace (a later block may use an earlier one's imports),
in a fresh working directory. A block that cannot run here says why on the line before its fence:
`<!-- not run: reason -->` (a call signature, a placeholder Hub repo).
"""

import re
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^(?:<!-- not run: (?P<reason>.*?) -->\n)?```python\n(?P<code>.*?)^```", re.S | re.M)


def python_blocks(path: Path) -> list[tuple[int, str, str | None]]:
    """(line number, code, reason it is not run or None) of each ```python block of a Markdown file."""
    text = path.read_text()
    blocks = []
    for match in BLOCK.finditer(text):
        line = text.count("\n", 0, match.start("code"))
        blocks.append((line, match.group("code"), match.group("reason")))
    return blocks


DOCS_WITH_EXAMPLES = [path for path in DOCS if python_blocks(path)]


def test_every_doc_with_examples_is_collected():
    names = {path.name for path in DOCS_WITH_EXAMPLES}
    assert {"README.md", "chain-api.md", "semimarkov-api.md", "vae.md", "zoo-api.md"} <= names


@pytest.mark.parametrize("path", DOCS_WITH_EXAMPLES, ids=lambda path: path.name)
def test_examples_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples may save into the working directory
    torch.manual_seed(0)
    namespace: dict = {}
    for line, code, reason in python_blocks(path):
        if reason is not None:
            assert reason.strip(), f"{path.name}:{line}: say why the block is not run"
            continue
        # blank lines keep the traceback's line numbers those of the Markdown file
        exec(compile("\n" * line + code, str(path), "exec"), namespace)


def test_a_block_marked_not_run_is_skipped_and_others_run(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "text\n```python\nx = 1\n```\n<!-- not run: a signature -->\n```python\nf(a, b)\n```\n"
        "```python\nassert x == 1\n```\n"
    )
    assert python_blocks(doc) == [
        (2, "x = 1\n", None),
        (6, "f(a, b)\n", "a signature"),
        (9, "assert x == 1\n", None),
    ]
