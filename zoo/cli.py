"""The ``zoo`` command.

* ``zoo fit | validate | test | predict``: Lightning's CLI (``LightningCLI``) over any zoo task and
  data module, configured by composable YAML recipes::

      zoo fit --config recipes/hmm/ptb-rank-space-small.yaml --config recipes/trainer/ddp.yaml \\
          --trainer.devices 8
      zoo fit --config recipe.yaml --print_config

* ``zoo capabilities``: the engine's structure x backend x operation table (Markdown).
"""

from __future__ import annotations

import argparse
import sys

LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")
ZOO_COMMANDS = ("capabilities",)


def zoo_command(argv: list[str]) -> int:
    """The zoo's own subcommands (argparse)."""
    parser = argparse.ArgumentParser(
        prog="zoo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("capabilities", help="print the structure x backend x operation table (Markdown)")
    for name in LIGHTNING_COMMANDS:
        sub.add_parser(name, help=f"Lightning's {name} (see zoo {name} --help)")
    args = parser.parse_args(argv)
    if args.command == "capabilities":
        from zoo.inference.capabilities import capability_table

        print(capability_table())
    return 0


def lightning_command(argv: list[str] | None) -> int:
    """``fit``, ``validate``, ``test`` or ``predict`` through LightningCLI (None: from sys.argv)."""
    import lightning.pytorch as pl
    from lightning.pytorch.cli import LightningCLI

    LightningCLI(
        pl.LightningModule,
        pl.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        args=argv,
        save_config_kwargs={"overwrite": True},
        auto_configure_optimizers=False,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    if words and words[0] in LIGHTNING_COMMANDS:
        return lightning_command(None if argv is None else words)
    return zoo_command(words)


if __name__ == "__main__":
    raise SystemExit(main())
