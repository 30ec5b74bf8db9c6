"""zoo.inference.precision: every engine call runs without autocast and with "highest" float32 matmul
precision, and gives the caller's settings back afterwards, also when the call raises."""

from __future__ import annotations

import pytest
import torch

from zoo.inference import DenseChain, LinearChain
from zoo.inference.precision import FullPrecision, full_precision


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
