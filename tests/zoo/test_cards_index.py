"""cards/README.md lists every bundled checkpoint with a link to its card, and is current."""

from __future__ import annotations

import re
from pathlib import Path

from zoo.hub.bundled import bundled_folders
from zoo.hub.cards import bundled_cards_index

REPO = Path(__file__).resolve().parents[2]
INDEX = REPO / "cards" / "README.md"


def test_the_cards_index_is_current_and_every_link_is_a_card():
    assert INDEX.read_text() == bundled_cards_index(), "run: python scripts/cards_index.py"
    links = re.findall(r"\[card\]\(\.\./(zoo/weights/([^/]+)/README\.md)\)", INDEX.read_text())
    assert sorted(tag for _, tag in links) == sorted(bundled_folders())
    assert all((REPO / path).is_file() for path, _ in links)


def test_every_bundled_card_is_what_the_card_code_renders_now():
    from zoo.hub.pretrained import render_folder_card

    for tag, folder in bundled_folders().items():
        assert (folder / "README.md").read_text() == str(render_folder_card(folder)), (
            f"{tag}: run zoo card zoo/weights/{tag}"
        )
