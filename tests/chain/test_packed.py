"""Products by a matrix packed once for oneDNN (``zoo.inference.packed``), and the chain forwards that
use them: ``block_scaled`` (the no-grad forward; log Z with gradients, one shared transition) and
``scaled``'s guarded forward and backward (low-rank with gradients).

The packed product must equal ``torch.mm`` to float32 rounding for any number of rows, and a chain
whose products are packed must be as close to float64 as the same chain with ``torch.mm`` products.
"""

import pytest
import torch

import zoo.inference.packed as packed
from zoo.inference import DenseChain, LinearChain, LowRankChain
from zoo.inference.chain import exact, scaled
from zoo.inference.chain.low_rank import low_rank_scaled

pytestmark = pytest.mark.skipif(not packed.available(), reason="torch built without oneDNN")

N = 1024  # N x N = 2^20 elements: packed (>= MIN_ELEMENTS)
T = 70  # 69 products: packed (>= MIN_PRODUCTS)


@pytest.fixture
def uses(monkeypatch):
    """Records, for each product made, whether it was packed (so that a test knows which path ran); the
    rule packs as on an AMD CPU, whatever this one is."""
    monkeypatch.setattr(packed, "slow_sgemm_cpu", lambda: True)
    seen = []
    original = packed.RepeatedProduct.__init__

    def recording(self, *args):
        original(self, *args)
        into = self.into  # what both the call and the forwards' loops run

        def recorded(x, out=None):
            seen.append(self.packed is not None)
            return into(x, out=out)

        self.into = recorded

    monkeypatch.setattr(packed.RepeatedProduct, "__init__", recording)
    return seen


def _no_packing(monkeypatch):
    monkeypatch.setattr(packed, "FORCE", False)


