"""Pictures of the pretrained checkpoints' evaluation outputs -> docs/img/*.png.

* ``pretrained_metrics.png``: each family's held-out metric per backend (from every bundled
  ``results.json``: the numbers of docs/results.md and the cards);
* ``speed_vs_states.png``: seconds a step against the state count per backend, from the benchmark
  tables of the linear chain (docs/benchmarks.md) and the HSMM (docs/results.md);
* ``hmm_ppl_vs_states.png``: PTB test perplexity against the number of states and the rank, per
  backend, from the short-budget sweep of scripts/hmm_results.py (docs/data/hmm_results.json);
* ``pcfg_parse.png``: a sentence parsed by a bundled PCFG (its MBR tree's spans above the words);
* ``hsmm_segmentation.png``: a held-out smartwatch recording segmented by a bundled HSMM (the
  predicted segments against the gold exercise labels), when an HSMM checkpoint is bundled.

    python scripts/plot_results.py
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import zoo  # noqa: E402
from zoo.hub.bundled import bundled_folders, first_test_batch  # noqa: E402

IMG = REPO / "docs" / "img"
SENTENCE = "the company said its profit rose in the third quarter"
METRIC = {"CategoricalHMM": "test/ppl", "PCFG": "test/ppl", "StructuredVAE": "test/nll_sentence"}
TITLES = {
    "CategoricalHMM": "HMM, PTB: test perplexity",
    "BernoulliHMM": "HMM, Bach chorales: test NLL (nats / frame)",
    "PCFG": "PCFG, PTB: test perplexity",
    "GaussianHSMM": "HSMM, smartwatch: test NLL (nats / frame)",
    "StructuredVAE": "VAE, short PTB: test NLL (nats / sentence)",
}


def metrics_figure() -> Path:
    families: dict[str, list[tuple[str, float, float]]] = {}
    for tag, folder in bundled_folders().items():
        if not (folder / "results.json").is_file():
            continue  # being trained
        config = json.loads((folder / "config.json").read_text())
        results = json.loads((folder / "results.json").read_text())["metrics"]
        family = config["class_path"].rsplit(".", 1)[-1]
        name = METRIC.get(family, "test/nll")
        arch, _, label = tag.partition(".")
        sizes = [part for part in arch.split("_")[1:] if any(c.isdigit() for c in part)][:2]
        label = f"{label.split('_', 1)[1].replace('_', ' ')}\n{' '.join(sizes)}"  # variant, two sizes
        families.setdefault(family, []).append((label, results[name], results.get(f"{name}_std", 0.0)))
    fig, axes = plt.subplots(1, len(families), figsize=(4.2 * len(families), 3.6), squeeze=False)
    for ax, (family, rows) in zip(axes[0], families.items()):
        labels, values, stds = zip(*rows)
        ax.bar(range(len(rows)), values, yerr=stds, color="tab:blue", alpha=0.8)
        ax.set_xticks(range(len(rows)), labels, fontsize=7)
        ax.set_title(TITLES.get(family, family), fontsize=9)
        for x, value in enumerate(values):
            ax.text(x, value, f"{value:.4g}", ha="center", va="bottom", fontsize=7)
    fig.suptitle("Bundled pretrained checkpoints (CPU budgets; lower is better)", fontsize=10)
    fig.tight_layout()
    return save(fig, "pretrained_metrics.png")


def parse_figure(tag: str) -> Path:
    model = zoo.from_pretrained(tag)
    vocab = model.vocab
    words = SENTENCE.split()
    ids = vocab.encode(words, add_eos=True)
    trees, _ = model.parse({"tokens": torch.tensor([ids]), "lengths": torch.tensor([len(ids)])})
    spans = [(s, e - 1) for s, e in trees[0].tolist() if s >= 0 and e - s > 1]  # first and last word
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for x, word in enumerate(words):
        ax.text(x, 0, word if word in vocab else f"{word}\n(<unk>)", ha="center", va="top", fontsize=9)
    for start, end in spans:
        height = end - start
        ax.plot([start, start, end, end], [0.2, height, height, 0.2], color="tab:green", lw=1.2)
    ax.set_xlim(-0.8, len(words) - 0.2)
    ax.set_ylim(-1.2, len(words))
    ax.axis("off")
    ax.set_title(f"MBR parse by {tag} (each bracket spans its words; height = width)", fontsize=9)
    return save(fig, "pcfg_parse.png")


def segmentation_figure(tag: str) -> Path:
    model = zoo.from_pretrained(tag)
    batch = first_test_batch(tag)
    _, labels = model.segment(batch)
    length = int(batch["lengths"][0])
    fig, axes = plt.subplots(2, 1, figsize=(9, 2.6), sharex=True)
    for ax, row, title in (
        (axes[0], batch["labels"][0, :length], "gold"),
        (axes[1], labels[0, :length], tag),
    ):
        ax.imshow(row[None].numpy(), aspect="auto", cmap="tab20", interpolation="nearest")
        ax.set_yticks([])
        ax.set_ylabel(title, rotation=0, ha="right", fontsize=8)
    axes[1].set_xlabel("frame")
    fig.suptitle(
        "A held-out smartwatch recording: gold exercises (top) and the HSMM's states (bottom)", fontsize=9
    )
    fig.tight_layout()
    return save(fig, "hsmm_segmentation.png")


def markdown_table(page: Path, heading: str) -> list[list[str]]:
    """The body rows (cells) of the first Markdown table after ``heading`` in ``page``."""
    lines = page.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
        elif rows:
            break
    return rows[2:]  # without the header and its rule


def number(cell: str) -> float | None:
    head = cell.split(" ")[0].replace(",", "")
    try:
        return float(head)
    except ValueError:
        return None


HSMM_BACKENDS = ("exact", "low-rank (R = 16)", "rank-space (r = 16)", "randomized (K = N/16)")


def speed_figure() -> Path:
    """Seconds a step against the state count N, per backend: linear chains (docs/benchmarks.md,
    scripts/bench_chain.py) and the smartwatch HSMM (docs/results.md, scripts/hsmm_results.py)."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    chain: dict[str, list[tuple[float, float]]] = {}
    for n, method, time_ms, *_ in markdown_table(
        REPO / "docs" / "benchmarks.md", "### Table 1: log Z + backward"
    ):
        if number(time_ms) is not None and method in ("exact", "low-rank (R = N/8)", "rank-space (r = N/8)",
                                                      "randomized (K = 1% N)"):  # fmt: skip
            chain.setdefault(method, []).append((float(n), number(time_ms) / 1000))
    hsmm_rows = markdown_table(
        REPO / "docs" / "results.md", "### Seconds per training batch at growing state"
    )
    hsmm: dict[str, list[tuple[float, float]]] = {}
    for row in hsmm_rows:
        for backend, cell in zip(HSMM_BACKENDS, row[1:]):
            if number(cell) is not None:
                hsmm.setdefault(backend, []).append((float(row[0]), number(cell)))
    titles = (
        "Linear chain (HMM): log Z + backward, B = 8, T = 32",
        "HSMM (smartwatch): one training step, 4 sequences, D = 32",
    )
    for ax, series, title in zip(axes, (chain, hsmm), titles):
        for label, points in series.items():
            ax.plot(*zip(*points), marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("states N")
        ax.set_ylabel("seconds")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(
        "Speed against the number of states (2-core CPU; from the benchmark outputs in docs/)", fontsize=10
    )
    fig.tight_layout()
    return save(fig, "speed_vs_states.png")


def perplexity_figure() -> Path | None:
    """PTB test perplexity against N (left) and against the rank at the largest N (right), per backend,
    from the stored sweep of scripts/hmm_results.py; None before a sweep was stored."""
    data = REPO / "docs" / "data" / "hmm_results.json"
    runs = (
        [r for key, r in json.loads(data.read_text()).items() if key.startswith("sweep/")]
        if data.is_file()
        else []
    )
    if not runs:
        return None
    fig, (by_states, by_rank) = plt.subplots(1, 2, figsize=(10, 3.8))
    series: dict[tuple[str, int | None], list[tuple[int, float]]] = {}
    for r in runs:
        key = (r["arguments"]["backend"], r["arguments"].get("rank"))
        series.setdefault(key, []).append((r["arguments"]["num_states"], r["test"]["test/ppl"]))
    for (backend, rank), points in sorted(series.items(), key=str):
        if len(points) > 1:
            label = backend + (f" (rank {rank})" if rank else "")
            by_states.plot(*zip(*sorted(points)), marker="o", label=label)
    ranks: dict[tuple[str, int], list[tuple[int, float]]] = {}
    for r in runs:
        if r["arguments"].get("rank"):
            key = (r["arguments"]["backend"], r["arguments"]["num_states"])
            ranks.setdefault(key, []).append((r["arguments"]["rank"], r["test"]["test/ppl"]))
    for (backend, n), points in sorted(ranks.items(), key=str):
        if len(points) > 1:
            by_rank.plot(*zip(*sorted(points)), marker="o", label=f"{backend}, N = {n}")
    by_states.set_yscale("log")
    minutes = runs[0]["minutes_budget"]
    for ax, xlabel in ((by_states, "states N"), (by_rank, "rank")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("test perplexity")
        ax.legend(fontsize=7)
    by_states.set_title(f"PTB HMMs, {minutes:g} CPU minutes each: perplexity against states", fontsize=9)
    by_rank.set_title("... and against the rank at a fixed N", fontsize=9)
    fig.suptitle(
        "A fixed wall-clock budget: larger models see fewer tokens (far from convergence)", fontsize=9
    )
    fig.tight_layout()
    return save(fig, "hmm_ppl_vs_states.png")


def save(fig, name: str) -> Path:
    IMG.mkdir(parents=True, exist_ok=True)
    path = IMG / name
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print("wrote", path.relative_to(REPO))
    return path


def main() -> None:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help writes nothing
    torch.set_num_threads(2)
    metrics_figure()
    speed_figure()
    perplexity_figure()
    pcfg = zoo.list_models("pcfg_*.ptb_low_rank", pretrained=True) or zoo.list_models(
        "pcfg_*", pretrained=True
    )
    if pcfg:
        parse_figure(pcfg[0])
    hsmm = zoo.list_models("hsmm_*", pretrained=True)
    if hsmm:
        segmentation_figure(hsmm[0])


if __name__ == "__main__":
    main()
