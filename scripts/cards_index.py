"""Regenerate cards/README.md (``zoo.hub.cards.bundled_cards_index``): where the released checkpoints'
model cards live, how they are made, and one row a checkpoint linking its card.

Usage: python scripts/cards_index.py          # rewrite cards/README.md
       python scripts/cards_index.py --check  # exit 1 if it is out of date (tests/zoo/test_cards_index.py)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from zoo.hub.cards import bundled_cards_index

INDEX = Path(__file__).resolve().parent.parent / "cards" / "README.md"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = bundled_cards_index()
    if args.check:
        if not INDEX.is_file() or INDEX.read_text() != text:
            print("cards/README.md is out of date: run python scripts/cards_index.py")
            return 1
        return 0
    INDEX.parent.mkdir(exist_ok=True)
    INDEX.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
