"""The core install (no extras): the engine and from_pretrained of the HMMs, PCFGs and HSMMs work without
Lightning, torchmetrics, jsonargparse, transformers, matplotlib, scipy or datasets; every part that needs
one of them says which extra to install; pyproject.toml's dependencies are that split."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from zoo.extras import EXTRAS

REPO = Path(__file__).resolve().parent.parent

# Runs first in the child: every optional module is unimportable, as in an environment without extras.
BLOCK = """
import importlib.abc, sys
OPTIONAL = {"lightning", "pytorch_lightning", "lightning_utilities", "torchmetrics", "jsonargparse",
            "transformers", "tokenizers", "matplotlib", "scipy", "datasets", "sklearn"}

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in OPTIONAL:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Blocker())
"""


def run_without_extras(code: str) -> str:
    """stdout of ``code`` run in a fresh interpreter in which no optional module can be imported."""
    child = subprocess.run(
        [sys.executable, "-c", BLOCK + textwrap.dedent(code)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    return child.stdout


def test_engine_and_pretrained_models_without_extras():
    out = run_without_extras(
        """
        import torch
        import zoo
        from zoo.inference import DenseChain, LinearChain

        chain = LinearChain(DenseChain(torch.randn(2, 4, 3), torch.randn(3, 3)), torch.tensor([4, 2]))
        assert torch.isfinite(chain.log_partition).all()
        lengths = torch.tensor([5, 3])
        g = torch.Generator().manual_seed(0)

        def ending_with_eos(tokens):  # a PCFG sentence's last token is its <eos> (id 0 in PTB's vocabulary)
            return tokens.index_put((torch.arange(2), lengths - 1), torch.tensor(0))

        batches = {
            "hmm_categorical_n512_d64.ptb_exact": lambda c: {"tokens": torch.randint(c["vocab_size"], (2, 5), generator=g)},
            "hmm_bernoulli_n256_d64.chorales_rank_space": lambda c: {"frames": (torch.rand(2, 5, c["num_keys"], generator=g) < 0.1).float()},
            "pcfg_nt10_pt20_d64.ptb_low_rank": lambda c: {"tokens": ending_with_eos(torch.randint(c["vocab_size"], (2, 5), generator=g))},
            "hsmm_gaussian_n8_dur32_in12_f12_d32.smartwatch_exact": lambda c: {"features": torch.randn(2, 5, c["input_dim"], generator=g)},
        }
        for tag, make in batches.items():
            model = zoo.from_pretrained(tag).eval()
            scores = model.log_likelihood({**make(model.config), "lengths": lengths})
            assert scores.shape == (2,) and torch.isfinite(scores).all(), (tag, scores)
        print(sorted(m for m in sys.modules if m.split(".")[0] in OPTIONAL))
        """  # noqa: E501
    )
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    "code, extra",
    [
        ("import zoo.tasks", "train"),
        ("import zoo.metrics", "train"),
        ("from zoo.data import PTBDataModule", "train"),
        ("import zoo; zoo.from_pretrained('vae_crf_n100_enc2x128_lstm128_v8000_d64.ptb_exact')", "vae"),
        ("from zoo.data.gpt2_bpe import gpt2_tokenizer; gpt2_tokenizer()", "vae"),
        ("from zoo.plot import plot_learning_curves; plot_learning_curves('.')", "plots"),
    ],
)
def test_a_missing_extra_is_one_line_naming_it(code, extra):
    out = run_without_extras(
        f"""
        from zoo.extras import MissingExtraError
        try:
            {code}
        except MissingExtraError as error:
            print(error)
        """
    )
    assert out.count("\n") == 1 and f"needs the {extra!r} extra" in out, out
    assert f"pip install 'structured-zoo[{extra}]'" in out


def test_the_zoo_command_says_which_extra():
    out = run_without_extras(
        """
        import contextlib, io
        from zoo.cli import main
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(["fit", "--config", "recipes/hmm/ptb-exact-small.yaml"])
        print(code, err.getvalue().strip())
        """
    )
    assert out.startswith("2 zoo: error: zoo fit / validate / test / predict needs the 'train' extra")
    assert out.count("\n") == 1


def test_pyproject_splits_the_dependencies_as_the_extras_say():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]

    def names(requirements):
        return {r.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip() for r in requirements}

    core = {"torch", "numpy", "huggingface_hub", "safetensors", "jinja2", "pyyaml"}
    assert names(project["dependencies"]) == core
    extras = project["optional-dependencies"]
    for extra, modules in EXTRAS.items():
        assert set(modules) <= names(extras[extra]), extra
    assert "structured-zoo[plots]" in extras["train"]  # zoo export draws learning curves
    assert extras["all"] == ["structured-zoo[train,plots,vae,data]"]
