"""Regenerate the generated parts of README.md (the capability table) from the code.

Usage: python scripts/readme_tables.py          # rewrite README.md in place
       python scripts/readme_tables.py --check  # exit 1 if README.md is out of date
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from zoo.inference.capabilities import capability_table

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"(<!-- capabilities:start -->\n).*?(<!-- capabilities:end -->)", re.S)


def render(text: str) -> str:
    """README text with the capability block replaced by the current table."""
    if not BLOCK.search(text):
        raise SystemExit("README.md has no <!-- capabilities:start/end --> block")
    return BLOCK.sub(lambda m: m.group(1) + capability_table() + "\n" + m.group(2), text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = README.read_text()
    new = render(text)
    if args.check:
        if new != text:
            print("README.md capability table is out of date: run python scripts/readme_tables.py")
            return 1
        return 0
    README.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
