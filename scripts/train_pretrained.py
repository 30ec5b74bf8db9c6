"""Train, evaluate and bundle the pretrained checkpoints (``zoo/weights/<arch.tag>/``; zoo/hub/bundled.py).

For each job (tag, recipe, minutes), with the documented commands only:

1. ``zoo fit --config recipes/<recipe>.yaml --trainer.max_time <minutes> --trainer.max_epochs 1000``
   and the job's ``fit_args`` (from scratch, seed of the recipe; the checkpoint of the recipe's
   ModelCheckpoint);
2. ``zoo export CKPT zoo/weights/<tag>`` (the run's config.yaml becomes ``training_config.yaml``);
3. half precision: the weights are stored in float16 and run in float32
   (``save_pretrained(storage_dtype=...)``; every dynamic program refuses float16) if that moves the
   quick-check NLL (the first test batches) by less than 0.1 %; otherwise float32;
4. the card's evaluation command on the exported (final) folder, ``zoo test --config
   training_config.yaml --model.init_args.init_from zoo/weights/<tag> --results FILE`` (the whole test
   split; a randomized backend's evaluation is exact at these sizes, otherwise the task reports mean and
   standard deviation over its ``eval_seeds``; the VAE's importance-sampled NLL is one estimate, its
   samples seeded per test batch);
5. ``results.json``: the test metrics, the training notes (hardware, minutes) and the quick check
   (``zoo.hub.bundled.quick_check``, which the tests re-measure); the card is re-rendered;
6. PCFGs: ``synthetic/sentence_f1`` (mean and standard deviation over seeds): the same backend trained
   on the synthetic grammar with ``zoo.tasks.grammar_induction``, F1 of its parses.

Then ``docs/results.md`` gets one table per family from every bundled folder (section ``pretrained``).

    OMP_NUM_THREADS=2 python scripts/train_pretrained.py                     # every job
    python scripts/train_pretrained.py --only 'hmm_categorical_*' --minutes-scale 0.5
    python scripts/train_pretrained.py --report-only                         # only docs/results.md
    python scripts/train_pretrained.py --synthetic-only --only 'pcfg_*'      # only the PCFGs' F1
    python scripts/train_pretrained.py --precision-only --only 'vae_*'       # steps 3-5, no training
    python scripts/train_pretrained.py --evaluate-only --only 'vae_*'        # steps 4-5, weights as they are
"""

from __future__ import annotations

import argparse
import csv
import datetime
import fnmatch
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from zoo.data.synthetic_grammar import NONTERMINALS  # noqa: E402  (the synthetic F1 protocol's grammar)
from zoo.hub.bundled import WEIGHTS, bundled_folders, quick_check, read_training_config  # noqa: E402
from zoo.hub.cards import bundled_cards_index  # noqa: E402
from zoo.hub.families import family as family_of  # noqa: E402  (each table's title and metrics)
from zoo.hub.pretrained import LEARNING_CURVE_NAME  # noqa: E402
from zoo.tasks.grammar_induction import EMISSION_INIT_SCALE, LENGTHS, SEEDS  # noqa: E402  (the synthetic F1 protocol)

from report import write_section  # noqa: E402

DOC = REPO / "docs" / "results.md"
CARDS_INDEX = REPO / "cards" / "README.md"
HALF_TOLERANCE = 1e-3  # relative change of the quick-check NLL that float16 may cause
SYNTHETIC_NOTE = (
    "synthetic/sentence_f1: the same backend trained on the synthetic grammar's 300 sentences "
    f"(zoo.tasks.grammar_induction: NT {len(NONTERMINALS)}, its recipe for the backend, initial emission "
    f"logits scaled by {EMISSION_INIT_SCALE:g}, one thread), "
    "sentence F1 (%) "
    f"of its MBR trees on 100 test sentences, mean and standard deviation over {SEEDS} seeds"
)


@dataclass(frozen=True)
class Job:
    """One bundled checkpoint: its tag, the recipe (recipes/<recipe>.yaml), the training budget,
    extra ``zoo fit`` arguments (they enter the run's config, hence the card's training command), the
    CPU threads it trains with, and optionally a baseline recipe trained with the same budget and
    tested on the same data (``add_trained_baseline``)."""

    tag: str
    recipe: str
    minutes: float
    fit_args: tuple[str, ...] = ()
    threads: int = 2
    baseline: tuple[str, str] | None = None  # (name, recipe) of a plain model trained alike
    earlier: tuple[float, str] | None = None  # a continued run: (minutes, how) of the training before it
    restarts: int = 1  # runs from seeds 0, 1, ...: the one with the lowest final val/nll is released


