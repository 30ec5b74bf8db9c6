"""Where a training step's time goes: one recipe's model, a few of its training batches, each step
(log-likelihood, backward, AdamW step) under ``torch.profiler``, on the CPU or a GPU.

Prints the operations that take most of the steps' time (self time on the device: CUDA kernels on a
GPU, CPU operators on the CPU), how many operations a step calls (top-level aten operators: on a GPU,
about one kernel launch each), and how many times a step waits for the device (a value read back to
the host, ``aten::_local_scalar_dense``, which stalls a GPU's queue), and the floating-point operations
of a step's matrix products (the profiler's count: the costliest products by operand shapes, and the
rate the steps reached). For a model whose task
maximizes ``model.log_likelihood(batch)`` (the HMM, HSMM and PCFG recipes).

Usage (repository root):
    python scripts/profile_step.py recipes/hmm/ptb-rank-space.yaml --device cuda
    python scripts/profile_step.py recipes/hmm/ptb-rank-space-small.yaml --steps 2 \\
        --set model.init_args.model.init_args.num_states=256
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from zoo.cli import zoo_cli  # noqa: E402

SYNC = "aten::_local_scalar_dense"  # under aten::item, .tolist(), bool(tensor): the host waits


def build(recipe: str, overrides: list[str]):
    """The recipe's task (a LightningModule) and its data module, as ``zoo fit`` builds them, set up for
    training as ``zoo fit`` sets them up (a fit of no steps): the data split, and what the task fits on
    the training split before the first step (an HSMM's input projection, a VAE decoder's shortlist)."""
    args = ["--config", recipe]
    for override in overrides:
        key, _, value = override.partition("=")
        args += [f"--{key}", value]
    # the set-up fit runs in this process on the CPU (the steps then run on --device) and writes nothing
    args += ["--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
             "--trainer.max_steps", "0", "--trainer.max_time", "null", "--trainer.num_sanity_val_steps", "0",
             "--trainer.callbacks", "[]", "--trainer.enable_progress_bar", "false", "--trainer.accelerator",
             "cpu", "--trainer.devices", "1", "--trainer.strategy", "auto"]  # fmt: skip
    cli = zoo_cli(args, run=False, save_config_callback=None)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    return cli.model, cli.datamodule


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("recipe", help="a zoo fit config (YAML)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=3, help="profiled steps, after one warm-up step")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides")
    parser.add_argument("--top", type=int, default=15, help="operations listed")
    args = parser.parse_args()
    device = torch.device(args.device)
    task, data = build(args.recipe, args.set)
    model = task.model.to(device).train()
    loader = iter(data.train_dataloader())
    batches = [move_data_to_device(next(loader), device) for _ in range(args.steps + 1)]  # before profiling
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(batch: dict) -> None:
        optimizer.zero_grad(set_to_none=True)
        (-model.log_likelihood(batch).sum() / batch["lengths"].sum()).backward()
        optimizer.step()

    step(batches[0])  # warm-up: allocations, kernel selection
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    seconds, tokens = [], 0
    with profile(activities=activities, record_shapes=True, with_flops=True) as prof:
        for batch in batches[1:]:
            tokens += int(batch["lengths"].sum())
            start = time.perf_counter()
            step(batch)
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
    calls = [e for e in prof.events() if e.name.startswith("aten::")]
    top_level = sum(1 for e in calls if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))
    syncs = sum(1 for e in calls if e.name == SYNC)
    print(f"{args.recipe} on {device}: {statistics.median(seconds) * 1e3:.1f} ms a step (median of "
          f"{args.steps}), {tokens / sum(seconds):,.0f} tokens/s; per step {top_level / args.steps:,.0f} "
          f"top-level operations, {syncs / args.steps:,.0f} reads back to the host")  # fmt: skip
    sort = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=sort, row_limit=args.top))
    by_shape = prof.key_averages(group_by_input_shape=True)
    products = sorted((e for e in by_shape if e.flops), key=lambda e: -e.flops)
    total = sum(e.flops for e in products)
    print(f"matrix products: {total / args.steps / 1e9:,.4g} GFLOP a step, "
          f"{total / sum(seconds) / 1e9:,.4g} GFLOP/s over the profiled steps")  # fmt: skip
    for e in products[: args.top]:
        share, gflop = e.flops / total, e.flops / args.steps / 1e9
        print(f"  {share:6.1%}  {gflop:,.4g} GFLOP a step  {e.key} {e.input_shapes}")


if __name__ == "__main__":
    main()
