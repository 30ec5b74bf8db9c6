"""What the benchmark scripts share: measuring one configuration in a fresh process, and formatting.

Timing: one warm-up call, then up to ``repeats`` timed calls that fit in ``budget_s`` (none when the
warm-up alone exceeds it: then the warm-up is the measurement); the median is reported. Peak memory:
the growth of the process's peak RSS (VmHWM, reset through /proc/self/clear_refs) over its RSS just
before a call, after freed heap memory went back to the OS (malloc_trim); the maximum over the timed
calls is reported. Each configuration runs in a spawned process whose address space is capped at
``MEMORY_CAP``, so an out-of-memory configuration fails cleanly ("OOM"). A configuration may also be a
group of calls measured in one process, taking turns (``measure_interleaved``): for calls of
milliseconds whose ratios should not depend on when each one ran on a shared machine. Linux only.
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import math
import multiprocessing as mp
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

THREADS = 2
MEMORY_CAP = 20 << 30  # address space of each configuration's process, bytes
CHILD_TIMEOUT_S = 900
REPO = Path(__file__).resolve().parent.parent
GB, MB = 1e9, 1e6


@dataclass
class Measurement:
    status: str = "ok"  # "ok", "OOM", "OOM (...)", "timeout (...)" or "error: ..."
    time_s: float = math.nan  # median of the timed calls
    peak_bytes: float = math.nan  # max over the timed calls of the peak RSS growth
    runs: int = 0  # timed calls (0: extrapolated)
    warmup_s: float = math.nan
    times: list[float] = field(default_factory=list)
    alone_s: float = math.nan  # ``measure_interleaved``: median of as many calls again, back to back, alone

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def proc_status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def measured_call(call: Callable[[], None]) -> tuple[float, int]:
    """(seconds, peak RSS growth in bytes) of one call."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    before = proc_status("VmRSS")
    start = time.perf_counter()
    call()
    elapsed = time.perf_counter() - start
    return elapsed, proc_status("VmHWM") - before