# the VAE's validation is the importance-sampled NLL (100 samples a sentence), about 10 minutes over the
# whole validation split on a 2-core CPU: 128 sentences spread over its lengths watch the fit (the
# bundled VAEs trained with --trainer.limit_val_batches 4, the 128 shortest: their training_config.yaml);
# the test evaluation is untouched
VAE_VALIDATION = ("--data.init_args.valid_sentences", "128")
VAE = "vae_crf_n100_enc2x64_lstm128_v8000_d56"  # 4.0M parameters: 8.0 MiB stored in float16


JOBS = [
    # the CPU flagships: hours on one core, their recipes' checkpoints (best.ckpt by val/nll is released)
    Job("hmm_categorical_n1024_d128.ptb_exact", "hmm/ptb-exact-cpu-flagship", 75, threads=1),
    # the VAE flagship in four stages: 39 minutes of the recipe (word dropout 0.5, KL warm-up), 30 continued
    # with word dropout 0.25 and no warm-up (the decoder's samples were far less often real words than the
    # LSTM baseline's, docs/vae.md), 30 at Gumbel-softmax temperature 0.3 (at 1 the decoder trains on
    # mixtures of states that no sample of q gives, and the importance-sampled NLL lagged the LSTM's), then
    # 30 with word dropout 0.01 (dropped words cut BPE words in the middle: the decoder learns to finish them)
    Job(
        "vae_crf_n100_enc2x128_lstm128_v8000_d64.ptb_exact",
        "vae/ptb-short-exact-cpu-flagship",
        30,
        ("--model.init_args.init_from", "vae_crf_n100_enc2x128_lstm128_v8000_d64.ptb_exact",
         "--model.init_args.model.init_args.word_dropout", "0.01",
         "--model.init_args.model.init_args.temperature", "0.3",
         "--model.init_args.kl_warmup_steps", "0"),  # fmt: skip
        threads=1,
        earlier=(99.27, "the recipe from scratch (word dropout 0.5, KL warm-up over 1,000 steps; 39 "
                 "minutes), then continued with word dropout 0.25 and no warm-up (30 minutes), then with "
                 "word dropout 0.25 at Gumbel-softmax temperature 0.3 (30 minutes), one core each (best "
                 "validation)"),  # fmt: skip
        baseline=("LSTM language model of the decoder's size", "vae/ptb-short-lstm-baseline-cpu"),
    ),
    Job("hmm_bernoulli_n1024_d128.chorales_exact", "hmm/chorales-exact-cpu-flagship", 15, threads=1),
    # the PCFG flagship in two stages: 109 minutes at lr 2e-3 (the recipe; validation flat from its 9th
    # epoch), then continued from that release at lr 5e-4 (the schedule's second halving) for 50 minutes
    Job(
        "pcfg_nt1000_pt2000_d64.ptb_rank_space",
        "pcfg/ptb-rank-space-cpu-flagship",
        50,
        ("--model.init_args.init_from", "pcfg_nt1000_pt2000_d64.ptb_rank_space",
         "--model.init_args.lr", "5e-4"),  # fmt: skip
        threads=1,
        earlier=(109.25, "the recipe from scratch at lr 2e-3, one Intel Xeon core (best validation)"),
    ),
    Job("hmm_categorical_n512_d64.ptb_exact", "hmm/ptb-exact-small", 4),
    Job("hmm_categorical_n1024_d64.ptb_low_rank", "hmm/ptb-low-rank-small", 4),
    Job("hmm_categorical_n4096_d64.ptb_rank_space", "hmm/ptb-rank-space-small", 4),
    Job("hmm_categorical_n512_d64.ptb_randomized", "hmm/ptb-randomized-small", 4),
    Job("hmm_bernoulli_n256_d64.chorales_exact", "hmm/chorales-exact-small", 1.5),
    Job("hmm_bernoulli_n256_d64.chorales_low_rank", "hmm/chorales-low-rank-small", 1.5),
    Job("hmm_bernoulli_n256_d64.chorales_rank_space", "hmm/chorales-rank-space-small", 1.5),
    Job("hmm_bernoulli_n256_d64.chorales_randomized", "hmm/chorales-randomized-small", 1.5),
    Job("pcfg_nt10_pt20_d64.ptb_exact", "pcfg/ptb-exact-small", 3),
    Job("pcfg_nt10_pt20_d64.ptb_low_rank", "pcfg/ptb-low-rank-small", 3),
    Job("pcfg_nt10_pt20_d64.ptb_rank_space", "pcfg/ptb-rank-space-small", 3),
    Job("pcfg_nt10_pt20_d64.ptb_randomized", "pcfg/ptb-randomized-small", 3),
    *(  # the recipe's 200 epochs (about a minute each here)
        Job(
            f"hsmm_gaussian_n8_dur32_in12_f12_d32.smartwatch_{b.replace('-', '_')}",
            f"hsmm/smartwatch-{b}-small",
            10,
            ("--trainer.max_epochs", "200"),
            restarts=4 if b == "exact" else 1,  # the flagship: the best of 4 seeds by validation NLL
        )
        for b in ("exact", "low-rank", "rank-space", "randomized")
    ),
    *(
        Job(f"{VAE}.ptb_{tag}", f"vae/ptb-short-{recipe}-bundled", 7, VAE_VALIDATION, threads=1)
        for tag, recipe in (
            ("exact", "exact"),
            ("low_rank", "low-rank"),
            ("randomized", "rdp"),  # RDP: K1 = K2 = 10
            ("randomized_topk", "topk"),  # the top-K baseline (K1 = 20, K2 = 0): a variant of randomized
        )
    ),
]
# Each family's flagship checkpoint (issue 19): its targets on the test split, as (metric, bound, at most?);
# a bound of None shows the metric beside the baseline without a target
FLAGSHIPS = {
    "hmm_categorical_n1024_d128.ptb_exact": ("PTB HMM", [("test/ppl", 180.0, True)]),
    "hmm_bernoulli_n1024_d128.chorales_exact": ("chorales HMM", [("test/nll", 6.5, True)]),
    "pcfg_nt1000_pt2000_d64.ptb_rank_space": (
        "PTB PCFG",
        # right-branching trees score 50.6 on the synthetic test sentences (docs/results.md): + 10
        [("test/ppl", 300.0, True), ("synthetic/sentence_f1", 60.6, False)],
    ),
    "hsmm_gaussian_n8_dur32_in12_f12_d32.smartwatch_exact": (
        "smartwatch HSMM",
        [
            ("test/frame_accuracy", 0.75, False),
            ("test/boundary_f1", 0.5, False),
            ("test/segment_ratio", 2.0, True),  # within 2x of the known segments
            ("test/segment_ratio", 0.5, False),
        ],
    ),
    "vae_crf_n100_enc2x128_lstm128_v8000_d64.ptb_exact": (
        "structured VAE (short PTB)",
        [
            ("test/distinct_map_states", 3.0, False),
            ("test/sentence_state_information", None, False),  # the mutual information of z and y
            ("test/token_state_information", None, False),
            ("test/nll_sentence", None, True),
        ],
    ),
}


