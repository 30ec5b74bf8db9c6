"""The engine's benchmarks on a CUDA GPU: the measured calls of bench_chain.py, bench_semimarkov.py and
bench_tree.py (their ``build_step``), timed with CUDA events at GPU sizes.

Every measured call is ``log_partition.sum().backward()``. Timing: one warm-up call, then up to
``REPEATS`` calls within ``BUDGET_S``, each between two CUDA events; the median is reported. Peak
memory: ``torch.cuda.max_memory_allocated`` during the timed calls, less what was allocated before
them. A configuration that runs out of GPU memory is reported as "OOM"; torch-struct is skipped where
its footprint, from its shapes (the CPU scripts' ``footprint``), exceeds the card.

The device's own ceilings are measured first, the same way: an 8192^3 matrix product in float32 (TF32
off), TF32 and bfloat16, and a device-to-device copy. "Achieved fraction" is the ideal dense
forward-backward's products (bench_chain's ``matmul_step``, ``6 (T-1) B N^2`` flop) over exact's time,
against the float32 and the bf16 matmul rate.

Usage (repository root, on a machine with a GPU):
    python scripts/bench_gpu.py            # every table (about 4 minutes on an H100)
    python scripts/bench_gpu.py --quick    # small sizes, a smoke test
    python scripts/bench_gpu.py --write    # also write its block of docs/benchmarks.md
    python scripts/bench_gpu.py --out FILE # also write the report to FILE (a remote run's $OUT)
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import bench_chain as chain  # noqa: E402
import bench_semimarkov as semimarkov  # noqa: E402
import bench_tree as tree  # noqa: E402

from benchlib import GB, MB, REPO, Measurement, cells, num, paragraphs, ratio, table  # noqa: E402
from report import write_section  # noqa: E402

DOCS = REPO / "docs" / "benchmarks.md"
REPEATS = 5
BUDGET_S = 4.0


def measure(
    build: Callable[[], Callable[[], None]], repeats: int = REPEATS, budget_s: float = BUDGET_S
) -> Measurement:
    """Median CUDA-event time and peak allocated memory of the call that ``build`` returns."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    try:
        step = build()
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        warmup = time.perf_counter() - start
        torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(max(1, min(repeats, int(budget_s / max(warmup, 1e-6))))):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            step()
            end.record()
            end.synchronize()
            times.append(begin.elapsed_time(end) / 1e3)
        peak = torch.cuda.max_memory_allocated() - base
        return Measurement(time_s=statistics.median(times), peak_bytes=peak, runs=len(times), warmup_s=warmup,
                           times=times)  # fmt: skip
    except torch.cuda.OutOfMemoryError:
        return Measurement(status="OOM")
    except Exception as error:  # noqa: BLE001  (a failure is a row of the report, not the end of the run)
        return Measurement(status=f"error: {type(error).__name__}: {str(error)[:120]}")
    finally:
        step = None
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def log(label: str, m: Measurement) -> Measurement:
    detail = f"{m.time_s * 1e3:.3f} ms, {m.peak_bytes / MB:.0f} MB, {m.runs} runs" if m.ok else m.status
    print(f"  {label:60} {detail}", file=sys.stderr, flush=True)
    return m


def fits(footprint: float | None) -> bool:
    return footprint is None or footprint < 0.8 * torch.cuda.get_device_properties(0).total_memory


