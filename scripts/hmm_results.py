"""Train every HMM backend on PTB (and the music21 chorales) within a time budget; write docs/results.md.

Each run trains one backend from scratch on the CPU for ``--minutes`` of wall time (Lightning's
``max_time``), then evaluates the final weights exactly (the randomized backend's evaluation is exact
at these sizes) on the validation and test splits, and reports perplexity (PTB; <eos> counted) or
NLL in nats per frame (chorales), training tokens (frames) per second, and the papers' numbers at
their sizes beside ours.

Each run's outputs are stored in docs/data/hmm_results.json (so that backends may run in separate
processes); ``--write`` renders the docs/results.md section from that file.

``--sweep-minutes M`` also trains the ``SWEEP`` sizes for M minutes each (perplexity against states
and rank; scripts/plot_results.py draws it).

Usage: python scripts/hmm_results.py [--backends exact ...] [--minutes 30] [--music-minutes 2]
    [--sweep-minutes 0] [--threads 1] [--write]
"""

from __future__ import annotations

import os

# libgomp's default spin-waiting made 2-thread runs many times slower whenever another process
# shared the 2 cores; it must be set before torch starts its thread pool
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import lightning.pytorch as pl  # noqa: E402
import torch  # noqa: E402

from zoo.data import MusicDataModule, PTBDataModule  # noqa: E402
from zoo.models import BernoulliHMM, CategoricalHMM  # noqa: E402
from zoo.tasks import LikelihoodTask  # noqa: E402
from zoo.tasks.throughput import TrainingThroughput  # noqa: E402

from benchlib import evaluate, fit_within_budget, largest_that_fits  # noqa: E402
from report import store_output, write_section  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "results.md"
DATA = REPO / "docs" / "data" / "hmm_results.json"


@dataclass
class Run:
    """One training run: its row name and the model's constructor arguments."""

    name: str
    arguments: dict
    lr: float = 3e-3


TEXT_DIMS = {"embedding_dim": 128, "hidden_dim": 128}
MUSIC_DIMS = {"embedding_dim": 64, "hidden_dim": 64}


def ptb_run(backend: str, n: int, **extra) -> Run:
    details = "".join(f", {SYMBOL[k]} = {v}" for k, v in extra.items() if k != "k2")
    return Run(f"{backend}, N = {n}{details}", {"num_states": n, "backend": backend, **extra})