# what a flagship's target metric measures where it is not this checkpoint's number
TARGET_NOTES = {
    "synthetic/sentence_f1": f"of a {len(NONTERMINALS)}-nonterminal grammar trained with the same backend on "
    "the synthetic corpus, not of this checkpoint",
}


def flagship_rows() -> list[str]:
    """One row per bundled flagship: its targets met or missed, the baseline beside it on the target
    metrics, its training time and learning curve."""
    rows = []
    for tag, (title, targets) in FLAGSHIPS.items():
        folder = WEIGHTS / tag
        if not (folder / "results.json").is_file():
            continue
        results = json.loads((folder / "results.json").read_text())
        checks = []
        for metric, bound, at_most in targets:
            value = results["metrics"].get(metric)
            shown = "-" if value is None else f"{value:.4g}"
            if bound is None:  # reported beside the baseline, no target
                checks.append(f"`{metric}` {shown}")
                continue
            met = value is not None and (value <= bound if at_most else value >= bound)
            relation = "≤" if at_most else "≥"
            note = f"; {TARGET_NOTES[metric]}" if metric in TARGET_NOTES else ""
            checks.append(f"`{metric}` {shown} ({relation} {bound:g}: {'met' if met else 'missed'}{note})")
        names = list(dict.fromkeys(metric for metric, _, _ in targets))
        baselines = "; ".join(
            f"{name}: " + ", ".join(f"`{m}` {values[m]:.4g}" for m in names if m in values)
            for name, values in results.get("baselines", {}).items()
        ) or published_anchors(folder, results, names)
        training = results.get("training", {})
        curve = "-"
        if (folder / "learning_curve.png").is_file():
            curve = f"[curve](../zoo/weights/{tag}/learning_curve.png)"
        rows.append(
            f"| {title} | `{tag}` | {'; '.join(checks)} | {baselines or '-'} | "
            f"{training.get('minutes', '-')} min, {training.get('hardware', '-')} | {curve} |"
        )
    return rows


