"""The ``zoo`` command. Subcommands grow with the project; today: the engine's capability table."""

from __future__ import annotations

import argparse

from zoo.inference.capabilities import capability_table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="zoo", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("capabilities", help="print the structure x backend x operation table (Markdown)")
    args = parser.parse_args(argv)
    if args.command == "capabilities":
        print(capability_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
