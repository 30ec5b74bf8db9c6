"""Under bfloat16 autocast (Lightning's "bf16-mixed"), the engine still computes in float32: the
float32 checks of every structure pass inside ``torch.autocast``. Without the engine turning autocast
off, each matrix product would run in bfloat16 and log Z drift by ~1e-4 nats a position.
(CPU autocast here; ``pytest --device cuda --autocast bf16`` runs the whole suite under CUDA autocast.)"""

import pytest
import torch

from numerics.checks import (
    CHAIN_BACKENDS,
    SM_BACKENDS,
    TREE_BACKENDS,
    chain_dist,
    check_chain,
    check_sm,
    check_tree,
    sm_dist,
    tree_dist,
)
from numerics.strategies import chain_case, chain_factors, sm_case, sm_factors, tree_case, tree_grammar
from zoo.inference import (
    DenseChain,
    DenseGrammar,
    DenseSemiMarkov,
    LinearChain,
    SemiMarkovChain,
    TreeDistribution,
)

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
    ("chain lowrank, normalized", lambda: chain_factors(
        chain_case(2, kind="lowrank", B=2, T=20, N=16, R=4), torch.float32, normalize=True,
        log_rank_weights=None)),
    ("semi-Markov lowrank, normalized", lambda: sm_factors(
        sm_case(2, kind="lowrank", B=2, T=30, N=4, D=8), torch.float32, normalize=True)),
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


def _results(dist, leaf=None) -> tuple[dict, torch.Tensor | None]:
    """Every operation of a distribution that takes no input but a seeded generator (an operation the
    backend refuses gives its error's type), and the summed log Z to differentiate (None without a
    ``leaf``)."""
    out = {}
    for op in ("log_partition", "marginals", "pairwise_marginals", "segment_marginals", "span_marginals",
               "entropy", "argmax", "mbr", "sample", "rsample", "log_prob"):  # fmt: skip
        if not hasattr(type(dist), op):
            continue
        try:
            if op in ("sample", "rsample"):
                value = getattr(dist, op)(generator=torch.Generator().manual_seed(7))
            elif op == "log_prob":
                value = dist.log_prob(dist.argmax)
            elif op == "mbr":
                value = dist.mbr()
            else:
                value = getattr(dist, op)
        except (ValueError, TypeError, NotImplementedError) as error:
            value = type(error)
        out[op] = value.detach() if isinstance(value, torch.Tensor) else value
    return out, None if leaf is None else dist.log_partition.sum()


def _same(a, b) -> bool:
    """Bit for bit on the CPU; within 1e-6 on a GPU, whose atomic additions make two runs differ in the
    last bits (a bfloat16 product is off by 1e-3 and more)."""
    if isinstance(a, torch.Tensor):
        if not (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape):
            return False
        if a.device.type == "cpu" or not a.is_floating_point():
            return torch.equal(a, b)
        return torch.allclose(a, b, rtol=1e-6, atol=1e-6, equal_nan=True)
    if isinstance(a, (list, tuple)):
        return isinstance(b, type(a)) and len(a) == len(b) and all(map(_same, a, b))
    return a == b


SMALL_CHAIN = dict(B=2, T=30, N=8)
CASES = [
    *[(f"chain {kind} [{backend}]", lambda k=kind, b=backend: chain_dist(
        chain_case(5, kind=k, **SMALL_CHAIN, R=4 if k != "dense" else None), CHAIN_BACKENDS[b], torch.float32,
        grad=True))
      for kind in ("dense", "lowrank", "rankspace") for backend in CHAIN_BACKENDS],
    *[(f"semi-Markov {kind} [{backend}]", lambda k=kind, b=backend: sm_dist(
        sm_case(6, kind=k, B=2, T=24, N=3, D=4), SM_BACKENDS[b], torch.float32, grad=True))
      for kind in ("dense", "lowrank", "rankspace", "edge") for backend in SM_BACKENDS],
    *[(f"tree {kind} [{backend}]", lambda k=kind, b=backend: (tree_dist(
        tree_case(7, kind=k, B=2, T=8, NT=3, PT=4), TREE_BACKENDS[b], torch.float32), None))
      for kind in ("dense", "lowrank", "rankspace") for backend in TREE_BACKENDS],
]  # fmt: skip


@pytest.mark.parametrize("name,build", CASES, ids=[name for name, _ in CASES])
def test_autocast_changes_no_result_of_the_engine(name, build):
    """Every operation, with the container built and the operation run under bfloat16 autocast, as in a
    bf16-mixed training step, gives bit for bit what it gives without autocast, and so does the
    gradient of log Z taken after it, outside autocast (where Lightning and torch's AMP recipe take
    it): a seed-independent check that no product anywhere runs in bfloat16 (``_same``)."""
    try:
        made = build()
    except TypeError as error:  # a backend that takes other containers (the capability table)
        pytest.skip(str(error))
    with torch.autocast(torch.get_default_device().type, dtype=torch.bfloat16):
        built = build()
        under_autocast, log_z_under_autocast = _results(*built)
    plain, log_z = _results(*made)
    if log_z is not None:
        (plain["grad"],) = torch.autograd.grad(log_z, made[1])
        (under_autocast["grad"],) = torch.autograd.grad(log_z_under_autocast, built[1])
    assert plain.keys() == under_autocast.keys()
    different = [op for op in plain if not _same(plain[op], under_autocast[op])]
    assert not different, (name, different)


FLOAT16_BUILDERS = {
    "chain": lambda u, t: LinearChain(DenseChain(u, t)),
    "semi-Markov": lambda u, t: SemiMarkovChain(DenseSemiMarkov(u, t, t[:, :3])),
    "tree": lambda u, t: TreeDistribution(DenseGrammar(t[0, :2], u[0, :2, :4].unsqueeze(-1).expand(2, 4, 4)),
                                          u[:, :6, 2:]),
}  # fmt: skip


@pytest.mark.parametrize("structure", FLOAT16_BUILDERS)
def test_float16_under_float16_autocast_is_computed_in_float32(structure):
    """Under float16 autocast (Lightning's 16-mixed) a network may make float16 potentials: they are
    computed in float32, as bfloat16 ones are (log Z, in float32, of the values as given); outside
    autocast float16 stays refused."""
    g = torch.Generator().manual_seed(4)
    unary, transition = torch.randn(2, 40, 4, generator=g).half(), torch.randn(4, 4, generator=g).half()
    build = FLOAT16_BUILDERS[structure]
    expected = build(unary.float(), transition.float()).log_partition
    with torch.autocast("cpu", dtype=torch.float16):
        got = build(unary, transition).log_partition
    assert got.dtype == torch.float32 and torch.equal(got, expected)
    with pytest.raises(TypeError, match="float16"):
        build(unary, transition)


def test_a_model_under_float16_autocast():
    """A PTB HMM's log-likelihood under float16 autocast: its networks' products in float16 (within
    0.1 nats of float32 on a sentence), the dynamic program in float32; and it trains (a gradient)."""
    from zoo.models import CategoricalHMM

    torch.manual_seed(0)
    model = CategoricalHMM(vocab_size=50, num_states=16, embedding_dim=32, hidden_dim=32)
    batch = {"tokens": torch.randint(50, (2, 12)), "lengths": torch.tensor([12, 7])}
    expected = model.log_likelihood(batch)
    with torch.autocast("cpu", dtype=torch.float16):
        got = model.log_likelihood(batch)
    torch.testing.assert_close(got, expected, rtol=0, atol=0.1)
    got.sum().backward()
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())