def published_anchors(folder: Path, results: dict, metrics: list[str]) -> str:
    """The papers' numbers on a flagship's data and target metrics (GPU, their sizes), as an anchor
    where no baseline was trained beside it."""
    from zoo.hub.families import paper_results

    model_class = json.loads((folder / "config.json").read_text())["class_path"].rsplit(".", 1)[-1]
    dataset = results.get("dataset") or ""
    rows = [r for r in paper_results(model_class, dataset) if r.metric in metrics]
    if not rows:  # the same corpus in another preprocessing (ptb-wsj for ptb), said so
        corpus = dataset.split("-")[0]
        rows = [r for r in paper_results(model_class) if r.metric in metrics and r.dataset.startswith(corpus)]
    shown = "; ".join(f"{r.model}, {r.setting}: `{r.metric}` {r.value:g} ({r.source})" for r in rows)
    if rows and rows[0].dataset != dataset:
        return f"published on {rows[0].dataset}, not this test set: {shown}"
    return f"published: {shown}" if rows else ""


PICTURES = [
    ("pretrained_metrics.png", "each family's test metric per backend"),
    ("speed_vs_states.png", "seconds a step against the number of states, per backend"),
    ("hmm_ppl_vs_states.png", "PTB perplexity against the number of states and the rank, per backend"),
    ("pcfg_parse.png", "a sentence parsed by a bundled PCFG"),
    ("hsmm_segmentation.png", "a held-out smartwatch recording segmented by a bundled HSMM"),
]


def zoo_cli(*args: str, threads: int = 2) -> None:
    """``python -m zoo.cli ARGS`` from the repository (2 threads, passive OpenMP waiting)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE"}
    command = [sys.executable, "-m", "zoo.cli", *args]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)


def max_time(minutes: float) -> str:
    """Lightning's ``DD:HH:MM:SS``."""
    seconds = round(minutes * 60)
    return f"00:{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def budget_minutes(value: str | int) -> float:
    """``max_time`` of a saved config: ``DD:HH:MM:SS``, or the seconds YAML 1.1 reads it as."""
    if isinstance(value, int):
        return value / 60
    days, hours, minutes, seconds = (int(x) for x in value.split(":"))
    return (days * 24 + hours) * 60 + minutes + seconds / 60


def hardware(threads: int = 2) -> str:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor() or "unknown CPU",
    )  # fmt: skip
    return f"{cpu}, {threads} thread{'s' if threads > 1 else ''} ({os.cpu_count()} cores shared), no GPU"


def evaluate(folder: Path, results: Path) -> dict:
    """The card's documented evaluation command on ``folder``; its metrics. LightningCLI writes the
    run's config.yaml beside ``results`` (training_config.yaml names no root directory)."""
    zoo_cli("test", "--config", str(folder / "training_config.yaml"), "--model.init_args.init_from",
            str(folder), "--trainer.logger", "false", "--trainer.default_root_dir", str(results.parent),
            "--results", str(results))  # fmt: skip
    return json.loads(results.read_text())


def choose_precision(folder: Path) -> dict:
    """Re-save the float32 ``folder`` with float16 weights run in float32 if its quick-check NLL moves
    by less than HALF_TOLERANCE, else leave it in float32. The measured NLLs (``half_precision_*``
    notes)."""
    import tempfile

    from zoo.hub.pretrained import from_pretrained, save_pretrained

    config = read_training_config(folder)
    model = from_pretrained(str(folder))
    full = quick_check(model, config)["nll"]
    notes: dict = {"float32_nll": full}
    keep = {"training_config": (folder / "training_config.yaml").read_text()}
    if (folder / LEARNING_CURVE_NAME).is_file():
        keep["learning_curve"] = folder / LEARNING_CURVE_NAME
    with tempfile.TemporaryDirectory() as scratch:  # float16 storage: the rounding of the weights alone
        rounded = quick_check(
            from_pretrained(save_pretrained(model, scratch, storage_dtype="float16")), config
        )
    notes.update(
        float16_storage_nll=rounded["nll"], storage_relative_change=abs(rounded["nll"] - full) / abs(full)
    )
    if notes["storage_relative_change"] < HALF_TOLERANCE:
        # overwrite: the old results.json (of the float32 weights) goes; finish measures these weights
        save_pretrained(model, folder, storage_dtype="float16", overwrite=True, **keep)
    return notes


def precision_label(config: dict) -> str:
    """A folder's precision for the tables: ``float16``, ``float16 (run in float32)`` or ``float32``."""
    compute = config.get("compute_dtype", config["dtype"])
    return config["dtype"] if compute == config["dtype"] else f"{config['dtype']} (run in {compute})"


