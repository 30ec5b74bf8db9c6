"""Many products by one matrix on a CPU, through oneDNN with the matrix packed once.

A chain's forward (and its backward) multiplies T - 1 vectors of B rows by the same K x M matrix, one
after the other. On a CPU ``torch.mm`` calls MKL's sgemm, which for a few rows runs far below the
memory bandwidth such a product is bound by (on our 2-core AMD EPYC: 16 GB/s for 4 x 1024 by
1024 x 1024, 6-8 GB/s for 4 x 2048 by 2048 x 2048). oneDNN's matmul can take the matrix packed once
into its blocked layout (``torch.ops.mkldnn._reorder_linear_weight``, the op torch.compile's CPU
freezing packs linear weights with) and then reads only the packed copy: those products 2.3x and
2.5x faster, for one packing that takes as long as 10 to 15 of torch.mm's products. Whole forwards
(``scripts/bench_chain.py``, table 8, T = 100, one thread, two runs): 1.1x to 2.1x faster at N = 1024
and 2048 from B = 4 on, 2-11 % at N = 512 from B = 16 on, even at N = 512, B = 4, and 1.1x to 1.8x
slower at B = 1. That is MKL on an AMD CPU (off Intel CPUs MKL takes a generic path): on an Intel
Xeon (AVX-512, 2026-11-29) torch.mm was the faster one, the packed forwards 1.1-1.3x slower at N = 1024
and 1.7x at N = 512, B = 8, so only AMD CPUs pack (``slow_sgemm_cpu``). The packed copy is one more
matrix in memory, so matrices above 4096 x 4096 are not packed. The same float32 arithmetic (no
reduced-precision mode: the engine runs under ``precision.full_precision``).

``RepeatedProduct`` packs where that pays (``worth_packing``) and calls ``torch.mm`` elsewhere: on
other devices and dtypes, where torch was built without oneDNN or the user turned it off
(``torch.backends.mkldnn.flags(enabled=False)``), and where the ops are missing.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

MIN_ELEMENTS = 2**18  # K x M: at 512 x 512 packing gained 2-11 % from B = 16 on (even at B = 4)
MIN_ROWS = 4  # one row: packed forwards 1.1-1.8x slower; 2 and 3 rows not measured
MIN_PRODUCTS = 64  # a whole forward of 39 products gained nothing back to back (table 8's quick run)
MAX_ELEMENTS = 2**24  # the packed copy is one more matrix in memory (and its transpose, while packing)
FORCE: bool | None = None  # None: the rule; True: pack wherever oneDNN can, False: never (benchmarks, tests)


def available() -> bool:
    """Whether oneDNN's packed linear ops can run here (built in, turned on, present)."""
    mkldnn = torch.backends.mkldnn
    return bool(mkldnn.is_available() and mkldnn.enabled) and all(
        hasattr(torch.ops.mkldnn, name) for name in ("_reorder_linear_weight", "_linear_pointwise")
    )


def worth_packing(matrix: Tensor, rows: int, products: int) -> bool:
    """Whether ``products`` products of ``rows`` rows by ``matrix`` (K x M) are faster packed (``FORCE``
    overrides the sizes)."""
    if not (matrix.device.type == "cpu" and matrix.dtype == torch.float32 and matrix.dim() == 2):
        return False
    pays = MIN_ELEMENTS <= matrix.numel() <= MAX_ELEMENTS and rows >= MIN_ROWS and products >= MIN_PRODUCTS
    pays = pays and slow_sgemm_cpu()
    return (pays if FORCE is None else FORCE) and available()  # the ops looked up only where it would pack


@functools.cache
def slow_sgemm_cpu() -> bool:
    """Whether this is a CPU where torch.mm's few-row products run far below bandwidth and packing pays:
    an AMD one (read from /proc/cpuinfo; False where it cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            return any(line.startswith("vendor_id") and "AuthenticAMD" in line for line in info)
    except OSError:
        return False


class RepeatedProduct:
    """x -> x @ matrix (B x K -> B x M) for the ``products`` x a caller has, all with about ``rows``
    rows: packed once where ``worth_packing``, else ``torch.mm``. No autograd graph: for the engine's
    hand-written forwards and backwards, which run without one."""

    def __init__(self, matrix: Tensor, rows: int, products: int):
        self.matrix = matrix
        self.packed = None
        # into(x, out=out): x @ matrix written into ``out``, the fewest Python calls (a chain of small
        # products is bound by them)
        self.into = functools.partial(torch.mm, mat2=matrix)
        if worth_packing(matrix, rows, products):
            # oneDNN's linear takes the weight as M x K (y = x W^T)
            self.packed = torch.ops.mkldnn._reorder_linear_weight(matrix.detach().T.contiguous(), rows)
            self.into = functools.partial(_packed_product, self.packed)

    def __call__(self, x: Tensor, out: Tensor | None = None) -> Tensor:
        """x @ matrix (B x M), into ``out`` where given."""
        return self.into(x, out=out)


def _packed_product(packed: Tensor, x: Tensor, out: Tensor | None = None) -> Tensor:
    """x @ the matrix ``packed`` holds (B x M), into ``out`` where given."""
    y = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    return y if out is None else out.copy_(y)
