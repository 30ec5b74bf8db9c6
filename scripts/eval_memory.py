"""Is each family's cost model (``ZooModel.eval_memory``, which evaluation's memory budget checks before a
batch runs) an upper estimate of the memory evaluation really takes? Each case runs in a fresh process
on one thread: the growth of the peak resident memory over one evaluation of a random batch (the PCFG:
its parse, inside pass and backward; the others: ``log_likelihood`` without gradients), beside the
estimate. Writes the ``eval_memory`` section of docs/training-api.md with ``--write``.

    python scripts/eval_memory.py --write
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from report import write_section  # noqa: E402

DOC = REPO / "docs" / "training-api.md"
# glibc's malloc with fixed thresholds: every large buffer is its own mapping, returned when freed, so the
# peak resident memory is the peak of live buffers (its adaptive threshold keeps freed buffers mapped,
# and the measured peak then varies from run to run by up to 2x)
FIXED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}
CASES = [  # (architecture or bundled tag, backend, batch size, length)
    ("hmm_categorical_n1024_d128", "exact", 16, 800),
    ("hmm_categorical_n1024_d128", "exact", 16, 3200),
    ("hmm_categorical_n1024_d64", "low-rank", 16, 3200),
    ("hmm_categorical_n4096_d64", "rank-space", 16, 3200),
    ("hmm_categorical_n512_d64", "randomized", 16, 3200),
    ("hmm_bernoulli_n1024_d128", "exact", 16, 2000),
    ("hsmm_gaussian_n8_dur32_in12_f12_d32", "exact", 4, 2400),
    ("hsmm_gaussian_n64_dur60_in3200_f200_d256", "exact", 2, 1000),
    ("hsmm_gaussian_n1024_dur60_in3200_f200_d256", "low-rank", 1, 300),
    ("pcfg_nt10_pt20_d64", "exact", 2, 160),
    ("pcfg_nt100_pt200_d256", "exact", 1, 80),
    ("pcfg_nt100_pt200_d256", "low-rank", 1, 80),
    ("pcfg_nt100_pt200_d256", "randomized", 1, 80),
    ("pcfg_nt1000_pt2000_d64", "rank-space", 1, 80),
    ("pcfg_nt1000_pt2000_d64", "rank-space", 8, 40),
    ("vae_crf_n100_enc2x64_lstm128_v8000_d56.ptb_exact", "exact", 8, 96),
    ("vae_crf_n100_enc2x64_lstm128_v8000_d56.ptb_low_rank", "low-rank", 32, 24),
]


def measure(name: str, backend: str, batch_size: int, length: int) -> dict:
    """One case in this process: the peak memory's growth over one evaluation, and the estimate."""
    import torch

    import zoo

    torch.set_num_threads(1)
    pretrained = "." in name
    model = zoo.from_pretrained(name) if pretrained else zoo.create_model(name, backend=backend)
    model = model.eval()
    projection = getattr(model, "input_projection", None)
    if projection is not None and not pretrained:  # as zoo fit would fit it from the training frames
        projection.set(
            torch.zeros(projection.input_dim), torch.eye(projection.input_dim, projection.output_dim)
        )
    g, config = torch.Generator().manual_seed(0), model.config
    lengths = torch.full((batch_size,), length)
    if "vocab_size" in config:
        batch = {"tokens": torch.randint(config["vocab_size"], (batch_size, length), generator=g)}
        if model.vocab is not None:  # sentences end with <eos> (a PCFG with a vocabulary checks)
            batch["tokens"][:, -1] = model.vocab.eos_id
    elif "num_keys" in config:
        batch = {"frames": (torch.rand(batch_size, length, config["num_keys"], generator=g) < 0.1).float()}
    else:
        dim = config["input_dim"] or config["feature_dim"]
        batch = {"features": torch.randn(batch_size, length, dim, generator=g)}
    batch["lengths"] = lengths
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if callable(getattr(model, "parse", None)):
        model.parse(batch)
    else:
        with torch.no_grad():
            model.log_likelihood(batch)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024  # KiB on Linux
    return {"measured": grown, "estimate": model.eval_memory(batch_size, length)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the section of docs/training-api.md")
    parser.add_argument("--one", nargs=4, metavar=("NAME", "BACKEND", "B", "T"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        name, backend, b, t = args.one
        print(json.dumps(measure(name, backend, int(b), int(t))))
        return
    rows = []
    for name, backend, b, t in CASES:
        command = [sys.executable, __file__, "--one", name, backend, str(b), str(t)]
        env = {**os.environ, **FIXED_MALLOC}
        result = json.loads(
            subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
        )
        ratio = result["measured"] / result["estimate"]
        row = (f"| `{name}` | {backend} | {b} | {t} | {result['measured'] / 2**20:,.0f} | "
               f"{result['estimate'] / 2**20:,.0f} | {ratio:.2f} |")  # fmt: skip
        print(row, flush=True)
        rows.append(row)
    date = f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}"
    text = "\n".join([
        "### Evaluation memory: the cost models against measured peaks",
        "",
        f"`python scripts/eval_memory.py --write` ({date}, one CPU thread, glibc's malloc with fixed mmap "
        "and trim thresholds). Validation and test refuse a "
        "batch whose `model.eval_memory(B, T)` exceeds the task's `max_eval_memory` (default `auto`: the "
        "device's memory) before it runs. Measured: the growth of the process's peak resident memory over "
        "one evaluation of a random batch of B sequences of T events, in a fresh process (the PCFG: its "
        "parse, the inside pass and its backward; the others: `log_likelihood` without gradients). A "
        "ratio at most 1 means the estimate is an upper bound.",
        "",
        "| model | backend | B | T | measured (MiB) | estimate (MiB) | measured / estimate |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *rows,
    ])  # fmt: skip
    if args.write:
        write_section(DOC, "eval_memory", text, title="# Training API")
    else:
        print(text)


if __name__ == "__main__":
    main()