def synthetic_f1(backend: str, work: Path, seeds: int = SEEDS) -> dict[str, float]:
    """Sentence F1 (%) of MBR trees on the synthetic grammar's test sentences, mean and standard
    deviation over seeds, of a PCFG with ``backend`` trained there (zoo.tasks.grammar_induction)."""
    import statistics

    import torch

    from zoo.tasks.grammar_induction import SIZES, induce, write_corpus

    torch.set_num_threads(1)  # one thread: the same sums in the same order, so a rerun is the same run
    work.mkdir(parents=True, exist_ok=True)
    files = write_corpus(work, SIZES, *LENGTHS, seed=0)
    scores = [induce(files, backend, seed)["sentence_f1"] for seed in range(seeds)]
    return {
        "synthetic/sentence_f1": statistics.mean(scores),
        "synthetic/sentence_f1_std": statistics.stdev(scores),
    }


def update_results(folder: Path, change: Callable[[dict], None]) -> None:
    """Apply ``change`` to a bundled folder's results.json (in place) and re-render its card."""
    from zoo.hub.pretrained import save_results, write_card

    results = json.loads((folder / "results.json").read_text())
    change(results)
    save_results(folder, results)
    write_card(folder)


def add_hmm_baseline(folder: Path, seeds: int = 3) -> None:
    """Record beside a bundled HSMM's metrics the plain Gaussian HMM (hmmlearn, EM) trained and scored
    on the same frames and split (scripts/hsmm_results.py), mean over ``seeds`` seeds."""
    import statistics

    from hsmm_results import BASELINE, hmm_baseline

    training = read_training_config(folder)
    data_args = training["data"]["init_args"]
    tolerance = training["model"]["init_args"]["boundary_tolerance"]
    runs = [hmm_baseline(seed, data_args, tolerance) for seed in range(seeds)]
    mean = {k: statistics.mean(r[k] for r in runs) for k in runs[0]}
    baselines = {f"{BASELINE}, mean of {seeds} seeds": mean}
    update_results(folder, lambda results: results.update(baselines=baselines))


MEASURED_SYNTHETIC_F1: dict[str, dict[str, float]] = {}  # backend -> synthetic_f1, once a run


def add_synthetic_f1(folder: Path, work: Path) -> None:
    """Record ``synthetic_f1`` of a bundled PCFG's backend in its results.json and card."""
    backend = json.loads((folder / "config.json").read_text())["init_args"]["backend"]
    if backend not in MEASURED_SYNTHETIC_F1:  # two bundled rank-space PCFGs share one measurement
        MEASURED_SYNTHETIC_F1[backend] = synthetic_f1(backend, work)
    measured = MEASURED_SYNTHETIC_F1[backend]

    def change(results: dict) -> None:
        results["metrics"].update(measured)
        results["training"]["synthetic_f1"] = SYNTHETIC_NOTE

    update_results(folder, change)


def train(
    recipe: str, run_dir: Path, minutes: float, fit_args: tuple[str, ...], threads: int, resume: bool
) -> tuple[Path, float, float]:
    """``zoo fit`` of recipes/<recipe>.yaml into ``run_dir`` for ``minutes`` (with ``resume``, reuse a
    finished run there): its checkpoint (the recipe's best.ckpt, else the last), the budget and the
    minutes it trained."""
    done = sorted(run_dir.rglob("*.ckpt"), key=lambda p: p.stat().st_mtime) if resume else []
    if done:  # the run's span: from LightningCLI's config.yaml to the last file the fit wrote (its metrics
        # are flushed at each validation; a checkpoint is not rewritten after the best epoch)
        version = done[-1].parent.parent
        config_yaml = version / "config.yaml"  # the fit's (zoo test writes one in run_dir)
        end = max(path.stat().st_mtime for path in version.rglob("*") if path.is_file())
        train_minutes = (end - config_yaml.stat().st_mtime) / 60
        minutes = budget_minutes(yaml.safe_load(config_yaml.read_text())["trainer"]["max_time"])
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
        started = time.time()
        zoo_cli("fit", "--config", f"recipes/{recipe}.yaml", "--trainer.max_time", max_time(minutes),
                "--trainer.max_epochs", "1000", "--trainer.default_root_dir", str(run_dir),
                "--trainer.enable_progress_bar", "false", *fit_args, threads=threads)  # fmt: skip
        train_minutes = (time.time() - started) / 60
    best = sorted(run_dir.rglob("best.ckpt"))  # a recipe's ModelCheckpoint(filename=best), else the last
    (checkpoint,) = best[-1:] or sorted(run_dir.rglob("*.ckpt"), key=lambda p: p.stat().st_mtime)[-1:]
    return checkpoint, minutes, train_minutes


