"""The structured VAE's decoder shortlist on a CPU: one ELBO training step (forward and backward) of the
small short-PTB recipe with the full 50,257-way output layer against the 8,000-word shortlist
(``decoder_vocab``, fitted on the training split), interleaved in one process; time and peak memory as
ratios against the full decoder, and the parameters; writes docs/benchmarks.md (block bench_vae_decoder).

Usage: python scripts/bench_vae_decoder.py [--batches 1] [--write]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see benchlib: passive waiting for shared cores

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import yaml  # noqa: E402

from benchlib import measure_interleaved, num, prepare_environment, ratio, table  # noqa: E402
from report import write_section  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RECIPE = REPO / "recipes" / "vae" / "ptb-short-exact-small.yaml"
DOC = REPO / "docs" / "benchmarks.md"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10, help="timed rounds")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--write", action="store_true", help=f"write {DOC}")
    args = parser.parse_args()
    prepare_environment()
    torch.set_num_threads(args.threads)
    from zoo.data import CaptionsDataModule
    from zoo.models import StructuredVAE

    started, load = time.time(), os.getloadavg()[0]
    config = yaml.safe_load(RECIPE.read_text())
    arguments = config["model"]["init_args"]["model"]["init_args"]
    data = CaptionsDataModule(**config["data"]["init_args"])
    data.setup()
    batch = next(iter(data.train_dataloader()))
    models = {}
    for name, shortlist in (
        ("full (50,257 words)", None),
        (f"shortlist ({arguments['decoder_vocab']:,})", arguments["decoder_vocab"]),
    ):
        torch.manual_seed(0)
        model = StructuredVAE(**{**arguments, "decoder_vocab": shortlist}).train()
        if shortlist is not None:
            model.decoder.fit_shortlist(data.token_counts("train"))
        models[name] = model

    def step(model):
        def call() -> None:
            model.zero_grad(set_to_none=True)
            (-model.elbo(batch)["elbo"].sum()).backward()

        return call

    measured = measure_interleaved({k: step(m) for k, m in models.items()}, args.repeats, budget_s=120)
    base = next(iter(measured.values()))
    rows = []
    for name, m in measured.items():
        parameters = sum(p.numel() for p in models[name].parameters())
        speed = f"{num(m.time_s)} s ({ratio(base.time_s, m.time_s)} faster)"
        memory = f"{m.peak_bytes / 2**20:.0f} MiB ({ratio(m.peak_bytes, base.peak_bytes)})"
        rows.append([name, speed, memory, f"{parameters:,}"])
    text = "\n".join(
        [
            "## Structured VAE: the decoder shortlist on our CPU",
            "",
            f"`python scripts/bench_vae_decoder.py --write`: {args.threads} thread(s), "
            f"{time.strftime('%Y-%m-%d %H:%M %Z')}, load average {load:.1f} at the start, "
            f"{(time.time() - started) / 60:.1f} min. One ELBO training step (forward and backward) of "
            f"`{RECIPE.relative_to(REPO)}` on a batch of {len(batch['lengths'])} short PTB sentences; "
            "median of the timed rounds, interleaved in one process; peak = peak RSS growth of the step.",
            "",
            table(["decoder", "s / step", "peak memory", "parameters"], rows),
        ]
    )
    print(text)
    if args.write:
        write_section(DOC, "bench_vae_decoder", text)


if __name__ == "__main__":
    main()
