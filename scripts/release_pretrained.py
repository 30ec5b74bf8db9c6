"""Push every bundled pretrained checkpoint (zoo/weights/) with its card to a Hub organisation.

Each ``arch.tag`` goes to ``ORG/arch.tag`` (a valid Hub repo name: letters, digits, ``_``, ``-``
and single dots), one commit per repo through
``zoo.hub.pretrained.push_to_hub`` (the checkpoint is loaded first; the card is rendered for the repo id).
Prints ``tag repo_id commit-sha`` per checkpoint: the revision to pin in ``register_pretrained``.

    python scripts/release_pretrained.py --org structured-zoo --token hf_...
    HF_ENDPOINT=http://127.0.0.1:PORT python scripts/release_pretrained.py --org me --tags 'hmm_*'
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zoo.hub.bundled import bundled_folders  # noqa: E402
from zoo.hub.pretrained import push_to_hub  # noqa: E402


def release(org: str, token: str | None = None, patterns: list[str] | None = None, private: bool = False):
    """Push the bundled checkpoints whose tags match ``patterns`` (fnmatch; default all) to ``org``;
    returns ``[(tag, repo_id, commit sha)]``."""
    folders = {
        tag: folder
        for tag, folder in bundled_folders().items()
        if not patterns or any(fnmatch.fnmatchcase(tag, p) for p in patterns)
    }
    if not folders:
        raise SystemExit(f"no bundled checkpoint matches {patterns}; bundled: {sorted(bundled_folders())}")
    pushed = []
    for tag, folder in folders.items():
        repo_id = f"{org}/{tag}"
        commit = push_to_hub(folder, repo_id, token=token, private=private or None)
        pushed.append((tag, repo_id, commit.oid))
        print(tag, repo_id, commit.oid, flush=True)
    return pushed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--org", required=True, help="the Hub organisation (or user) to push to")
    parser.add_argument("--token", help="a Hub token with write access (default: the logged-in one)")
    parser.add_argument("--tags", nargs="+", help="fnmatch patterns of tags (default: every bundled one)")
    parser.add_argument("--private", action="store_true")
    args = parser.parse_args()
    release(args.org, args.token, args.tags, args.private)


if __name__ == "__main__":
    main()