def add_trained_baseline(folder: Path, job: Job, work: Path, resume: bool) -> None:
    """Train ``job.baseline``'s recipe with the job's budget and threads, test it on the same data, and
    record its test metrics beside the bundled model's (results.json ``baselines``, the card)."""
    name, recipe = job.baseline
    run_dir = work / f"{job.tag}.baseline"
    checkpoint, budget, _ = train(recipe, run_dir, job.minutes, job.fit_args, job.threads, resume)
    measured = run_dir / "test.json"
    zoo_cli("test", "--config", f"recipes/{recipe}.yaml", "--ckpt_path", str(checkpoint), "--trainer.logger",
            "false", "--trainer.default_root_dir", str(run_dir), "--results", str(measured),
            threads=job.threads)  # fmt: skip
    metrics = json.loads(measured.read_text())["metrics"]
    label = f"{name} (recipes/{recipe}.yaml, {budget:.0f} minutes, best validation checkpoint)"
    update_results(folder, lambda results: results.update(baselines={label: metrics}))


def run(job: Job, scale: float, work: Path, resume: bool = False) -> None:
    """Train (or with ``resume``, reuse the run's checkpoint), export, evaluate and record ``job``."""
    run_dir = work / job.tag
    checkpoint, minutes, train_minutes, restarts = best_restart(job, run_dir, scale, resume)
    folder = WEIGHTS / job.tag
    shutil.rmtree(folder, ignore_errors=True)
    zoo_cli("export", str(checkpoint), str(folder))
    arch = json.loads((folder / "config.json").read_text())["architecture"]
    if arch != job.tag.split(".")[0]:
        raise RuntimeError(f"{job.tag}: the recipe {job.recipe} trained a {arch}, not the tag's architecture")
    training = {
        "recipe": f"recipes/{job.recipe}.yaml",
        "budget_minutes": round(minutes, 2),
        "minutes": round(train_minutes, 2),
        "hardware": hardware(job.threads),
        "torch": __import__("torch").__version__,
        "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
    }
    if job.earlier is not None:
        training.update(continued_training(job, train_minutes))
    if restarts:
        training["restarts"] = restarts
    model = finish(folder, training, run_dir)
    if model.config.get("num_nonterminals"):  # a PCFG: grammar induction with its backend
        add_synthetic_f1(folder, run_dir / "synthetic")
    if model.config.get("max_duration"):  # an HSMM: the plain HMM on the same frames
        add_hmm_baseline(folder)
    if job.baseline is not None:
        add_trained_baseline(folder, job, work, resume)


def best_restart(job: Job, run_dir: Path, scale: float, resume: bool) -> tuple[Path, float, float, str]:
    """Train ``job`` ``job.restarts`` times (``--seed_everything`` 0, 1, ...; a single run keeps the
    recipe's seed) and keep the run whose final validation NLL is lowest (the test split is never looked
    at): its checkpoint, the budget of one run, the minutes of all runs and a note of the choice ("" for
    a single run)."""
    if job.restarts == 1:
        return *train(job.recipe, run_dir, job.minutes * scale, job.fit_args, job.threads, resume), ""
    runs = []
    for seed in range(job.restarts):
        seeded = (*job.fit_args, "--seed_everything", str(seed))
        checkpoint, minutes, train_minutes = train(
            job.recipe, run_dir / f"seed{seed}", job.minutes * scale, seeded, job.threads, resume
        )
        runs.append((final_validation_nll(run_dir / f"seed{seed}"), seed, checkpoint, train_minutes))
    _, seed, checkpoint, _ = min(runs)
    scores = ", ".join(f"seed {s}: {v:.4f}" for v, s, _, _ in sorted(runs, key=lambda r: r[1]))
    note = (
        f"the best of {job.restarts} runs (--seed_everything 0-{job.restarts - 1}, {minutes:.0f}-minute "
        f"budget each) by final val/nll ({scores}): seed {seed} released; the minutes are all runs'"
    )
    return checkpoint, minutes, sum(r[3] for r in runs), note


def final_validation_nll(run_dir: Path) -> float:
    """The last ``val/nll`` that the ``zoo fit`` in ``run_dir`` logged (its metrics.csv)."""
    (metrics,) = sorted(run_dir.rglob("metrics.csv"))[-1:]
    with metrics.open() as f:
        values = [row["val/nll"] for row in csv.DictReader(f) if row.get("val/nll")]
    return float(values[-1])


