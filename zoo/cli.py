"""The ``zoo`` command.

* ``zoo fit | validate | test | predict``: Lightning's CLI (``LightningCLI``) over any zoo task and
  data module, configured by composable YAML recipes::

      zoo fit --config recipes/hmm/ptb-rank-space-small.yaml --config recipes/trainer/ddp.yaml \\
          --trainer.devices 8
      zoo fit --config recipe.yaml --print_config

* ``zoo capabilities``: the engine's structure x backend x operation table (Markdown).
* ``zoo state-usage CKPT --out usage.png``: the aggregated posterior's state usage of a trained
  structured VAE (Fu et al. 2022, Fig. 2), on the data of its checkpoint.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")
ZOO_COMMANDS = ("capabilities", "state-usage")


def zoo_command(argv: list[str]) -> int:
    """The zoo's own subcommands (argparse)."""
    parser = argparse.ArgumentParser(
        prog="zoo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("capabilities", help="print the structure x backend x operation table (Markdown)")
    usage = sub.add_parser(
        "state-usage",
        help="plot a structured VAE's aggregated posterior state usage (a PNG) from a checkpoint",
    )
    usage.add_argument("checkpoint", help="a zoo fit checkpoint (.ckpt) of a VAETask")
    usage.add_argument("--out", required=True, help="the image to write (e.g. usage.png)")
    usage.add_argument("--split", default="train", choices=("train", "valid", "test"))
    usage.add_argument("--max-batches", type=int, default=None, help="stop after this many batches")
    usage.add_argument("--seed", type=int, default=0, help="seed of the posterior samples")
    for name in LIGHTNING_COMMANDS:
        sub.add_parser(name, help=f"Lightning's {name} (see zoo {name} --help)")
    args = parser.parse_args(argv)
    if args.command == "capabilities":
        from zoo.inference.capabilities import capability_table

        print(capability_table())
    elif args.command == "state-usage":
        state_usage_command(args.checkpoint, args.out, args.split, args.max_batches, args.seed)
    return 0


def state_usage_command(checkpoint: str, out: str, split: str, max_batches: int | None, seed: int) -> None:
    """Rebuild the task and its data module from ``checkpoint``, count and plot the state usage."""
    import importlib

    import torch

    from zoo.models.vae import aggregated_state_usage, plot_state_usage

    if not Path(checkpoint).is_file():
        raise SystemExit(f"zoo state-usage: no checkpoint at {checkpoint}")
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    task_path, data_args = saved.get("zoo_task"), saved.get("datamodule_hyper_parameters")
    if not task_path or data_args is None:
        raise SystemExit(
            f"zoo state-usage: {checkpoint} is not a zoo fit checkpoint with its data module's settings"
        )
    module, _, name = task_path.rpartition(".")
    task = getattr(importlib.import_module(module), name).load_from_checkpoint(checkpoint, map_location="cpu")
    if not hasattr(task.model, "sample_states"):
        raise SystemExit(f"zoo state-usage: {type(task.model).__name__} has no latent states to count")
    data_class = data_args.get("_class_path", "zoo.data.captions.CaptionsDataModule")
    data_args = {k: v for k, v in data_args.items() if not k.startswith("_")}  # LightningCLI's own keys
    data_module, _, data_name = data_class.rpartition(".")
    data = getattr(importlib.import_module(data_module), data_name)(**data_args)
    data.setup()
    loaders = {"train": data.train_dataloader, "valid": data.val_dataloader, "test": data.test_dataloader}
    loader = loaders[split]()
    counts = aggregated_state_usage(task.model, loader, seed=seed, max_batches=max_batches)
    model = task.model
    plot_state_usage(counts, out, title=f"{model.backend}, N = {model.num_states}, {split}")
    print(f"{out}: {int((counts > 0).sum())} of {len(counts)} states used over {int(counts.sum())} tokens")


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
