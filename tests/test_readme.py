"""The README's generated table is current (its examples run in test_docs_examples.py)."""

import re
from pathlib import Path

from zoo.inference.capabilities import capability_table

README = Path(__file__).resolve().parent.parent / "README.md"


def test_capability_table_is_current():
    text = README.read_text()
    block = re.search(r"<!-- capabilities:start -->\n(.*?)<!-- capabilities:end -->", text, re.S)
    assert block.group(1) == capability_table() + "\n", "run: python scripts/readme_tables.py"