def continued_training(job: Job, train_minutes: float) -> dict:
    """The training notes of a run continued from earlier weights: the minutes of both, and how."""
    minutes, how = job.earlier
    changed = {k.rsplit(".", 1)[-1]: v for k, v in zip(job.fit_args[::2], job.fit_args[1::2])}
    changed.pop("init_from", None)
    settings = ", ".join(f"{name} {value}" for name, value in changed.items()) or "the recipe's settings"
    return {
        "minutes": round(minutes + train_minutes, 2),
        "stages": f"{minutes:.0f} minutes: {how}; then {train_minutes:.0f} minutes continued from those "
        f"weights (init_from) with {settings}, its best validation checkpoint released; the curve is this "
        "stage's",
    }


def finish(folder: Path, training: dict, run_dir: Path):
    """Steps 3-5 on an exported float32 ``folder``: precision, the card's evaluation, results.json
    (``training`` notes kept) and the card; the model as loaded."""
    from zoo.hub.pretrained import from_pretrained, save_results, write_card

    notes = choose_precision(folder)
    run_dir.mkdir(parents=True, exist_ok=True)
    results = evaluate(folder, run_dir / "test.json")
    config = json.loads((folder / "config.json").read_text())
    training = {k: v for k, v in training.items() if not k.startswith("half_precision_")}
    training.update(dtype=precision_label(config), **{f"half_precision_{k}": v for k, v in notes.items()})
    results["training"] = training
    model = from_pretrained(str(folder))
    results["quick_check"] = quick_check(model, read_training_config(folder))
    save_results(folder, results)
    write_card(folder)
    print(folder.name, json.dumps(results["metrics"]), flush=True)
    return model


def precision_only(folder: Path, run_dir: Path) -> None:
    """Steps 3-5 again on a bundled float32 folder (no training): its weights stored narrower if
    that keeps the quick check, its metrics re-measured with the card's command."""
    config = json.loads((folder / "config.json").read_text())
    if config["dtype"] != "float32":
        print(f"{folder.name}: already {precision_label(config)}", flush=True)
        return
    previous = json.loads((folder / "results.json").read_text())
    model = finish(folder, previous["training"], run_dir)
    if model.config.get("num_nonterminals"):
        add_synthetic_f1(folder, run_dir / "synthetic")


def evaluate_only(folder: Path, run_dir: Path) -> None:
    """Steps 4-5 again on a bundled folder as it is (e.g. after a metric's definition changed): its
    test metrics re-measured with the card's command, the other results (training notes, quick check,
    baselines) kept."""
    run_dir.mkdir(parents=True, exist_ok=True)
    metrics = evaluate(folder, run_dir / "test.json")["metrics"]
    update_results(folder, lambda results: results["metrics"].update(metrics))