def measure(call: Callable[[], None], repeats: int, budget_s: float) -> Measurement:
    warmup_s, warmup_peak = measured_call(call)
    runs = [measured_call(call) for _ in range(min(repeats, int(budget_s // warmup_s)))]
    runs = runs or [(warmup_s, warmup_peak)]
    times = [t for t, _ in runs]
    return Measurement(
        time_s=statistics.median(times),
        peak_bytes=max(p for _, p in runs),
        runs=len(runs),
        warmup_s=warmup_s,
        times=times,
    )


def measure_interleaved(
    calls: dict[str, Callable[[], None]], repeats: int, budget_s: float
) -> dict[str, Measurement]:
    """``measure`` for several calls in one process, taking turns: one warm-up of each, then rounds in
    which every call runs once, up to ``repeats`` rounds that fit in ``budget_s`` (all the calls'
    timed runs together; none when one round of warm-ups exceeds it). Load that changes during the
    measurement then slows every call alike. The rounds run back to back, as a caller's loop does:
    no collection or heap trim between calls (for calls of milliseconds, those would make each call
    page-fault its memory afresh); each call's peak is one ``measured_call`` after the rounds. Then each
    call runs as many times again back to back with no other call in between (``alone_s``: what a loop
    of that call alone sees, with its data and code in cache). A call that fails its warm-up is reported
    as failed and left out of the rounds."""
    results, warmups = {}, {}
    for name, call in calls.items():
        try:
            warmups[name] = timed_call(call)
        except Exception as error:  # recorded in the tables; the others go on
            results[name] = failure(error)
    round_s = sum(warmups.values())
    runs = {name: [] for name in warmups}
    for _ in range(min(repeats, int(budget_s // round_s)) if round_s > 0 else 0):
        for name in warmups:
            runs[name].append(timed_call(calls[name]))
    for name, warmup_s in warmups.items():
        times = runs[name] or [warmup_s]
        results[name] = Measurement(
            time_s=statistics.median(times),
            peak_bytes=measured_call(calls[name])[1],
            runs=len(times),
            warmup_s=warmup_s,
            times=times,
            alone_s=statistics.median(timed_call(calls[name]) for _ in times),
        )
    return {name: results[name] for name in calls}


def timed_call(call: Callable[[], None]) -> float:
    """Seconds of one call, nothing done around it."""
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def is_oom(error: BaseException) -> bool:
    message = str(error).lower()
    return isinstance(error, MemoryError) or "out of memory" in message or "can't allocate memory" in message


def failure(error: BaseException) -> Measurement:
    """The measurement of a configuration that raised ``error`` (the traceback goes to stderr)."""
    if is_oom(error):
        return Measurement(status="OOM")
    traceback.print_exc()
    return Measurement(status=f"error: {type(error).__name__}: {error}")


def child_main(conn, build: Callable, job, repeats: int, budget_s: float) -> None:
    """In the spawned process: cap memory, build the configuration's step (or dict of named steps: see
    ``measure_interleaved``), measure it, send the result."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")  # should the machine run out of memory anyway, the kernel kills this process first
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    try:
        step = build(job)
        if isinstance(step, dict):
            result = {name: asdict(m) for name, m in measure_interleaved(step, repeats, budget_s).items()}
        else:
            result = asdict(measure(step, repeats, budget_s))
    except Exception as error:  # recorded in the tables; the run goes on
        result = asdict(failure(error))
    conn.send(result)


def run_in_child(build: Callable, job, repeats: int, budget_s: float) -> Measurement:
    """Measure ``build(job)`` (a module-level function and a picklable job) in a fresh process."""
    result = run_group_in_child(build, job, repeats, budget_s)
    assert isinstance(result, Measurement), "build returned several calls: use run_group_in_child"
    return result


def run_group_in_child(
    build: Callable, job, repeats: int, budget_s: float, default_allocator: bool = False
) -> Measurement | dict:
    """``run_in_child`` for a ``build`` that may return a dict of named calls: then a dict of their
    measurements (``measure_interleaved``), or one Measurement where the whole process failed.
    ``default_allocator``: the child runs without ``prepare_environment``'s mmap threshold, with
    glibc's own (self-raising) one, as users' processes do (for timing calls of milliseconds, which
    the fixed threshold makes map and page-fault every block of 128 KiB or more afresh)."""
    ctx = mp.get_context("spawn")
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=child_main, args=(sender, build, job, repeats, budget_s))
    threshold = os.environ.pop("MALLOC_MMAP_THRESHOLD_", None) if default_allocator else None
    try:
        child.start()  # a spawned process takes the environment as it is now
    finally:
        if threshold is not None:
            os.environ["MALLOC_MMAP_THRESHOLD_"] = threshold
    sender.close()
    try:
        if not receiver.poll(CHILD_TIMEOUT_S):
            child.kill()
            result = Measurement(status=f"timeout (> {CHILD_TIMEOUT_S} s)")
        else:
            sent = receiver.recv()
            if "status" in sent:
                result = Measurement(**sent)
            else:
                result = {name: Measurement(**m) for name, m in sent.items()}
    except EOFError:  # the child died without answering
        child.join()
        if child.exitcode == -signal.SIGKILL:  # what the kernel's out-of-memory killer sends
            result = Measurement(status="OOM (killed)")
        else:
            result = Measurement(status=f"error: the process exited with code {child.exitcode} (see stderr)")
    child.join()
    return result


def run_methods(build: Callable, job, repeats: int, budget_s: float) -> dict[str, Measurement]:
    """``job.methods`` measured taking turns in one spawned process with glibc's default allocator
    (``run_group_in_child``; a failed process is every method's result), each logged to stderr."""
    results = run_group_in_child(build, job, repeats, budget_s, default_allocator=True)
    if isinstance(results, Measurement):  # the whole process failed
        results = {method: results for method in job.methods}
    for method, m in results.items():
        print(f"  {job} {method}: {describe(m)}", file=sys.stderr, flush=True)
    return results


def describe(m: Measurement) -> str:
    if not m.ok:
        return m.status
    spread = f"{min(m.times):.4g}-{max(m.times):.4g} s over {m.runs}"
    return f"{m.time_s:.4g} s ({spread}, warm-up {m.warmup_s:.3g} s), {m.peak_bytes / MB:.1f} MB"


def num(x: float) -> str:
    if math.isnan(x):
        return "—"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.3g}"


def ratio(x: float, base: float) -> str:
    return "—" if math.isnan(x) or math.isnan(base) or base == 0 else f"{num(x / base)}×"


def cells(m: Measurement, base: Measurement, time_unit: float, memory_unit: float) -> list[str]:
    """time, time / base, peak, peak / base."""
    if not m.ok:
        return [m.status, "—", "—", "—"]
    return [
        num(m.time_s / time_unit),
        ratio(m.time_s, base.time_s),
        num(m.peak_bytes / memory_unit),
        ratio(m.peak_bytes, base.peak_bytes),
    ]


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def paragraphs(*parts: str) -> str:
    return "\n\n".join(parts)


def speedup(slow: Measurement, fast: Measurement) -> float:
    return slow.time_s / fast.time_s


def verdict(name: str, value: float, target: float, detail: str, at_most: bool = False) -> str:
    if math.isnan(value):
        return f"- **N/A** {name}: not measured ({detail})"
    passed = value <= target if at_most else value >= target
    return f"- **{'PASS' if passed else 'MISS'}** {name}: {num(value)} vs target {target:g} ({detail})"


@dataclass
class Section:
    text: str
    verdicts: list[str]
    measurements: list[Measurement]


def machine() -> str:
    with open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown")
    return f"{cpu}, {os.cpu_count()} cores; torch {torch.__version__}, {THREADS} threads"


def snapshot_zoo(into: Path) -> str:
    """Copy zoo/ into ``into`` and describe the copy: git commit, uncommitted changes, hash of the sources.

    The configurations import this copy (``into`` goes first on the path they inherit), so that all of
    them measure the same code even when zoo/ is edited during the run.
    """
    shutil.copytree(REPO / "zoo", into / "zoo", ignore=shutil.ignore_patterns("__pycache__"))
    digest = hashlib.sha256()
    for path in sorted((into / "zoo").rglob("*.py")):
        digest.update(path.relative_to(into).as_posix().encode() + b"\0" + path.read_bytes())

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    dirty = " with uncommitted changes in zoo/" if git("status", "--porcelain", "zoo") else ""
    return f"commit {git('rev-parse', '--short', 'HEAD')}{dirty}; zoo/*.py sha256 {digest.hexdigest()[:12]}"


def prepare_environment() -> None:
    """Settings every configuration inherits; call before spawning any."""
    # libgomp's default spin-waiting made 2-thread calls up to 100x slower on a busy 2-core machine
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # glibc keeps freed blocks under its (self-raising, up to 32 MB) mmap threshold in the heap, so
    # peak RSS would count allocator slack, not live tensors: map every block of 128 KiB or more
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(128 << 10))


def run_header(started: float, load_before: float, quick: bool, plan, version: str) -> list[str]:
    """``report_header`` of a median-timing benchmark run by this process's command line (``plan``:
    its ``repeats`` and ``budget_s``)."""
    import shlex

    timing = (
        f"{'quick' if quick else 'full'} run: one warm-up, then up to {plan.repeats} timed calls "
        f"within {plan.budget_s:g} s; median"
    )
    return report_header(started, load_before, shlex.join(["python", *sys.argv]), timing, version)


def report_header(started: float, load_before: float, command: str, timing: str, version: str) -> list[str]:
    """The lines that open a report: machine, date and load, command, process isolation, code version."""
    import datetime
    import platform

    minutes, load_after = (time.time() - started) / 60, os.getloadavg()[0]
    now = datetime.datetime.now().astimezone()
    return [
        f"- Machine: {machine()}; Python {platform.python_version()}; "
        f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}; "
        f"MALLOC_MMAP_THRESHOLD_={os.environ['MALLOC_MMAP_THRESHOLD_']}",
        f"- Date: {now:%Y-%m-%d %H:%M %Z}; the run took {minutes:.0f} min; 1-minute load average "
        f"{load_before:.1f} at the start and {load_after:.1f} at the end",
        f"- Command: `{command}` ({timing})",
        f"- Each configuration in a fresh process (address space capped at {MEMORY_CAP >> 30} GiB); "
        "peak = peak RSS growth of the measured call.",
        f"- zoo: {version} (copied at the start; every configuration imports the copy)",
    ]


def fit_within_budget(task, data, minutes: float, **trainer_options) -> tuple:
    """Train the Lightning ``task`` on the datamodule ``data`` on the CPU for ``minutes`` of wall time
    (Lightning's ``max_time``; gradient clip 5, at most 1000 epochs; no logger, checkpoints, progress bar,
    summary or sanity check); ``trainer_options`` add to or replace these Trainer arguments.
    Returns the trainer and the minutes the fit took."""
    import lightning.pytorch as pl

    options = dict(
        accelerator="cpu", devices=1, max_time={"seconds": round(minutes * 60)}, max_epochs=1000,
        gradient_clip_val=5.0, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0,
    )  # fmt: skip
    trainer = pl.Trainer(**{**options, **trainer_options})
    started = time.time()
    trainer.fit(task, datamodule=data)
    return trainer, (time.time() - started) / 60


def largest_that_fits(
    candidates: list, rate: Callable[[object], float], required: Callable[[], float]
) -> tuple:
    """The largest of ``candidates`` (ascending in size) that trains at ``required()`` events per second.

    ``rate(candidate)`` measures a candidate's training throughput (events per second); ``required`` is
    called after the first measurement (so that it may read the data the first probe set up). Probing
    stops at the first candidate that falls short. Returns the chosen candidate (the smallest one when
    none is fast enough) and the list of (candidate, events per second) measured.
    """
    probes, chosen, needed = [], candidates[0], None
    for candidate in candidates:
        probes.append((candidate, rate(candidate)))
        needed = required() if needed is None else needed
        if probes[-1][1] < needed:
            break
        chosen = candidate
    return chosen, probes


def evaluate(task, data, stages: tuple[str, ...] = ("validate", "test")) -> list[dict]:
    """The metrics of the Lightning ``task`` on the datamodule ``data``, one dict per stage ("validate",
    "test"), computed on the CPU without logging."""
    import lightning.pytorch as pl

    evaluator = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    return [getattr(evaluator, stage)(task, datamodule=data, verbose=False)[0] for stage in stages]