def tf32(on: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


# --- the device's ceilings ------------------------------------------------------------------------
def matmul_rate(dtype: torch.dtype, allow_tf32: bool, n: int) -> float:
    tf32(allow_tf32)
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    m = measure(lambda: lambda: a @ b, repeats=10, budget_s=2.0)
    tf32(False)
    return 2 * n**3 / m.time_s


def copy_rate(n: int) -> float:
    x = torch.randn(n)
    y = torch.empty_like(x)
    m = measure(lambda: lambda: y.copy_(x), repeats=10, budget_s=2.0)
    return 2 * 4 * n / m.time_s


def ceilings(quick: bool) -> tuple[dict, str]:
    n = 2048 if quick else 8192
    rates = {
        "float32 (TF32 off)": matmul_rate(torch.float32, False, n),
        "TF32": matmul_rate(torch.float32, True, n),
        "bfloat16": matmul_rate(torch.bfloat16, False, n),
    }
    rows = [[name, num(rate / 1e12)] for name, rate in rates.items()]
    rows.append(
        ["device-to-device copy (TB/s, read + write)", num(copy_rate(2**28 if not quick else 2**24) / 1e12)]
    )
    text = paragraphs(
        f"### The device's ceilings ({n}^3 matrix products, TFLOP/s)",
        table(["what", "rate"], rows),
    )
    return rates, text


# --- chains -----------------------------------------------------------------------------------------
CHAIN_BACKENDS = [  # name, case, model, backend
    ("exact", "zoo", "hmm", None),
    ("low-rank (R = N/8)", "zoo", "low-rank", None),
    ("rank-space (r = N/8)", "zoo", "rank-space", None),
    ("randomized (K = 1% N)", "zoo", "embedding", "randomized"),
    ("torch-struct 0.5", "torch-struct", "", None),
    ("matmul reference (float32)", "matmul", "", None),
]


def chain_table1(sizes: tuple[int, ...], rates: dict) -> str:
    rows, throughput = [], []
    for N in sizes:
        shape = chain.Shape(8, 32, N, R=N // 8, K=max(2, round(N / 100)))
        results = {}
        for name, case, model, backend in CHAIN_BACKENDS:
            job = chain.Job(case, shape, model, backend)
            if case == "torch-struct" and not fits(chain.footprint(job)):
                results[name] = Measurement(status=f"skipped: needs ~{chain.footprint(job) / GB:,.0f} GB")
            else:
                results[name] = log(f"chain {name} N={N}", measure(lambda job=job: chain.build_step(job)))
        tf32(True)
        results["exact, TF32"] = log(
            f"chain exact TF32 N={N}", measure(lambda s=shape: chain.build_step(chain.Job("zoo", s, "hmm")))
        )
        tf32(False)
        exact = results["exact"]
        rows += [[str(N), name, *cells(m, exact, 1e-3, MB)] for name, m in results.items()]
        ref, work = results["matmul reference (float32)"], chain.flops(shape)
        if exact.ok and ref.ok:
            achieved = work / exact.time_s
            throughput.append([
                str(N), num(ref.time_s * 1e3), num(exact.time_s * 1e3), ratio(ref.time_s, exact.time_s),
                num(achieved / 1e12), f"{100 * achieved / rates['float32 (TF32 off)']:.0f}%",
                f"{100 * achieved / rates['bfloat16']:.1f}%",
            ])  # fmt: skip
    return paragraphs(
        "### Chains: log Z + backward, B = 8, T = 32, float32 (TF32 off unless named)",
        table(["N", "method", "time (ms)", "time / exact", "peak (MB)", "peak / exact"], rows),
        "### Exact against the device's matmul throughput",
        table(
            [
                "N",
                "reference (ms)",
                "exact (ms)",
                "reference / exact",
                "exact TFLOP/s",
                "of float32 peak",
                "of bf16 peak",
            ],
            throughput,
        ),  # fmt: skip
    )


def chain_table2(shape: chain.Shape) -> str:
    rows = []
    models = {
        "exact": "hmm",
        f"low-rank (R = {shape.R})": "low-rank",
        f"rank-space (r = {shape.R})": "rank-space",
    }
    results = {}
    for allow in (False, True):
        tf32(allow)
        for name, model in models.items():
            label = f"{name}{', TF32' if allow else ''}"
            job = chain.Job("zoo", shape, model, from_raw=True)
            results[label] = log(
                f"table 2 {label}", measure(lambda job=job: chain.build_step(job), repeats=3)
            )
    tf32(False)
    exact = results["exact"]
    rows = [[name, *cells(m, exact, 1e-3, GB)] for name, m in results.items()]
    return paragraphs(
        f"### Chains, Table 2: {shape.B * shape.T}-token batches, B = {shape.B}, T = {shape.T}, "
        f"N = {shape.N}",
        "Containers built from raw parameters inside the timed call, as bench_chain.py's Table 2.",
        table(["method", "time (ms)", "time / exact", "peak (GB)", "peak / exact"], rows),
    )


# --- semi-Markov chains ---------------------------------------------------------------------------------
def semimarkov_table(sizes: tuple[int, ...], durations: tuple[int, ...], B: int, T: int) -> str:
    rows = []
    for D in durations:
        for N in sizes:
            shape = semimarkov.Shape(B, T, N, D)
            results = {}
            for name, case in semimarkov.METHODS:
                job = semimarkov.Job(case, shape)
                need = semimarkov.footprint(job)
                if not fits(need):
                    results[name] = Measurement(status=f"skipped: needs ~{need / GB:,.0f} GB")
                    continue
                results[name] = log(
                    f"semi-Markov {name} N={N} D={D}", measure(lambda job=job: semimarkov.build_step(job))
                )
            rows += [
                [str(N), str(D), name, *cells(m, results["exact"], 1e-3, MB)] for name, m in results.items()
            ]
    return paragraphs(
        f"### Semi-Markov chains: log Z + backward, B = {B}, T = {T}, float32",
        table(["N", "D", "method", "time (ms)", "time / exact", "peak (MB)", "peak / exact"], rows),
    )


# --- trees -------------------------------------------------------------------------------------------
def tree_table(sizes: tuple[tuple[int, int], ...], lengths: tuple[int, ...], B: int) -> str:
    rows = []
    for NT, PT in sizes:
        for T in lengths:
            results = {}
            for name, grammar, backend, R, K in tree.backends(NT):
                job = tree.Job(grammar, tree.Shape(B, T, NT, PT, R=R, K=K), backend)
                results[name] = log(
                    f"tree {name} NT={NT} T={T}", measure(lambda job=job: tree.build_step(job))
                )
            job = tree.Job("torch-struct", tree.Shape(B, T, NT, PT))
            results["torch-struct 0.5"] = log(
                f"tree torch-struct NT={NT} T={T}", measure(lambda job=job: tree.build_step(job))
            )
            rows += [
                [f"{NT}/{PT}", str(T), name, *cells(m, results["exact"], 1e-3, MB)]
                for name, m in results.items()
            ]
    return paragraphs(
        f"### Trees (PCFGs): log Z + backward, B = {B}, float32",
        table(["NT/PT", "T", "method", "time (ms)", "time / exact", "peak (MB)", "peak / exact"], rows),
    )


def header() -> str:
    props = torch.cuda.get_device_properties(0)
    try:
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        driver = subprocess.run(query, capture_output=True, text=True).stdout.strip()
    except OSError:
        driver = ""
    return (
        f"Device: {props.name} ({props.total_memory / GB:.0f} GB, {props.multi_processor_count} SMs), driver "
        f"{driver or 'unknown'}, torch {torch.__version__} (CUDA {torch.version.cuda}). Command: "
        f"`python {' '.join(sys.argv)}`."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    parser.add_argument("--out", type=Path, help="also write the report to this file")
    parser.add_argument("--write", action="store_true", help=f"also write its block of {DOCS}")
    parser.add_argument("--only", nargs="+", choices=("chain", "table2", "semimarkov", "tree"),
                        help="some tables alone (the ceilings always run)")  # fmt: skip
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_gpu.py needs a CUDA device")
    torch.set_default_device("cuda")
    tf32(False)
    only = set(args.only or ("chain", "table2", "semimarkov", "tree"))
    started = time.perf_counter()
    rates, text = ceilings(args.quick)
    parts = [header(), text]
    if "chain" in only:
        parts.append(chain_table1((256, 1024) if args.quick else (256, 1024, 4096, 16384), rates))
    if "table2" in only:
        parts.append(
            chain_table2(
                chain.Shape(8, 16, 2048, R=256) if args.quick else chain.Shape(64, 64, 16384, R=2048)
            )
        )
    if "semimarkov" in only:
        parts.append(
            semimarkov_table(
                (16, 64) if args.quick else (16, 64, 256, 1024), (8, 32), 4, 64 if args.quick else 256
            )
        )
    if "tree" in only:
        parts.append(
            tree_table(
                ((30, 60),) if args.quick else ((30, 60), (60, 120), (100, 200)),
                (10, 20) if args.quick else (20, 40),
                8,
            )
        )
    parts.append(f"Whole run: {math.ceil(time.perf_counter() - started)} s.")
    report = paragraphs(*parts)
    print(report)
    if args.out:
        args.out.write_text(report + "\n")
    if args.write:
        write_section(DOCS, "bench_gpu", "## GPU (CUDA)\n\n" + report)


if __name__ == "__main__":
    main()