def report() -> str:
    """One table per family from every bundled folder's results.json."""
    rows: dict[str, list[str]] = {}
    baselines: dict[str, dict[str, str]] = {}  # family -> baseline -> its row, shown under the family's rows
    for tag, folder in bundled_folders().items():
        if not (folder / "results.json").is_file():
            continue  # being trained (the tests require results.json of every bundled folder)
        config = json.loads((folder / "config.json").read_text())
        results = json.loads((folder / "results.json").read_text())
        family = config["class_path"].rsplit(".", 1)[-1]
        metrics = family_of(family).results_metrics
        training = results.get("training", {})
        values = []
        for name in metrics:
            value = results["metrics"].get(name)
            std = results["metrics"].get(f"{name}_std")
            values.append("-" if value is None else f"{value:.4g}" + (f" ± {std:.2g}" if std else ""))
        size = (folder / "model.safetensors").stat().st_size / 2**20
        rows.setdefault(family, []).append(
            f"| `{tag}` | {config['init_args']['backend']} | {' | '.join(values)} | "
            f"{training.get('budget_minutes', '-')} | {training.get('minutes', '-')} | "
            f"{precision_label(config)} | {size:.1f} |"
        )
        for name, measured in results.get("baselines", {}).items():  # the same row for every checkpoint
            cells = ("-" if measured.get(m) is None else f"{measured[m]:.4g}" for m in metrics)
            row = f"| baseline: {name} | - | {' | '.join(cells)} | - | - | - | - |"
            baselines.setdefault(family, {})[name] = row
    date = f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}"
    parts = [
        "## Pretrained checkpoints (bundled in `zoo/weights/`)",
        "",
        f"Generated by `python scripts/train_pretrained.py` ({date}). Each checkpoint was trained with "
        "its recipe for a wall-clock budget on a shared 2-core CPU (the card records the hardware and "
        "minutes): from scratch, but the low-rank, randomized and top-K structured VAEs, whose recipes "
        "start from the exact one's weights (`init_from`), the PCFG and structured-VAE flagships, trained "
        "in stages (the card lists them; their training_config.yaml continues from the released weights), "
        "and the HSMM flagship, the best of 4 training seeds by validation NLL (its training_config.yaml "
        "has that seed); then evaluated on the whole test split with the card's command `zoo test "
        "--config training_config.yaml --model.init_args.init_from <tag folder> --results results.json`. "
        "These are CPU-budget models at the small recipes' sizes, far from the papers' GPU-trained sizes: "
        "the papers' numbers are in each card. Weights are stored in float16 and run in float32 where that "
        "rounding moved the NLL on the first test batches by less than 0.1 %, else float32 (the dtype "
        "column; the cards give the measured changes; every dynamic program refuses float16). "
        "A randomized backend's evaluation is "
        "exact at these sizes (`evaluation_is_exact()`), so its numbers have no spread over evaluation "
        "seeds; the PCFGs' synthetic-grammar F1 is a mean ± standard deviation over 3 training seeds. The "
        "structured VAEs' NLL is one importance-sampled estimate (100 samples of q a sentence, the samples "
        "of test batch i seeded with i: reproducible; over 3 seeds, scripts/vae_results.py measured "
        "standard deviations of 0.003 to 0.014 nats a sentence); they were validated on 4 batches while "
        "training. The top-K baseline is a variant of the randomized backend (tag `randomized_topk`: "
        "K1 = 20, K2 = 0). MiB: 2^20 bytes.",
    ]
    flagships = flagship_rows()
    if flagships:
        parts += [
            "",
            "### Flagship checkpoints: the targets of issue 19",
            "",
            "Each family's flagship, trained on this CPU as long as it kept improving within the session; "
            "its card has the learning curve against steps, tokens and hours.",
            "",
            "| family | tag | test targets | baseline on the same data (else the papers' numbers: GPU, their "
            "sizes) | training | learning curve |",
            "| --- | --- | --- | --- | --- | --- |",
            *flagships,
        ]
    for family, lines in rows.items():
        title, metrics = family_of(family).results_title, family_of(family).results_metrics
        parts += [
            "",
            f"### {title}",
            "",
            f"| tag | backend | {' | '.join(metrics)} | budget (min) | fit wall clock (min) | dtype | MiB |",
            "| --- | --- |" + " --- |" * (len(metrics) + 4),
            *lines,
            *baselines.get(family, {}).values(),
        ]
    pictures = [(name, text) for name, text in PICTURES if (DOC.parent / "img" / name).is_file()]
    if pictures:
        parts += ["", "### Pictures (`python scripts/plot_results.py`)", ""]
        parts += [f"![{text}](img/{name})" for name, text in pictures]
    return "\n".join(parts) + "\n"


def main() -> None:
    from zoo.hub.pretrained import write_card

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="+", default=["*"], help="fnmatch patterns of tags to train")
    parser.add_argument("--minutes-scale", type=float, default=1.0, help="multiply every budget")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/pretrained/runs"))
    parser.add_argument("--report-only", action="store_true", help="only rewrite docs/results.md")
    parser.add_argument("--resume", action="store_true", help="reuse a finished run's checkpoint (no fit)")
    parser.add_argument(
        "--synthetic-only", action="store_true", help="only add the synthetic-grammar F1 to bundled PCFGs"
    )
    parser.add_argument(
        "--precision-only",
        action="store_true",
        help="only steps 3-5 on bundled float32 folders (no training)",
    )
    parser.add_argument(
        "--evaluate-only", action="store_true", help="only steps 4-5 on bundled folders as they are"
    )
    args = parser.parse_args()
    chosen = {t: f for t, f in bundled_folders().items() if any(fnmatch.fnmatchcase(t, p) for p in args.only)}
    if args.precision_only:
        for tag, folder in chosen.items():
            precision_only(folder, args.work_dir / tag)
    elif args.evaluate_only:
        for tag, folder in chosen.items():
            evaluate_only(folder, args.work_dir / tag)
    elif args.synthetic_only:
        for tag, folder in chosen.items():
            if tag.startswith("pcfg_"):
                add_synthetic_f1(folder, args.work_dir / tag / "synthetic")
    elif not args.report_only:
        for job in JOBS:
            if any(fnmatch.fnmatchcase(job.tag, pattern) for pattern in args.only):
                run(job, args.minutes_scale, args.work_dir, args.resume)
    for folder in bundled_folders().values():
        write_card(folder)  # the current template
    write_section(DOC, "pretrained", report(), title="# Results")
    CARDS_INDEX.write_text(bundled_cards_index())  # its rows carry the metrics just written


if __name__ == "__main__":
    main()