@pytest.mark.parametrize("rows", [1, 4, 13])
def test_packed_product_equals_mm(rows, monkeypatch):
    monkeypatch.setattr(packed, "FORCE", True)  # packed on any CPU
    g = torch.Generator().manual_seed(0)
    # entries from 1 down to e^-80 and exact zeros (forbidden transitions), as a scaled matrix has
    matrix = (-80 * torch.rand(N, N // 2, generator=g)).exp() * (torch.rand(N, N // 2, generator=g) > 0.1)
    product = packed.RepeatedProduct(matrix, rows=4, products=100)
    assert product.packed is not None
    x = torch.rand(rows, N, generator=g)
    out = torch.empty(rows, N // 2)
    got = product(x, out=out)
    assert got.data_ptr() == out.data_ptr()
    want = x.double() @ matrix.double()
    torch.testing.assert_close(got.double(), want, rtol=2e-6, atol=1e-30)


def test_rule(monkeypatch):
    """On an AMD CPU (MKL's sgemm slow for few rows) by the sizes; elsewhere never."""
    big, small = torch.rand(N, N), torch.rand(256, 512)
    monkeypatch.setattr(packed, "slow_sgemm_cpu", lambda: False)
    assert not packed.worth_packing(big, rows=4, products=99)
    monkeypatch.setattr(packed, "slow_sgemm_cpu", lambda: True)
    assert packed.worth_packing(big, rows=4, products=99)
    assert not packed.worth_packing(small, rows=4, products=99)
    assert not packed.worth_packing(big, rows=3, products=99)
    assert not packed.worth_packing(big, rows=4, products=10)
    assert not packed.worth_packing(big.double(), rows=4, products=99)
    assert not packed.worth_packing(torch.empty(N, N, device="meta"), rows=4, products=99)
    assert not packed.worth_packing(torch.empty(8192, 4096), rows=4, products=99)  # 2^25 > MAX_ELEMENTS
    with torch.backends.mkldnn.flags(enabled=False):
        assert not packed.available()
        assert not packed.worth_packing(big, rows=4, products=99)


def test_the_cpu_vendor_is_read():
    """A yes or no, the same on each call (cached), True only on an AMD CPU."""
    packed.slow_sgemm_cpu.cache_clear()
    found = packed.slow_sgemm_cpu()
    try:
        with open("/proc/cpuinfo") as info:
            amd = "AuthenticAMD" in info.read()
    except OSError:
        amd = False
    assert found is amd and packed.slow_sgemm_cpu() is found


def test_force(monkeypatch):
    small = torch.rand(8, 8)
    monkeypatch.setattr(packed, "FORCE", True)
    assert packed.worth_packing(small, rows=1, products=1)
    assert not packed.worth_packing(small.double(), rows=1, products=1)  # oneDNN's packed ops: float32
    x = torch.rand(3, 8)
    torch.testing.assert_close(packed.RepeatedProduct(small, 3, 1)(x, out=torch.empty(3, 8)), x @ small)
    monkeypatch.setattr(packed, "FORCE", False)
    assert not packed.worth_packing(torch.rand(N, N), rows=4, products=99)


def _hmm(seed, forbid):
    """An HMM's potentials (float64): peaked transitions (some forbidden), Gaussian-scale emissions,
    ragged lengths."""
    g = torch.Generator().manual_seed(seed)
    trans = (torch.randn(N, N, generator=g, dtype=torch.float64) * 3).log_softmax(-1)
    if forbid:
        trans = trans.masked_fill(torch.rand(N, N, generator=g) < 0.3, float("-inf"))
        trans.fill_diagonal_(0.0)
    init = torch.randn(N, generator=g, dtype=torch.float64).log_softmax(-1)
    unary = -torch.rand(4, T, N, generator=g, dtype=torch.float64) * 300
    return (unary, trans, init), torch.tensor([T, 53, 17, 64])


def _low_rank(seed):
    """A low-rank chain's potentials (float64): R = N / 2, so N x R has 2^19 elements (packed)."""
    g = torch.Generator().manual_seed(seed)
    unary = -torch.rand(4, T, N, generator=g, dtype=torch.float64) * 300
    U, V = (torch.rand(N, N // 2, generator=g, dtype=torch.float64) for _ in range(2))
    return (unary, U, V), torch.tensor([T, 45, 2, 66])


def _log_z(factors, lengths, reference=False):
    """potentials -> log Z: the engine's, or (``reference``) plain autograd through the guarded
    products (``scaled.forward``, no ``RepeatedProduct``): an independent float64 reference."""
    as_scaled = exact.log_space if factors is DenseChain else low_rank_scaled
    if reference:
        return lambda *potentials: scaled.forward(as_scaled(factors(*potentials)), lengths)[0]
    return lambda *potentials: LinearChain(factors(*potentials), lengths=lengths).log_partition


def _log_z_and_grads(log_z_of, tensors):
    """log Z (detached) and its gradients with respect to each of ``tensors``."""
    leaves = [x.clone().requires_grad_() for x in tensors]
    log_z = log_z_of(*leaves)
    return log_z.detach(), torch.autograd.grad(log_z.sum(), leaves)


def _error(got, want):
    return float((got.double() - want).abs().max())


CASES = {  # name: (factors, potentials and lengths)
    "dense": (DenseChain, lambda: _hmm(1, forbid=False)),
    "dense, forbidden transitions": (DenseChain, lambda: _hmm(2, forbid=True)),  # blocks fail: guarded steps
    "low-rank": (LowRankChain, lambda: _low_rank(3)),  # two products a step
}


@pytest.mark.parametrize("case", list(CASES))
def test_no_grad_as_close_to_float64(monkeypatch, uses, case):
    factors, make = CASES[case]
    potentials, lengths = make()
    want = _log_z(factors, lengths, reference=True)(*potentials)
    low = [x.float() for x in potentials]
    with torch.no_grad():
        got = _log_z(factors, lengths)(*low)
    assert len(uses) >= T - 1 and all(uses)
    _no_packing(monkeypatch)
    uses.clear()
    with torch.no_grad():
        plain = _log_z(factors, lengths)(*low)
    assert uses and not any(uses)
    assert _error(got, want) <= max(2 * _error(plain, want), 1e-6 * float(want.abs().max()))


@pytest.mark.parametrize("case", list(CASES))
def test_gradients_as_close_to_float64(monkeypatch, uses, case):
    """The block forward and its backward (dense), or the guarded forward and its backward (blocks
    that fail, low-rank): every product by a shared matrix packed, forward and backward."""
    factors, make = CASES[case]
    potentials, lengths = make()
    want_z, want_grads = _log_z_and_grads(_log_z(factors, lengths, reference=True), potentials)
    low = [x.float() for x in potentials]
    got_z, got_grads = _log_z_and_grads(_log_z(factors, lengths), low)
    assert len(uses) >= 2 * (T - 1) and all(uses)
    _no_packing(monkeypatch)
    plain_z, plain_grads = _log_z_and_grads(_log_z(factors, lengths), low)
    assert _error(got_z, want_z) <= max(2 * _error(plain_z, want_z), 1e-6 * float(want_z.abs().max()))
    for got, plain, want in zip(got_grads, plain_grads, want_grads):
        assert _error(got, want) <= max(2 * _error(plain, want), 1e-5 * float(want.abs().max()))
