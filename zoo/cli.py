"""The ``zoo`` command.

* ``zoo fit | validate | test | predict``: Lightning's CLI (``LightningCLI``) over any zoo task and
  data module, configured by composable YAML recipes::

      zoo fit --config recipes/hmm/ptb-rank-space-small.yaml --config recipes/trainer/ddp.yaml \\
          --trainer.devices 8
      zoo fit --config recipe.yaml --print_config

  ``zoo validate | test ... --results results.json`` also writes the metrics for a model card.

* ``zoo capabilities``: the engine's structure x backend x operation table (Markdown).
* ``zoo models [PATTERN] [--pretrained]``: the registered architectures (or pretrained ``arch.tag``).
* ``zoo export CKPT OUT_DIR [--results JSON] [--storage-dtype float16] [--overwrite]``: a ``zoo fit``
  checkpoint as a pretrained-model folder (config.json, model.safetensors, README.md card; the run's
  config.yaml as training_config.yaml); files it would replace in OUT_DIR need ``--overwrite``.
* ``zoo card DIR [--results JSON] [--repo-id ID]``: re-render a folder's model card.
* ``zoo push DIR REPO_ID [--revision BRANCH] [--private] [--token TOKEN]``: upload it to the Hub.
* ``zoo state-usage CKPT --out usage.png``: the aggregated posterior's state usage of a trained
  structured VAE (Fu et al. 2022, Fig. 2), on the data of its checkpoint.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import inspect
import io
import json
import logging
import os
import re
import signal
import sys
import traceback
import warnings
from argparse import ArgumentError
from pathlib import Path

from zoo.errors import SetupError
from zoo.extras import MissingExtraError, imported

LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")
ZOO_COMMANDS = ("capabilities", "models", "export", "card", "push", "state-usage", "plot")


def zoo_command(argv: list[str]) -> int:
    """The zoo's own subcommands (argparse)."""
    parser = argparse.ArgumentParser(
        prog="zoo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("capabilities", help="print the structure x backend x operation table (Markdown)")
    models = sub.add_parser("models", help="list the registered architectures")
    models.add_argument("pattern", nargs="?", help="fnmatch pattern, e.g. 'hmm_*'")
    models.add_argument("--pretrained", action="store_true", help="list pretrained arch.tag names instead")
    export = sub.add_parser(
        "export", help="convert a zoo fit checkpoint (.ckpt) to a pretrained-model folder"
    )
    export.add_argument("checkpoint", help="a .ckpt written by zoo fit")
    export.add_argument("out_dir", help="the folder to write (config.json, model.safetensors, README.md)")
    export.add_argument("--results", help="metrics JSON for the card (zoo validate | test --results FILE)")
    export.add_argument(
        "--training-config", help="the zoo fit config YAML (default: the run's config.yaml, if found)"
    )
    export.add_argument(
        "--storage-dtype",
        help="store the weights in this dtype (e.g. float16: half the file); the model still runs in its own",
    )
    export.add_argument(
        "--max-shard-size",
        help="write weights larger than this (e.g. 15MB) in shards of at most this size (default: one file)",
    )
    export.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the checkpoint files already in OUT_DIR (default: refuse to replace any but an "
        "earlier export's own)",
    )
    card = sub.add_parser("card", help="re-render the model card (README.md) of a pretrained-model folder")
    card.add_argument("directory")
    card.add_argument("--results", help="metrics JSON to record in results.json and show in the card")
    card.add_argument("--repo-id", help="the Hub repo the card's usage examples name")
    push = sub.add_parser("push", help="upload a pretrained-model folder with its card to a Hub repo")
    push.add_argument("directory")
    push.add_argument("repo_id", help="org/name; created if missing (one model per repo)")
    push.add_argument("--revision", help="branch to commit to (created if missing; default: main)")
    push.add_argument("--private", action="store_true", help="create the repo private")
    push.add_argument("--token", help="Hub token (default: HF_TOKEN or the saved login)")
    push.add_argument("--message", help="commit message")
    usage = sub.add_parser(
        "state-usage",
        help="plot a structured VAE's aggregated posterior state usage (a PNG) from a checkpoint",
    )
    usage.add_argument("checkpoint", help="a zoo fit checkpoint (.ckpt) of a VAETask")
    usage.add_argument("--out", required=True, help="the image to write (e.g. usage.png)")
    usage.add_argument("--split", default="train", choices=("train", "valid", "test"))
    usage.add_argument("--max-batches", type=int, default=None, help="stop after this many batches")
    usage.add_argument("--seed", type=int, default=0, help="seed of the posterior samples")
    plot = sub.add_parser("plot", help="draw a zoo fit run's learning curves (metrics.csv) to a PNG")
    plot.add_argument("run_dir", help="the run's folder (or its lightning_logs, a version, a metrics.csv)")
    plot.add_argument("--out", help="the image to write (default: learning_curves.png beside metrics.csv)")
    plot.add_argument("--title", help="the figure's title (default: the run's version folder)")
    for name in LIGHTNING_COMMANDS:
        sub.add_parser(name, help=f"Lightning's {name} (see zoo {name} --help)")
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the subcommand's usage, not zoo's
        sub.choices[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return ZOO_HANDLERS[args.command](args)
    except BrokenPipeError:
        raise
    except (ValueError, OSError) as error:  # bad input, CheckpointError, Hub HTTP errors: a message
        print(f"zoo {args.command}: error: {error}", file=sys.stderr)
        return 2


def _capabilities(args) -> int:
    from zoo.inference.capabilities import capability_table

    print(capability_table())
    return 0


def _models(args) -> int:
    from zoo.hub.bundled import WEIGHTS
    from zoo.hub.registry import architecture, list_models, pretrained_tag

    names = list_models(args.pattern, pretrained=args.pretrained)
    if not names:
        what = "pretrained model" if args.pretrained else "architecture"
        listing = "zoo models --pretrained" if args.pretrained else "zoo models"
        raise ValueError(f"no {what} matches {args.pattern!r} ({listing} lists them)")
    for name in names:
        if args.pretrained:
            tag = pretrained_tag(name)
            folder = Path(tag.source).expanduser()
            if folder.is_dir():  # inside the package: "bundled"; a folder of the user's: its path
                where = "bundled" if folder.resolve().is_relative_to(WEIGHTS) else str(folder)
            else:
                where = f"{tag.source}@{tag.revision or 'main'}"
            print(f"{name}\t{where}\t{tag.description}")
        else:
            arch = architecture(name)
            backends = ", ".join(arch.backends)
            print(f"{name}\t{arch.class_path.rsplit('.', 1)[-1]}\t[{backends}]\t{arch.description}")
    return 0


def _export(args) -> int:
    from zoo.hub.export import export_checkpoint

    folder = export_checkpoint(
        args.checkpoint, args.out_dir, args.results, args.training_config, storage_dtype=args.storage_dtype,
        max_shard_size=args.max_shard_size, overwrite=args.overwrite,
    )  # fmt: skip
    print(f"wrote {folder} ({', '.join(sorted(p.name for p in folder.iterdir()))})")
    return 0


def _card(args) -> int:
    from zoo.hub.pretrained import read_config, save_results, write_card

    read_config(args.directory)
    if args.results:
        save_results(args.directory, args.results)
    print(f"wrote {write_card(args.directory, repo_id=args.repo_id)}")
    return 0


def _push(args) -> int:
    from zoo.hub.pretrained import push_to_hub

    commit = push_to_hub(
        args.directory,
        args.repo_id,
        revision=args.revision,
        private=args.private or None,
        token=args.token,
        commit_message=args.message,
    )
    print(f"pushed {args.directory} to {args.repo_id}: commit {commit.oid} ({commit.commit_url})")
    return 0


def _state_usage(args) -> int:
    state_usage_command(args.checkpoint, args.out, args.split, args.max_batches, args.seed)
    return 0


def _plot(args) -> int:
    from zoo.plot import plot_learning_curves

    print(f"wrote {plot_learning_curves(args.run_dir, args.out, args.title)}")
    return 0


ZOO_HANDLERS = {
    "capabilities": _capabilities,
    "models": _models,
    "export": _export,
    "card": _card,
    "push": _push,
    "state-usage": _state_usage,
    "plot": _plot,
}


def state_usage_command(checkpoint: str, out: str, split: str, max_batches: int | None, seed: int) -> None:
    """Rebuild the task and its data module from ``checkpoint``, count and plot the state usage."""
    import importlib

    import torch

    from zoo.models.vae import aggregated_state_usage, plot_state_usage

    if not Path(checkpoint).is_file():
        raise ValueError(f"no checkpoint at {checkpoint}")
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    task_path, data_args = saved.get("zoo_task"), saved.get("datamodule_hyper_parameters")
    if not task_path or data_args is None:
        raise ValueError(f"{checkpoint} is not a zoo fit checkpoint with its data module's settings")
    module, _, name = task_path.rpartition(".")
    task = getattr(importlib.import_module(module), name).load_from_checkpoint(checkpoint, map_location="cpu")
    if not hasattr(task.model, "sample_states"):
        raise ValueError(f"{type(task.model).__name__} has no latent states to count")
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


def model_flags(argv: list[str]) -> dict[str, object]:
    """The ``--model.init_args.NAME VALUE`` (or ``=VALUE``) flags of a command line, each value read as
    YAML, as jsonargparse reads it."""
    import yaml

    flags, prefix = {}, "--model.init_args."
    for i, arg in enumerate(argv):
        if not isinstance(arg, str) or not arg.startswith(prefix):
            continue
        name, equals, value = arg[len(prefix) :].partition("=")
        if not equals:
            if i + 1 >= len(argv):
                continue
            value = argv[i + 1]
        flags[name] = yaml.safe_load(value)
    return flags


def zoo_cli_class():
    """``LightningCLI`` with the zoo's options, checks and outputs, on Lightning's public hooks."""
    import torch
    from lightning.pytorch.cli import LightningCLI

    class ZooCLI(LightningCLI):
        def add_arguments_to_parser(self, parser) -> None:
            parser.add_argument(
                "--results",
                type=str | None,
                default=None,
                help="validate / test: write the metrics to this JSON (for zoo export / zoo card --results)",
            )

        def _parse_ckpt_path(self) -> None:
            """Lightning puts a ``--ckpt_path`` checkpoint's hyperparameters over the whole model section,
            the command line's ``--model.init_args.*`` flags too (Lightning-AI/pytorch-lightning#21455):
            those flags are set again on top, so that they win as everywhere else."""
            super()._parse_ckpt_path()
            config = self.config[self.config.subcommand] if self.config.get("subcommand") else {}
            ckpt_path, args = config.get("ckpt_path"), config.get("model")
            if not ckpt_path or not Path(ckpt_path).is_file() or not hasattr(args, "get"):
                return
            for name, value in model_flags(self._given).items():
                *path, last = name.split(".")
                target = args.get("init_args")
                for key in path:  # a nested one: the task's model spec (model.init_args.X)
                    target = target.get(key) if hasattr(target, "get") else None
                if hasattr(target, "get") and not hasattr(target.get(last), "get"):  # values, not specs
                    target[last] = value

        def instantiate_classes(self) -> None:
            """With ``--ckpt_path`` or ``init_from`` every model weight is replaced after the model is
            built: build it inside ``weights_follow`` (no pretrained part, e.g. a GPT-2 encoder, is
            fetched first)."""
            from zoo.models.base import weights_follow

            config = self.config[self.subcommand] if self.subcommand else self.config
            model = config.get("model")
            self._absolute_paths(config)
            init_from = model.get("init_args", {}).get("init_from") if hasattr(model, "get") else None
            ckpt_path = config.get("ckpt_path")
            _check_ckpt_path(ckpt_path, self.subcommand)
            self._check_gpu(config.get("trainer"))
            weights = (init_from, self._check_init_from(init_from)) if init_from else None
            if ckpt_path and Path(ckpt_path).is_file():  # not "best" / "last": Lightning's own names
                weights = (str(Path(ckpt_path).resolve()), Path(ckpt_path))  # the weights that run
            if weights is not None:
                self._vocab_from_weights(config.get("data"), *weights)
            try:
                with weights_follow() if ckpt_path or init_from else contextlib.nullcontext():
                    super().instantiate_classes()
            except ValueError as error:  # jsonargparse wraps the task's error in its own
                cause = _checkpoint_error(error) if init_from else None
                if cause is not None:
                    raise InitFromError(f"init_from={init_from!r}: {cause}") from None
                missing = _zoo_error(error, OSError)
                if missing is not None:
                    raise CommandError(_naming_its_option(missing, config)) from None
                refusal = _zoo_error(error, ValueError)
                if refusal is None:
                    raise
                raise CommandError(f"{refusal} (a value given to a class of the recipe)") from None
            trainer_config = config.get("trainer")
            if hasattr(trainer_config, "get") and trainer_config.get("logger") in (None, True):
                self._log_metrics_csv()

        def _log_metrics_csv(self) -> None:
            """Lightning's default logger is TensorBoard's wherever tensorboard is installed; ``zoo plot``
            and the cards' learning curves read metrics.csv: a run with the default logger also writes
            it (first: the checkpoints stay under lightning_logs/version_N/)."""
            from lightning.pytorch.loggers import CSVLogger

            trainer = getattr(self, "trainer", None)
            if (
                trainer is not None
                and trainer.loggers
                and not any(isinstance(x, CSVLogger) for x in trainer.loggers)
            ):
                trainer.loggers = [CSVLogger(save_dir=trainer.default_root_dir), *trainer.loggers]

        @staticmethod
        def _absolute_paths(config) -> None:
            """Relative paths of the data (its path arguments and an ``hf_dataset``'s ``data_files``)
            and of ``init_from`` that exist here become absolute, so the run's config.yaml (a
            checkpoint's training_config.yaml, a card's commands) works from any directory."""
            sections = [(config.get("data"), PATH_ARGUMENTS), (config.get("model"), ("init_from",))]
            for section, names in sections:
                args = section.get("init_args") if hasattr(section, "get") else None
                for name in names if args is not None else ():
                    if args.get(name) is not None:
                        args[name] = _absolute(args[name])
            data = config.get("data")
            source = data.get("init_args", {}).get("hf_dataset") if hasattr(data, "get") else None
            if isinstance(source, dict) and source.get("data_files") is not None:
                source["data_files"] = _absolute(source["data_files"])

        @staticmethod
        def _check_gpu(trainer) -> None:
            """CommandError for a trainer that asks for a GPU (``recipes/trainer/gpu.yaml``) on a machine
            without one: Lightning's is a traceback."""
            accelerator = trainer.get("accelerator") if hasattr(trainer, "get") else None
            if accelerator not in ("gpu", "cuda") or torch.cuda.is_available():
                return
            if accelerator == "gpu" and torch.backends.mps.is_available():
                return
            raise CommandError(
                f"the trainer's accelerator is {accelerator!r} (a GPU trainer config, e.g. "
                "recipes/trainer/gpu.yaml) but torch finds no GPU here: leave that config out, or pass "
                "--trainer.accelerator cpu"
            )

        @staticmethod
        def _check_init_from(init_from: str) -> Path:
            """The local checkpoint file or folder of ``init_from``; one that cannot be read is one
            line (InitFromError), not a traceback through the model's construction."""
            from zoo.hub.pretrained import CheckpointError, resolve

            path = Path(init_from).expanduser()
            if path.suffix == ".ckpt":
                if not path.is_file():
                    raise InitFromError(f"init_from={init_from!r}: no such checkpoint file")
                return path
            try:
                return resolve(init_from)
            except CheckpointError as error:
                raise InitFromError(f"init_from={init_from!r}: {error}") from None

        @staticmethod
        def _vocab_from_weights(data, source: str, local: Path) -> None:
            """The weights keep their word ids: a text DataModule that takes ``vocab_from`` and was
            given none uses the vocabulary of the weights' ``source`` (``--ckpt_path`` when resuming,
            validating or testing, else ``init_from``; zoo.data.text_vocab), read from ``local``, its
            file or folder here."""
            args = data.get("init_args") if hasattr(data, "get") else None
            if args is None or "vocab_from" not in args or args.get("vocab_from") is not None:
                return
            from zoo.hub.pretrained import CheckpointError, load_vocab

            try:
                load_vocab(local)
            except CheckpointError:
                return  # weights without words (a music or segment model), or init_from's own error later
            args["vocab_from"] = source

        def before_fit(self) -> None:
            self._no_results("fit")

        def before_predict(self) -> None:
            self._no_results("predict")

        def _no_results(self, subcommand: str) -> None:
            if self.config[subcommand].get("results"):
                raise CommandError(
                    f"--results is written by zoo validate and zoo test, not by zoo {subcommand}"
                )

        def before_validate(self) -> None:
            self._whole_split("validate", "limit_val_batches")

        def before_test(self) -> None:
            self._whole_split("test", "limit_test_batches")

        def _whole_split(self, subcommand: str, limit: str) -> None:
            """--results records a whole split's metrics (a model card says so): refused with a limit."""
            value = getattr(self.trainer, limit)  # an int counts batches: 1 is one batch
            whole = value is None or (isinstance(value, float) and value == 1.0)
            if self.config[subcommand].get("results") and not whole:
                raise CommandError(
                    f"--results records the metrics of the whole split for a model card, and "
                    f"--trainer.{limit} {value} evaluates part of it: drop the limit, or leave out --results"
                )

        def after_validate(self) -> None:
            self._write_results("validate")

        def after_test(self) -> None:
            self._write_results("test")

        def _write_results(self, subcommand: str) -> None:
            """The logged metrics as ``{"dataset", "metrics"}`` JSON (``zoo.hub.cards.read_results``)."""
            path = self.config[subcommand].get("results")
            if not path:
                return
            from zoo.hub.cards import dataset_name

            data = self.config[subcommand].get("data")
            metrics = {k: float(v) for k, v in self.trainer.callback_metrics.items()}
            results = {
                "dataset": dataset_name(data.as_dict() if data is not None else None),
                "metrics": metrics,
            }
            Path(path).write_text(json.dumps(results, indent=2) + "\n")

        # A zoo task's checkpoint names its class in its hyperparameters (``_class_path``, Lightning's
        # key for it), so Lightning's own reading of ``--ckpt_path`` rebuilds the task. One written
        # before it did (structured-zoo <= 0.1.0 saved the class as ``zoo_task`` only) would fail that
        # reading: for it, the task is read here, and the path is held back from Lightning until
        # ``before_instantiate_classes``, which comes after Lightning's reading.
        _held_ckpt_path: str | None = None

        def parse_arguments(self, parser, args) -> None:
            words = sys.argv[1:] if args is None else args
            self._given = words if isinstance(words, list) else []  # for _parse_ckpt_path
            try:
                with raising(parser):  # an option a recipe's class lacks: one line (unknown_option)
                    self._parse(parser, words, args)
            except ArgumentError as error:
                line = unknown_option(str(error)) or unrecognized(str(error), parser)
                if line is not None:
                    raise CommandError(line) from None
                self._parse(parser, words, args)  # jsonargparse's usage and message
            self._check_model_spec(parser, words)
            subcommand = self.config.get("subcommand")
            path = self.config[subcommand].get("ckpt_path") if subcommand else None
            if not path or not Path(path).is_file():
                return
            checkpoint = torch.load(path, weights_only=True, map_location="cpu")
            task, hparams = checkpoint.get("zoo_task"), checkpoint.get("hyper_parameters")
            if not task or not hparams or "_class_path" in hparams:
                return
            model = {"class_path": task, "init_args": hparams}
            self.config = parser.parse_object({subcommand: {"model": model, "ckpt_path": None}}, self.config)
            self._held_ckpt_path = path

        def _parse(self, parser, words, args) -> None:
            if isinstance(words, list):
                self.config = parser.parse_args(model_arguments_as_specs(words))
            else:
                super().parse_arguments(parser, args)

        def before_instantiate_classes(self) -> None:
            if self._held_ckpt_path is not None:
                self.config[self.subcommand]["ckpt_path"] = self._held_ckpt_path
            config = self.config[self.subcommand] if self.subcommand else self.config
            if splits_its_batches(config.get("data")):  # Lightning's sampler would split them again
                config["trainer"]["use_distributed_sampler"] = False

        def _check_model_spec(self, parser, args) -> None:
            """A model argument the model's class lacks is one line naming it and its close match:
            jsonargparse takes a task's model spec that its class refuses as a plain dict (the task's
            ``model`` may be one), dropping the recipe's class_path."""
            subcommand = self.config.get("subcommand")
            task = self.config[subcommand].get("model") if subcommand else self.config.get("model")
            spec = task.get("init_args", {}).get("model") if hasattr(task, "get") else None
            if not isinstance(spec, dict):  # none, or a Namespace jsonargparse checked against its class
                return
            from zoo.hub.registry import architecture, check_arguments

            where = "model.init_args.model"
            try:
                if "architecture" in spec:
                    arguments = set(spec) - {"architecture", "backend", "pretrained"}
                    check_arguments(architecture(spec["architecture"]).class_path, arguments, where)
                elif "class_path" in spec:
                    check_arguments(spec["class_path"], spec.get("init_args") or {}, where)
                else:
                    self._lost_class_path(parser, args, spec, where)
            except ValueError as error:
                raise CommandError(str(error)) from None

        @staticmethod
        def _lost_class_path(parser, args, spec: dict, where: str) -> None:
            """ValueError for a spec that lost its class_path: the model arguments of the command line
            are checked against the class it names without them."""
            from zoo.hub.registry import check_arguments

            pairs = split_model_arguments(args if isinstance(args, list) else [])
            given = dict(word for word in pairs if isinstance(word, tuple)) or spec.get("init_args", spec)
            try:
                with contextlib.redirect_stderr(io.StringIO()):  # its usage message: ours follows
                    parsed = parser.parse_args([word for word in pairs if isinstance(word, str)])
                subcommand = parsed.get("subcommand")
                class_path = (parsed[subcommand] if subcommand else parsed)["model"]["init_args"]["model"][
                    "class_path"
                ]
            except (SystemExit, KeyError, TypeError):
                raise ValueError(
                    f"{where}: the arguments {given} fit no model class; a misspelled one replaces the "
                    "recipe's class_path and init_args: check their names"
                ) from None
            check_arguments(class_path, given, where)
            raise ValueError(f"{where}.init_args {given} are not valid values for {class_path}'s arguments")

        def _run_subcommand(self, subcommand: str) -> None:
            """Data files that are not there or that do not read (a ValueError that ``zoo.data`` raises:
            its message names the file and line), a writer's output file that is, and weights from a
            checkpoint whose vocabulary size is not the data's: one line (for the latter, how to give the
            data their vocabulary: the checkpoint's arguments win over a recipe's)."""
            if subcommand == "predict":
                self._check_writer()
            try:
                self._run_leaving_no_empty_run(subcommand)
            except OSError as error:  # data files the data module's setup cannot find, a writer's output
                if _zoo_error(error, OSError) is None:
                    raise
                if isinstance(error, FileExistsError):  # there: no option of the data or model names it
                    raise CommandError(str(error)) from None
                raise CommandError(_naming_its_option(error, self.config[subcommand])) from None
            except ValueError as error:
                said = _zoo_error(error, ValueError, within="data")  # a user's file: name, line, the fix
                if said is not None:  # (before the hint, which would read that data again)
                    raise CommandError(str(said)) from None
                hint = self._vocabulary_hint(subcommand)
                if hint is not None:
                    raise CommandError(hint) from error
                setup = _zoo_error(error, SetupError)
                if setup is None:
                    raise
                raise CommandError(str(setup)) from None

        def _run_leaving_no_empty_run(self, subcommand: str) -> None:
            """LightningCLI's run; one that fails removes a run folder it left with only its config.yaml
            (``KeepRunConfig.remove_empty_run``)."""
            try:
                super()._run_subcommand(subcommand)
            except BaseException:
                for callback in self.trainer.callbacks:
                    getattr(callback, "remove_empty_run", lambda: None)()
                raise

        def _check_writer(self) -> None:
            """``zoo predict`` without a writer callback computes every prediction and keeps none: a
            warning names the writers."""
            from lightning.pytorch.callbacks import BasePredictionWriter

            if not any(isinstance(c, BasePredictionWriter) for c in self.trainer.callbacks):
                warnings.warn(
                    "zoo predict without a writer callback writes nothing: add --trainer.callbacks+ "
                    "'{\"class_path\": \"zoo.tasks.LikelihoodWriter\", \"init_args\": {\"output_path\": "
                    "\"out.jsonl\"}}' (TreeWriter for a PCFG, SegmentationWriter for an HSMM)",
                    stacklevel=2,
                )

        def _vocabulary_hint(self, subcommand: str) -> str | None:
            config = self.config[subcommand]
            source = config.get("ckpt_path") or config["model"].get("init_args", {}).get("init_from")
            args = config["data"].get("init_args") if hasattr(config.get("data"), "get") else None
            wanted = getattr(self.datamodule, "vocab_size", None)
            given = getattr(getattr(self.model, "model", None), "vocab_size", None)
            if not source or args is None or "vocab_from" not in args or None in (wanted, given):
                return None
            if wanted == given:
                return None
            vocab_from = args.get("vocab_from")
            why = f"{vocab_from} has {wanted} tokens" if vocab_from else f"{source} records no vocabulary"
            return (
                f"the weights of {source} have vocab_size = {given} but the data has {wanted} (the "
                f"checkpoint's arguments win over the recipe's): give the data the weights' vocabulary "
                f"with --data.init_args.vocab_from VOCAB (the vocab.json, .ckpt or pretrained folder "
                f"they were trained with; {why})"
            )

    return ZooCLI


# Lightning's notices that tell a zoo user nothing they can act on: its advertisement, the default
# logger's history and a deprecation inside Lightning itself (its own code, not ours)
LIGHTNING_NOISE = (
    r"💡 Tip",
    r"Starting from v1\.9\.0, `tensorboardX` has been removed",
    r".*isinstance\(treespec, LeafSpec\)` is deprecated",
    r"(GPU|TPU|HPU) available: False",  # accelerators the machine lacks (a used GPU is still reported)
    r"The number of training batches \(\d+\) is smaller than the logging interval",
    r"You are using a custom batch sampler `BucketBatchSampler` for prediction",  # it drops no sequence
)


class _DropNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not any(re.match(pattern, record.getMessage()) for pattern in LIGHTNING_NOISE)


@contextlib.contextmanager
def quiet_lightning():
    """Lightning's commands without ``LIGHTNING_NOISE`` (its warnings and its info lines)."""
    lightning_log = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    noise = _DropNoise()
    lightning_log.addFilter(noise)
    try:
        with warnings.catch_warnings():
            for pattern in LIGHTNING_NOISE:
                warnings.filterwarnings("ignore", message=pattern)
            yield
    finally:
        lightning_log.removeFilter(noise)


def zoo_cli(argv: list[str] | None, **kwargs):
    """The zoo's LightningCLI on ``argv`` (None: sys.argv): any task and data module of a config, the
    task's own optimizers, a run's folder kept (``keep_run_config_class``); ``kwargs`` go to
    LightningCLI (``run=False``: build the objects only)."""
    pl = imported("lightning.pytorch", "train", "zoo fit / validate / test / predict")
    kwargs.setdefault("save_config_callback", keep_run_config_class())

    return zoo_cli_class()(
        pl.LightningModule, pl.LightningDataModule, subclass_mode_model=True, subclass_mode_data=True,
        args=argv, auto_configure_optimizers=False, **kwargs,
    )  # fmt: skip


def keep_run_config_class():
    """LightningCLI's ``SaveConfigCallback`` that keeps a run's folder: ``zoo fit`` into a folder that
    holds a run's config.yaml (``--trainer.logger false``, a fixed logger version) refuses unless it
    resumes that run (``--ckpt_path``), and validate / test / predict keep a config.yaml there."""
    from lightning.pytorch.cli import SaveConfigCallback

    class KeepRunConfig(SaveConfigCallback):
        written: Path | None = None  # the config.yaml this fit wrote into a new run folder

        def setup(self, trainer, pl_module, stage: str) -> None:
            path = Path(trainer.log_dir) / self.config_filename
            exists = trainer.strategy.broadcast(path.is_file() if trainer.is_global_zero else False)
            if exists and stage == "fit" and not self.config.get("ckpt_path"):
                raise CommandError(
                    f"{path.parent} holds a run ({path.name}, its checkpoints) that this fit would "
                    "overwrite: give this run another --trainer.default_root_dir (or logger version), or "
                    "resume that run with --ckpt_path CKPT"
                )
            if not exists or stage == "fit":
                super().setup(trainer, pl_module, stage)
                self.written = path if stage == "fit" and not exists and trainer.is_global_zero else None

        def remove_empty_run(self) -> None:
            """Remove the run folder this fit made where it holds only its config.yaml (the fit failed
            before anything else was written): the next run then takes its version, as the README's
            ``version_0`` paths expect."""
            if self.written is None or not self.written.parent.is_dir():
                return
            if [p.name for p in self.written.parent.iterdir()] == [self.written.name]:
                self.written.unlink()
                self.written.parent.rmdir()

    return KeepRunConfig


def lightning_command(argv: list[str] | None) -> int:
    """``fit``, ``validate``, ``test`` or ``predict`` through LightningCLI (None: from sys.argv)."""
    try:
        with quiet_lightning():
            zoo_cli(argv, save_config_kwargs={"overwrite": True})  # first: it names a missing extra
    except CommandError as error:
        print(f"zoo: error: {error}", file=sys.stderr)
        return 2
    from zoo.tasks.distributed import close_process_group

    close_process_group()
    return 0


MODEL_ARGUMENT = "--model.init_args.model.init_args."  # a task's model's own argument: NAME VALUE


def class_at(class_path) -> type | None:
    """The class a config's ``class_path`` names, None where it names none."""
    if not isinstance(class_path, str) or "." not in class_path:
        return None
    module, _, name = class_path.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    return found if isinstance(found, type) else None


def splits_its_batches(data) -> bool:
    """Whether the data module of a config section (its class_path) is one of the zoo's, which split
    their batches between DDP processes themselves (``zoo.data.SequenceDataModule``)."""
    from zoo.data.datamodule import SequenceDataModule

    data_class = class_at(data.get("class_path") if hasattr(data, "get") else None)
    return data_class is not None and issubclass(data_class, SequenceDataModule)


def all_parsers(parser) -> list:
    """``parser`` and its subcommands' parsers."""
    subparsers = parser._subcommands_action._name_parser_map.values() if parser._subcommands_action else ()
    return [parser, *subparsers]


@contextlib.contextmanager
def raising(parser):
    """``parser`` and its subcommands' parsers raise ArgumentError on an error, not print and exit."""
    parsers = all_parsers(parser)
    try:
        for each in parsers:
            each.exit_on_error = False
        yield
    finally:
        for each in parsers:
            each.exit_on_error = True


UNKNOWN_OPTION = re.compile(r"Problem with given class_path '([\w.]+)':\s+Option '(\w+)' is not accepted")


def unknown_option(message: str) -> str | None:
    """jsonargparse's error for an option the class of a recipe's key (the task, its data) lacks, as
    one line naming the key, the class, the option's close match and the class's arguments (None for
    another error)."""
    from zoo.hub.registry import refused_arguments

    found, key = UNKNOWN_OPTION.search(message), re.match(r'Parser key "([\w.]+)"', message)
    cls = class_at(found.group(1)) if found is not None else None
    if cls is None or key is None:
        return None
    task = key.group(1) == "model" and "model" in inspect.signature(cls).parameters  # a model's: one down
    otherwise = " (a model's own argument is --model.init_args.model.init_args.{name})" if task else ""
    return refused_arguments(cls, [found.group(2)], key.group(1), otherwise)


def unrecognized(message: str, parser) -> str | None:
    """argparse's "unrecognized arguments" as one line, with each option's close match among the
    parser's and its subcommands' options (None for another error)."""
    if not message.startswith("unrecognized arguments: "):
        return None
    known = {option for each in all_parsers(parser) for option in each._option_string_actions}
    hints = []
    for word in message.split(": ", 1)[1].split():
        option = word.split("=")[0]
        close = difflib.get_close_matches(option, known, n=1, cutoff=0.8) if option[:2] == "--" else []
        if close:
            hints.append(f"{option}: did you mean {close[0]}?")
    return message + (f" ({'; '.join(hints)})" if hints else "") + "; all options: zoo SUBCOMMAND --help"


def split_model_arguments(words: list[str]) -> list[str | tuple[str, str]]:
    """``words`` with each model argument (``--model.init_args.model.init_args.NAME VALUE`` or
    ``...NAME=VALUE``) as a (NAME, VALUE) pair."""
    items: list[str | tuple[str, str]] = []
    name = None
    for word in words:
        if name is not None:
            items.append((name, word))
            name = None
        elif word.startswith(MODEL_ARGUMENT):
            name, equals, value = word[len(MODEL_ARGUMENT) :].partition("=")
            if equals:
                items.append((name, value))
                name = None
        else:
            items.append(word)
    if name is not None:  # no value: jsonargparse says so
        items.append(MODEL_ARGUMENT + name)
    return items


def model_arguments_as_specs(words: list[str]) -> list[str]:
    """``words`` with each model argument given as the spec that sets it,
    ``--model.init_args.model '{"init_args": {"k1": "null"}}'``: jsonargparse parses a class's argument
    nested in another's (the model's in the task's) from the text of its parsed value, so ``null``
    reached the model as the string "None"; a spec's string values parse as on the command line."""
    spec = MODEL_ARGUMENT.removesuffix(".init_args.")
    out = []
    for word in split_model_arguments(words):
        if isinstance(word, tuple):
            out += [spec, json.dumps({"init_args": dict([word])})]
        else:
            out.append(word)
    return out


PATH_ARGUMENTS = ("data_dir", "dataset", "path", "tree_files", "vocab_from")  # data modules' path arguments


def _absolute(value):
    """``value`` as an absolute path when it is a relative path that exists here (in a list or dict
    too: each entry); else unchanged."""
    if isinstance(value, dict):
        return {key: _absolute(entry) for key, entry in value.items()}
    if isinstance(value, list):
        return [_absolute(entry) for entry in value]
    if not isinstance(value, str) or Path(value).is_absolute() or not Path(value).exists():
        return value
    return str(Path(value).resolve())


def _checkpoint_error(error: BaseException) -> BaseException | None:
    """The ``CheckpointError`` (weights that cannot be read or do not fit) behind ``error``, if any."""
    from zoo.hub.pretrained import CheckpointError

    seen = 0
    while error is not None and seen < 20:  # a chain, bounded against cycles
        if isinstance(error, CheckpointError):
            return error
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def _zoo_error(error: BaseException, kind: type[BaseException], within: str = "") -> BaseException | None:
    """The first error of type ``kind`` that zoo code raised (``backend='fast'``, ``num_states=0``, a
    data file that is not there; ``within``: code of that subpackage, e.g. "data") in the chain of
    ``error``: jsonargparse wraps it in 2-3 chained tracebacks and a dump of the config."""
    package = str(Path(__file__).parent / within)
    for _ in range(20):  # bounded against cycles
        frames = traceback.extract_tb(error.__traceback__)
        if isinstance(error, kind) and frames and frames[-1].filename.startswith(package):
            return error
        error = error.__cause__ or error.__context__
        if error is None:
            return None
    return None


def _naming_its_option(error: BaseException, config) -> str:
    """``error`` (a file or folder that is not there) as one line naming the option whose value it
    quotes (the longest such value: a folder's path is in those of its files), e.g.
    ``--data.init_args.dataset``, ``--model.init_args.model.init_args.pretrained_encoder``."""
    message = " ".join(str(error).split())
    model = config.get("model")
    model = model.get("init_args", {}).get("model") if hasattr(model, "get") else None
    quoted = []
    for prefix, section in (("data", config.get("data")), ("model.init_args.model", model)):
        args = section.get("init_args") if hasattr(section, "get") else None
        for name, value in _string_values(args.as_dict() if hasattr(args, "as_dict") else args or {}):
            if repr(value) in message or ("/" in value and value in message):
                quoted.append((len(value), f"--{prefix}.init_args.{name}"))
    return f"{message} (give it with {max(quoted)[1]})" if quoted else message


def _string_values(args: dict, prefix: str = ""):
    """(dotted name, value) of each string value of ``args``, within its dicts too."""
    for name, value in args.items():
        if isinstance(value, dict):
            yield from _string_values(value, f"{prefix}{name}.")
        elif isinstance(value, str):
            yield f"{prefix}{name}", value


def _check_ckpt_path(ckpt_path: str | None, subcommand: str | None) -> None:
    """CommandError for a ``--ckpt_path`` that names no file (but Lightning's own names, "last" to resume
    a fit, "hpc", "registry...", and URLs), before the data are read. "best" and "last" name the
    checkpoints of a fit in the same process, which a ``zoo validate | test | predict`` (or a new fit,
    for "best") is not: Lightning then warned and went on with the model untrained."""
    if not ckpt_path or Path(ckpt_path).is_file() or "://" in ckpt_path:
        return
    if ckpt_path in ("best", "last") and (subcommand != "fit" or ckpt_path == "best"):
        raise CommandError(
            f"--ckpt_path {ckpt_path} names a checkpoint of a fit run in the same process, and `zoo "
            f"{subcommand}` runs alone: give the file, e.g. --ckpt_path "
            f"lightning_logs/version_0/checkpoints/{ckpt_path}.ckpt"
        )
    if ckpt_path in ("last", "hpc") or ckpt_path.startswith("registry"):
        return
    raise CommandError(f"no checkpoint file {ckpt_path} (--ckpt_path)")


class CommandError(ValueError):
    """A ``zoo fit | validate | test | predict`` argument that cannot work: one line, no traceback."""


class InitFromError(CommandError):
    """``init_from`` names no checkpoint, folder, tag or Hub repo that can be read."""


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    try:
        if words and words[0] in LIGHTNING_COMMANDS:
            return lightning_command(None if argv is None else words)
        return zoo_command(words)
    except MissingExtraError as error:
        print(f"zoo: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader left (``zoo models | head``): stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 128 + signal.SIGPIPE


if __name__ == "__main__":
    raise SystemExit(main())
