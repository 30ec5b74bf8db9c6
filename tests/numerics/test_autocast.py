"""Under bfloat16 autocast (Lightning's "bf16-mixed"), the engine still computes in float32: the
float32 checks of every structure pass inside ``torch.autocast``. Without the engine turning autocast
off, each matrix product would run in bfloat16 and log Z drift by ~1e-4 nats a position.
(CPU autocast here; ``pytest --device cuda --autocast bf16`` runs the whole suite under CUDA autocast.)"""

import pytest
import torch

from numerics.checks import check_chain, check_sm, check_tree
from numerics.strategies import chain_case, sm_case, tree_case

OPS = ("log_partition", "marginals", "entropy")
CHAINS = [("dense", "native"), ("dense", "randomized-topk"), ("lowrank", "native"), ("rankspace", "native")]
SEMI_MARKOV = [("dense", "native"), ("lowrank", "native"), ("rankspace", "native")]
TREES = [("dense", "native"), ("lowrank", "native"), ("rankspace", "native")]


@pytest.fixture
def bf16_autocast():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        yield


@pytest.mark.usefixtures("bf16_autocast")
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("kind,backend", CHAINS)
def test_chain_under_autocast(kind, backend, op):
    check_chain(chain_case(1, kind=kind, B=2, T=200, N=16, R=4 if kind != "dense" else None), backend, op)


@pytest.mark.usefixtures("bf16_autocast")
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("kind,backend", SEMI_MARKOV)
def test_semimarkov_under_autocast(kind, backend, op):
    check_sm(sm_case(2, kind=kind, B=2, T=120, N=4, D=8), backend, op)


@pytest.mark.usefixtures("bf16_autocast")
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("kind,backend", TREES)
def test_tree_under_autocast(kind, backend, op):
    check_tree(tree_case(3, kind=kind, B=2, T=30, NT=3, PT=5), backend, op)
