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
from pathlib import Path

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


def zoo_cli_class():
    """``LightningCLI`` reading a zoo checkpoint's task and hyperparameters for ``--ckpt_path``."""
    import torch
    from lightning.pytorch.cli import LightningCLI

    class ZooCLI(LightningCLI):
        def _parse_ckpt_path(self) -> None:
            """Zoo tasks store their class path (``zoo_task``) beside their plain-value
            hyperparameters, so ``zoo validate --ckpt_path x.ckpt`` needs no model config."""
            subcommand = self.config.get("subcommand")
            path = self.config[subcommand].get("ckpt_path") if subcommand else None
            if not path or not Path(path).is_file():
                return super()._parse_ckpt_path()
            checkpoint = torch.load(path, weights_only=True, map_location="cpu")
            task, hparams = checkpoint.get("zoo_task"), checkpoint.get("hyper_parameters")
            if not task or not hparams:
                return super()._parse_ckpt_path()
            model = {"class_path": task, "init_args": hparams}
            self.config = self.parser.parse_object({subcommand: {"model": model}}, self.config)

    return ZooCLI


def lightning_command(argv: list[str] | None) -> int:
    """``fit``, ``validate``, ``test`` or ``predict`` through LightningCLI (None: from sys.argv)."""
    import lightning.pytorch as pl

    zoo_cli_class()(
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
