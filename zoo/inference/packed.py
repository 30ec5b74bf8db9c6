"""Many products by one matrix on a CPU, through oneDNN with the matrix packed once.

A chain's forward (and its backward) multiplies T - 1 vectors of B rows by the same K x M matrix, one
after the other. On a CPU ``torch.mm`` calls MKL's sgemm, which repacks the whole matrix into its
blocked layout on every call: for a few rows that repacking reads and writes the matrix once more
per product, as much memory traffic as the product itself. oneDNN's matmul can take the matrix
packed once (``torch.ops.mkldnn._reorder_linear_weight``, the op torch.compile's CPU freezing packs
linear weights with) and then reads only the packed copy. Measured on our 2-core AMD EPYC
(``scripts/bench_chain.py``, table 8): products 1.2x to 3x faster at K = M >= 1024 and B >= 4, for
one packing that costs about 15 products; slower below K = M = 512 or at B = 1. The packed copy is
one more matrix in memory, so matrices above 4096 x 4096 are not packed. The same float32
arithmetic (no reduced-precision mode: the engine runs under ``precision.full_precision``).

``RepeatedProduct`` packs where that pays (``worth_packing``) and calls ``torch.mm`` elsewhere: on
other devices and dtypes, where torch was built without oneDNN or the user turned it off
(``torch.backends.mkldnn.flags(enabled=False)``), and where the ops are missing.
"""

from __future__ import annotations

import torch
from torch import Tensor

MIN_ELEMENTS = 2**19  # K x M: below about 724 x 724 packed products gained too little to repay the packing
MIN_ROWS = 2  # one row: oneDNN's product was no faster than MKL's
MIN_PRODUCTS = 64  # packing costs about 15 products alone, but a whole forward of 39 gained nothing
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
    cpu_float32 = matrix.device.type == "cpu" and matrix.dtype == torch.float32 and matrix.dim() == 2
    if not (cpu_float32 and available()):
        return False
    if FORCE is not None:
        return FORCE
    return MIN_ELEMENTS <= matrix.numel() <= MAX_ELEMENTS and rows >= MIN_ROWS and products >= MIN_PRODUCTS


class RepeatedProduct:
    """x -> x @ matrix (B x K -> B x M) for the ``products`` x a caller has, all with about ``rows``
    rows: packed once where ``worth_packing``, else ``torch.mm``. No autograd graph: for the engine's
    hand-written forwards and backwards, which run without one."""

    def __init__(self, matrix: Tensor, rows: int, products: int):
        self.matrix = matrix
        self.packed = None
        if worth_packing(matrix, rows, products):
            # oneDNN's linear takes the weight as M x K (y = x W^T)
            self.packed = torch.ops.mkldnn._reorder_linear_weight(matrix.detach().T.contiguous(), rows)

    def __call__(self, x: Tensor, out: Tensor) -> Tensor:
        """x @ matrix into ``out`` (B x M), returned."""
        if self.packed is None:
            return torch.mm(x, self.matrix, out=out)
        return out.copy_(torch.ops.mkldnn._linear_pointwise(x, self.packed, None, "none", [], ""))