SYMBOL = {"rank": "R", "k1": "K1 = K2"}
# per backend, ascending in cost: the probe picks the largest that trains --min-epochs in the budget
PTB_CANDIDATES = {
    "exact": [ptb_run("exact", n) for n in (1024, 2048, 4096)],
    "low-rank": [
        ptb_run("low-rank", n, rank=r) for n, r in ((2048, 256), (4096, 256), (4096, 512), (8192, 512))
    ],
    "rank-space": [
        ptb_run("rank-space", n, rank=r) for n, r in ((8192, 512), (16384, 512), (16384, 1024), (16384, 2048))
    ],
    "randomized": [ptb_run("randomized", n, k1=n // 16, k2=n // 16) for n in (1024, 2048, 4096)],
}
# perplexity against states and rank at a short budget (docs/img/hmm_ppl_vs_states.png)
SWEEP = {
    "exact": [ptb_run("exact", n) for n in (256, 1024)],
    "randomized": [ptb_run("randomized", n, k1=n // 16, k2=n // 16) for n in (512, 2048)],
    "low-rank": [ptb_run("low-rank", n, rank=r) for n, r in ((1024, 128), (4096, 128), (4096, 32))],
    "rank-space": [ptb_run("rank-space", n, rank=r) for n, r in ((1024, 256), (16384, 256), (16384, 64))],
}
MUSIC_RUNS = {
    "exact": Run("exact, N = 256", {"num_states": 256, "backend": "exact"}),
    "low-rank": Run("low-rank, N = 256, R = 64", {"num_states": 256, "backend": "low-rank", "rank": 64}),
    "rank-space": Run(
        "rank-space, N = 1024, r = 128", {"num_states": 1024, "backend": "rank-space", "rank": 128}
    ),
}

PAPERS = """\
Published PTB numbers at the papers' sizes (Chiu et al. 2021, Table 1; Yang et al. 2022, Table 2; 30
epochs on GPUs):

| model | states | rank / features | val PPL | test PPL | source |
| --- | --- | --- | --- | --- | --- |
| softmax HMM | 2^14 | - | 144.3 | 136.8 | Chiu et al. 2021, Table 1 |
| LHMM | 2^14 | 2^11 | 141.4 | 131.8 | Chiu et al. 2021, Table 1 |
| rank-space HMM | 2^14 .. 2^15 | 2048 .. 8192 | 135.6 | 126.4 | Yang et al. 2022 |

Published polyphonic-music NLL (nats per frame, test; Chiu et al. 2021, Fig. 2): JSB HMM 5.74, LHMM 5.80
(2^11 states, rank 2^9). Our chorales are the 371 music21 Bach chorales with a fixed seeded split, not
Boulanger-Lewandowski's JSB split of 382: comparable in kind, not in value.
"""


def build_task(run: Run, vocab_size: int | None) -> LikelihoodTask:
    pl.seed_everything(0, verbose=False)
    if vocab_size is None:
        model = BernoulliHMM(**run.arguments, **MUSIC_DIMS)
    else:
        model = CategoricalHMM(vocab_size, **run.arguments, **TEXT_DIMS)
    return LikelihoodTask(model, lr=run.lr)


def training_rate(run: Run, data, vocab_size: int | None, batches: int) -> float:
    """Training tokens per second of ``run`` over ``batches`` steps after one warm-up step."""
    speed = TrainingThroughput(skip=1)
    fit_within_budget(
        build_task(run, vocab_size), data, 10, callbacks=[speed], max_epochs=1,
        limit_train_batches=batches + 1, limit_val_batches=0,
    )  # fmt: skip
    print(f"probe {run.name}: {speed.tokens_per_second:,.0f} tokens / s", flush=True)
    return speed.tokens_per_second


def train_and_evaluate(run: Run, data, minutes: float, vocab_size: int | None) -> dict:
    """Fit within the budget, then exact validation and test metrics."""
    task = build_task(run, vocab_size)
    speed = TrainingThroughput()
    _, train_minutes = fit_within_budget(task, data, minutes, callbacks=[speed])
    val, test = evaluate(task, data)
    return {
        "run": run.name,
        "arguments": run.arguments,
        "epochs": speed.tokens / training_events(data),
        "minutes": train_minutes,
        "speed": speed.tokens_per_second,
        "val": val,
        "test": test,
        "exact_eval": task.model.evaluation_is_exact(),
    }


def training_events(data) -> int:
    return int(data.datasets["train"].lengths.sum())


def run_ptb(backends: list[str], args) -> None:
    ptb = PTBDataModule(batch_tokens=4096, max_length=60)
    for backend in backends:
        load = os.getloadavg()[0]
        chosen, probes = largest_that_fits(
            PTB_CANDIDATES[backend],
            rate=lambda run: training_rate(run, ptb, ptb.vocab_size, args.probe_batches),
            required=lambda: args.min_epochs * training_events(ptb) / (args.minutes * 60),
        )
        result = train_and_evaluate(chosen, ptb, args.minutes, ptb.vocab_size)
        result.update(
            probes=[(run.name, rate) for run, rate in probes], load=load, threads=torch.get_num_threads(),
            date=f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
            epochs_per_probe_rate=args.minutes * 60 / training_events(ptb), min_epochs=args.min_epochs,
            probe_batches=args.probe_batches,
        )  # fmt: skip
        store_output(DATA, f"ptb/{backend}", result)
        print(result, flush=True)


def run_music(backends: list[str], args) -> None:
    music = MusicDataModule("chorales", batch_size=16)
    for backend in backends:
        if backend in MUSIC_RUNS:
            result = train_and_evaluate(MUSIC_RUNS[backend], music, args.music_minutes, None)
            result.update(threads=torch.get_num_threads(), minutes_budget=args.music_minutes)
            store_output(DATA, f"chorales/{backend}", result)
            print(result, flush=True)


def run_sweep(backends: list[str], args) -> None:
    ptb = PTBDataModule(batch_tokens=4096, max_length=60)
    for backend in backends:
        for run in SWEEP[backend]:
            result = train_and_evaluate(run, ptb, args.sweep_minutes, ptb.vocab_size)
            result.update(threads=torch.get_num_threads(), minutes_budget=args.sweep_minutes)
            store_output(DATA, f"sweep/{backend}/{run.name}", result)
            print(result, flush=True)


def report() -> str:
    """The docs/results.md section, from the stored run outputs."""
    stored = json.loads(DATA.read_text())
    ptb = [stored[f"ptb/{b}"] for b in PTB_CANDIDATES if f"ptb/{b}" in stored]
    music = [stored[f"chorales/{b}"] for b in MUSIC_RUNS if f"chorales/{b}" in stored]
    rows = [
        f"| {r['run']} | {r['minutes']:.1f} | {r['epochs']:.2f} | {r['speed']:,.0f} | "
        f"{r['val']['val/ppl']:.1f} | {r['test']['test/ppl']:.1f} | {r['threads']} | {r['date']} |"
        for r in ptb
    ]
    probe_rows = []
    for r in ptb:
        for name, rate in r["probes"]:
            epochs = rate * r["epochs_per_probe_rate"]
            verdict = "trained" if name == r["run"] else "too slow" if epochs < r["min_epochs"] else "-"
            probe_rows.append(f"| {name} | {rate:,.0f} | {epochs:.1f} | {verdict} |")
    music_rows = [
        f"| {r['run']} | {r['minutes']:.1f} | {r['epochs']:.1f} | {r['speed']:,.0f} | "
        f"{r['val']['val/nll']:.3f} | {r['test']['test/nll']:.3f} |"
        for r in music
    ]
    sweep = [
        r
        for b in SWEEP
        for r in sorted(
            (v for k, v in stored.items() if k.startswith(f"sweep/{b}/")),
            key=lambda r: (r["arguments"]["num_states"], r["arguments"].get("rank", 0)),
        )
    ]
    sweep_rows = [
        f"| {r['run']} | {r['minutes']:.1f} | {r['epochs']:.2f} | {r['val']['val/ppl']:.1f} | "
        f"{r['test']['test/ppl']:.1f} |"
        for r in sweep
    ]
    minutes = {int(r["minutes"]) for r in ptb}
    return "\n".join(
        [
            "## Neural HMMs trained on our 2-core CPU",
            "",
            f"Generated by `python scripts/hmm_results.py` (outputs in `{DATA.relative_to(REPO)}`; "
            f"torch {torch.__version__}). PTB: for each backend, the largest of a list of sizes (below) "
            f"whose measured training speed gives at least {ptb[0]['min_epochs']:g} epochs in the budget "
            f"is trained from scratch for {'/'.join(map(str, sorted(minutes)))} minutes of wall clock "
            "(Lightning's `max_time`; AdamW lr 3e-3, "
            "gradient clip 5, learning rate halved on a validation plateau, embeddings and MLPs of 128, "
            "batches of at most 4096 tokens, training sentences up to 60 tokens), then evaluated exactly "
            "on the full validation and test splits. Runs used the stated CPU threads, two runs side by "
            "side on the 2 cores, which other work also used for part of the time (tokens per second are "
            "what the runs got, not the machine's best). These are budget-limited CPU runs, far from "
            "the papers' 30 GPU epochs at 2^14 states: they show what each backend reaches on a CPU in "
            "the budget, not the papers' perplexities.",
            "",
            "### PTB language modelling (perplexity, <eos> counted as a token)",
            "",
            "| backend | train minutes | epochs | train tokens / s | val PPL | test PPL | threads | date |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
            *rows,
            "",
            f"Choosing the size: training tokens per second over {ptb[0]['probe_batches']} steps of "
            "4096-token batches after a warm-up step, and the epochs that speed gives in the budget; "
            f"probing stops at the first size under {ptb[0]['min_epochs']:g} epochs.",
            "",
            "| size | probe tokens / s | epochs in the budget | |",
            "| --- | --- | --- | --- |",
            *probe_rows,
            "",
            "### Perplexity against states and rank (short budget)",
            "",
            f"Each size trained from scratch for {sweep[0]['minutes_budget'] if sweep else '-'} minutes (one "
            "thread, otherwise as above; `--sweep-minutes`): what a backend reaches for its size at a "
            "fixed small budget, where a larger model sees fewer tokens (the epochs column), so perplexity "
            "rises with the size here, unlike at convergence in the papers. Plotted in "
            "`docs/img/hmm_ppl_vs_states.png` (`scripts/plot_results.py`).",
            "",
            "| run | train minutes | epochs | val PPL | test PPL |",
            "| --- | --- | --- | --- | --- |",
            *sweep_rows,
            "",
            "![perplexity against states and rank](img/hmm_ppl_vs_states.png)",
            "",
            "### Bach chorales (music21), NLL in nats per frame of 88 keys",
            "",
            "| backend | train minutes | epochs | train frames / s | val NLL | test NLL |",
            "| --- | --- | --- | --- | --- | --- |",
            *music_rows,
            "",
            "### The papers",
            "",
            PAPERS,
        ]
    )


MIN_EPOCHS, PROBE_BATCHES = 2.0, 6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", nargs="+", default=list(PTB_CANDIDATES), choices=list(PTB_CANDIDATES))
    parser.add_argument("--minutes", type=float, default=30.0, help="training budget per PTB run (0: none)")
    parser.add_argument("--music-minutes", type=float, default=2.0, help="per chorales run (0: none)")
    parser.add_argument("--sweep-minutes", type=float, default=0.0, help="per sweep run (0: none)")
    parser.add_argument("--min-epochs", type=float, default=MIN_EPOCHS)
    parser.add_argument("--probe-batches", type=int, default=PROBE_BATCHES)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--write", action="store_true", help=f"write the section of {DOC} from {DATA}")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.minutes > 0:
        run_ptb(args.backends, args)
    if args.music_minutes > 0:
        run_music(args.backends, args)
    if args.sweep_minutes > 0:
        run_sweep(args.backends, args)
    text = report()
    print(text)
    if args.write:
        write_section(DOC, "hmm_results", text, title="# Results")


if __name__ == "__main__":
    main()
