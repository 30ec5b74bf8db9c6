"""zoo.inference.precision: every engine call runs without autocast and with "highest" float32 matmul
precision, and gives the caller's settings back afterwards, also when the call raises, and when calls
of several threads overlap; distributions copy and pickle."""

from __future__ import annotations

import copy
import pickle
import threading

import pytest
import torch

from zoo.inference import (
    DenseChain,
    DenseGrammar,
    DenseSemiMarkov,
    LinearChain,
    SemiMarkovChain,
    TreeDistribution,
)
from zoo.inference.precision import FullPrecision, engine_call_running, full_precision


class Probe:
    """An engine that reports the precision settings it runs under."""

    kind = "probe"

    def settings(self):
        return torch.is_autocast_enabled("cpu"), torch.get_float32_matmul_precision()

    def fails(self):
        raise RuntimeError("inside")


@pytest.fixture
def tf32_requested():
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    yield
    torch.set_float32_matmul_precision(before)


@pytest.mark.usefixtures("tf32_requested")
def test_engine_methods_run_in_full_float32_and_restore_the_caller_settings():
    engine = FullPrecision(Probe())
    assert engine.kind == "probe"
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert engine.settings() == (False, "highest")
        assert torch.is_autocast_enabled("cpu")
        with pytest.raises(RuntimeError, match="inside"):
            engine.fails()
        assert torch.is_autocast_enabled("cpu")
    assert torch.get_float32_matmul_precision() == "high"


def test_full_precision_is_a_no_op_where_nothing_is_lowered():
    with full_precision():
        assert not torch.is_autocast_enabled("cpu")
        assert torch.get_float32_matmul_precision() == "highest"
    assert torch.get_float32_matmul_precision() == "highest"


@pytest.mark.usefixtures("tf32_requested")
def test_chain_log_partition_and_gradient_are_the_same_under_autocast():
    g = torch.Generator().manual_seed(0)
    unary = (torch.randn(2, 200, 32, generator=g) * 3).requires_grad_()
    transition = torch.randn(32, 32, generator=g).log_softmax(-1)
    plain = LinearChain(DenseChain(unary, transition)).log_partition
    (grad,) = torch.autograd.grad(plain.sum(), unary)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = LinearChain(DenseChain(unary, transition)).log_partition
        (mixed_grad,) = torch.autograd.grad(mixed.sum(), unary)  # the backward under autocast too
    assert mixed.dtype == torch.float32
    torch.testing.assert_close(mixed, plain, rtol=0, atol=0)
    torch.testing.assert_close(mixed_grad, grad, rtol=0, atol=0)


@pytest.mark.usefixtures("tf32_requested")
def test_the_matmul_precision_is_restored_by_the_last_engine_call_of_any_thread():
    """The matmul precision is one setting of the process: a thread's engine call that ends while
    another thread's still runs leaves it at "highest" (it restored the caller's "high" then, and the
    other call's remaining products ran in TF32 where there is TF32); the last one restores it. Each
    thread counts only its own calls as running (the SIGTERM handler asks about the main thread's)."""
    inside, release, seen = threading.Event(), threading.Event(), {}

    def other_thread_call():
        with full_precision():
            seen["other running"] = engine_call_running()
            inside.set()
            release.wait(10)

    worker = threading.Thread(target=other_thread_call)
    worker.start()
    assert inside.wait(10)
    assert not engine_call_running()  # this thread runs none
    with full_precision():
        assert engine_call_running() and torch.get_float32_matmul_precision() == "highest"
        with full_precision():  # nested in this thread
            pass
        assert torch.get_float32_matmul_precision() == "highest"
    assert torch.get_float32_matmul_precision() == "highest"  # the other thread's call still runs
    release.set()
    worker.join(10)
    assert seen["other running"] and not engine_call_running()
    assert torch.get_float32_matmul_precision() == "high"


@pytest.mark.parametrize("structure", ["chain", "semi-Markov", "tree"])
def test_distributions_copy_and_pickle(structure):
    """``copy.deepcopy`` and ``pickle`` of a distribution (its engine runs under ``FullPrecision``,
    whose attribute pass-through once recursed without end on a copy), before and after an operation:
    the copy gives the same answers."""
    g = torch.Generator().manual_seed(0)
    unary, transition = torch.randn(2, 6, 3, generator=g), torch.randn(3, 3, generator=g)
    root, rules = torch.randn(2, generator=g), torch.randn(2, 4, 4, generator=g)  # NT 2, PT 2
    build = {
        "chain": lambda: LinearChain(DenseChain(unary, transition)),
        "semi-Markov": lambda: SemiMarkovChain(DenseSemiMarkov(unary, transition, torch.zeros(3, 2))),
        "tree": lambda: TreeDistribution(DenseGrammar(root, rules), unary[:, :5, :2]),
    }[structure]
    fresh, used = build(), build()
    expected = used.log_partition
    for original in (fresh, used):
        for copied in (copy.deepcopy(original), pickle.loads(pickle.dumps(original))):
            assert torch.equal(copied.log_partition, expected)
