"""Under bfloat16 autocast (Lightning's "bf16-mixed"), the engine still computes in float32: the
float32 checks of every structure pass inside ``torch.autocast``. Without the engine turning autocast
off, each matrix product would run in bfloat16 and log Z drift by ~1e-4 nats a position.
(CPU autocast here; ``pytest --device cuda --autocast bf16`` runs the whole suite under CUDA autocast.)"""

import pytest
import torch

from numerics.checks import check_chain, check_sm, check_tree
from numerics.strategies import chain_case, chain_factors, sm_case, sm_factors, tree_case, tree_grammar

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


def _tensors(container, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor a container holds, also inside the zoo objects it holds (a grammar's rules)."""
    found = {}
    for name, value in vars(container).items():
        if isinstance(value, torch.Tensor):
            found[prefix + name] = value
        elif type(value).__module__.startswith("zoo."):
            found.update(_tensors(value, f"{prefix}{name}."))
    return found


BUILDERS = [
    *[(f"chain {k}", lambda k=k: chain_factors(chain_case(2, kind=k, B=2, T=20, N=16, R=4), torch.float32))
      for k in ("embedding", "lowrank", "rankspace")],
    ("chain dense", lambda: chain_factors(chain_case(2, kind="dense", B=2, T=20, N=16), torch.float32)),
    *[(f"semi-Markov {k}", lambda k=k: sm_factors(sm_case(2, kind=k, B=2, T=30, N=4, D=8), torch.float32))
      for k in ("dense", "lowrank", "rankspace", "edge")],
    *[(f"tree {k}", lambda k=k: tree_grammar(tree_case(3, kind=k, B=2, T=10, NT=3, PT=5), torch.float32))
      for k in ("dense", "lowrank", "rankspace")],
]  # fmt: skip


@pytest.mark.parametrize("name,build", BUILDERS, ids=[name for name, _ in BUILDERS])
def test_containers_are_built_in_float32_under_autocast(name, build):
    """A container built under bfloat16 autocast (a training step's bf16-mixed) holds the very tensors one
    built without it: LowRankChain's row normalizer was once a bfloat16 product, 0.4% off a row and
    ~1 nat off log Z at T = 200, with no error."""
    plain = _tensors(build())
    with torch.autocast(torch.get_default_device().type, dtype=torch.bfloat16):
        container = build()
        under_autocast = _tensors(container)
        init = getattr(container, "init", None)
    assert under_autocast.keys() == plain.keys()
    for key, tensor in plain.items():
        assert under_autocast[key].dtype == tensor.dtype, (name, key)
        assert torch.equal(under_autocast[key], tensor), (name, key)
    if isinstance(init, torch.Tensor):  # a computed property (RankSpaceChain's first-state scores)
        assert torch.equal(init, build().init), name
