"""Grammar induction without treebanks: every PCFG backend on a corpus sampled from a known grammar.

1. Sample training / validation / test sentences with their gold trees from the synthetic grammar of
   ``zoo.data.synthetic_grammar`` (exactly, with ``zoo.inference.sample_sentences``) and write them
   as bracketed files.
2. For each backend and seed, train ``zoo.models.PCFG`` with ``zoo.tasks.ParsingTask`` on the
   sentences alone (``PCFGDataModule`` reads the trees, the loss never sees them), then parse the
   test sentences with MBR and score the trees against the gold ones (sentence and corpus F1).
3. Beside them: the right-branching and random-tree baselines, and the MBR trees of the true grammar
   (the ceiling: PP attachment is ambiguous even to the true grammar).

    python scripts/pcfg_induction.py                 # the full run -> docs/results.md (pcfg_results)
    python scripts/pcfg_induction.py --jobs 2        # the same, two runs at a time (one thread each)
    python scripts/pcfg_induction.py --quick         # a smoke run, prints only

The table goes into ``docs/results.md`` through ``report.write_section`` (section ``pcfg_results``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from zoo.data.synthetic_grammar import NONTERMINALS, PRETERMINALS
from zoo.tasks.grammar_induction import (
    BACKEND_ARGS,
    CLIP,
    EMISSION_INIT_SCALE,
    KIM_RECIPE,
    LENGTHS,
    RECIPES,
    RESTARTS,
    SEEDS,
    SEPARATED,
    SIZES,
    SMALL_RECIPE,
    baselines,
    gold_of,
    induce,
    true_perplexity,
    write_corpus,
)


def describe(recipe: dict) -> str:
    """A recipe in words, for the table's header."""
    return (
        f"PT {recipe['preterminals']}, embeddings {recipe['dim']}, lr {recipe['lr']:g}, "
        f"batches of {recipe['batch_size']}, {recipe['epochs']} epochs"
    )


def one_thread() -> None:
    torch.set_num_threads(1)


def induce_all(files: dict, args) -> dict[str, list[dict]]:
    """Every (backend, seed) run, ``args.jobs`` at a time in their own processes: backend -> results."""
    runs = [(backend, seed) for backend in args.backends for seed in range(args.seeds)]
    context = multiprocessing.get_context("spawn")  # the parent has run torch's thread pools already
    with ProcessPoolExecutor(args.jobs, mp_context=context, initializer=one_thread) as pool:
        futures = [pool.submit(induce, files, b, s, args.epochs, restarts=args.restarts) for b, s in runs]
        results = [future.result() for future in futures]
    return {b: [r for (backend, _), r in zip(runs, results) if backend == b] for b in args.backends}


def run(args) -> str:
    sizes = {**SIZES, "train": args.train, "test": args.test}
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        files = write_corpus(Path(tmp), sizes, args.min_length, args.max_length, seed=args.data_seed)
        words, _ = gold_of(files, "train")
        lengths = sorted({len(w) for w in words})
        base = baselines(files)
        ppl_true = true_perplexity(files)
        rows = list(induce_all(files, args).items())
        for backend, results in rows:
            print(backend, [(round(r["sentence_f1"], 1), r["classes_separated"]) for r in results])
    head = (
        f"Synthetic-grammar induction (`python scripts/pcfg_induction.py`): {args.train} training and "
        f"{args.test} test sentences of {', '.join(map(str, lengths))} words sampled exactly from the "
        f"grammar of `zoo.data.synthetic_grammar` ({len(NONTERMINALS)} nonterminals, {len(PRETERMINALS)} "
        "preterminals with agreement inside NPs, verbs that select their object's type, left-recursive PP "
        f"attachment; 4 words a class); each PCFG (NT {len(NONTERMINALS)}, initial emission logits scaled "
        f"by {EMISSION_INIT_SCALE:g}, AdamW betas (0.75, 0.999), no weight decay, gradient norm {CLIP:g}, "
        "CPU, one thread; N-PCFG backends `exact` and `randomized`: Kim et al. 2019's recipe, "
        f"{describe(KIM_RECIPE)}; `low-rank`: {describe(SMALL_RECIPE)}; `rank-space`: "
        f"{describe(RECIPES['rank-space'])}) is trained on the sentences "
        f"alone, {args.seeds} seeds each; a seed is the best of {args.restarts} restarts (initialization "
        f"and data order) by the likelihood of {SIZES['valid']} validation sentences (no tree is seen). "
        "Unlabelled F1 (%) of the MBR trees on the test sentences against the gold trees "
        "(Kim et al. 2019's evaluation: "
        "trivial and whole-sentence spans dropped); PPL: test perplexity with one end token per sentence. "
        f"Classes: the grammar's {len(PRETERMINALS)} word classes that the induced grammar separates (some "
        f"preterminal puts at least {SEPARATED:.0%} of its emission mass on the class; merged classes, as "
        "Det1 with Det2 where the NP's agreement is not learned, count 0), mean (min - max) over seeds. "
        f"Sentences / s: training throughput, wall clock ({os.cpu_count()} CPU cores, possibly shared "
        "with other jobs: compare rows of one run only)."
    )
    lines += [head, ""]
    columns = "sentence F1: mean (min - max) | corpus F1: mean | test PPL | classes | sentences / s (train)"
    lines.append(f"| trees | {columns} |")
    lines.append("| --- | --- | --- | --- | --- | --- |")
    for name, (s, c) in base.items():
        true = name.startswith("true")
        ppl, classes = (f"{ppl_true:.2f}", str(len(PRETERMINALS))) if true else ("-", "-")
        lines.append(f"| {name} | {s:.1f} | {c:.1f} | {ppl} | {classes} | - |")
    for backend, results in rows:
        s = [r["sentence_f1"] for r in results]
        c = statistics.mean(r["corpus_f1"] for r in results)
        ppl = statistics.mean(r["ppl"] for r in results)
        speed = statistics.mean(r["sentences_per_second"] for r in results)
        extra = ", ".join(f"{k}={v}" for k, v in BACKEND_ARGS[backend].items())
        label = f"PCFG `{backend}`" + (f" ({extra})" if extra else "")
        f1 = f"{statistics.mean(s):.1f} ({min(s):.1f} - {max(s):.1f})"
        k = [r["classes_separated"] for r in results]
        classes = f"{statistics.mean(k):.1f} ({min(k)} - {max(k)})"
        lines.append(f"| {label} | {f1} | {c:.1f} | {ppl:.2f} | {classes} | {speed:.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backends", nargs="+", default=list(BACKEND_ARGS))
    parser.add_argument("--seeds", type=int, default=SEEDS)
    parser.add_argument("--epochs", type=int, default=None, help="default: each backend's recipe")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time, each in a process of one thread")
    parser.add_argument("--restarts", type=int, default=RESTARTS, help="runs a seed keeps the best of")
    parser.add_argument("--train", type=int, default=300)
    parser.add_argument("--test", type=int, default=100)
    parser.add_argument("--min-length", type=int, default=LENGTHS[0])
    parser.add_argument("--max-length", type=int, default=LENGTHS[1])
    parser.add_argument("--data-seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="2 epochs, 1 seed, 1 restart, print only")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if args.quick:
        args.epochs, args.seeds, args.restarts = 2, 1, 1
    text = run(args)
    print(text)
    if not args.quick:
        from report import write_section

        section = "## PCFG: grammar induction on a synthetic corpus\n\n" + text
        write_section(Path("docs/results.md"), "pcfg_results", section, title="# Results")


if __name__ == "__main__":
    main()
