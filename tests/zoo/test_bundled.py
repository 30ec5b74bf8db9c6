"""The pretrained checkpoints bundled in zoo/weights/: every tag loads offline through the registry,
its files match its tag, its card shows its results, a quick subset reproduces its numbers, and a
word model carries its training data's vocabulary."""

from __future__ import annotations

import csv
import functools
import importlib
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

import zoo
from zoo.hub.bundled import WEIGHTS, bundled_folders, data_module, quick_check, read_training_config
from zoo.hub.registry import architecture, pretrained_tag

REPO_ROOT = Path(__file__).resolve().parents[2]
TAGS = sorted(bundled_folders())
MAX_BYTES = 25_000_000  # at most 25 MB (decimal: 10^6 bytes) a checkpoint file
QUICK_TOLERANCE = 1e-3  # relative: the same weights on the same batches, up to summation order
WORD_MODELS = ("CategoricalHMM", "PCFG")  # trained on data with a zoo.data.Vocabulary
WORD_TAGS = [
    tag
    for tag in TAGS
    if json.loads((bundled_folders()[tag] / "config.json").read_text())["class_path"].endswith(WORD_MODELS)
]


def test_weights_are_bundled():
    assert TAGS, f"no pretrained checkpoints in {WEIGHTS}"
    assert set(TAGS) <= set(zoo.list_models(pretrained=True))


@pytest.mark.parametrize("tag", TAGS)
def test_tag_loads_offline_and_matches_its_name(tag, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = bundled_folders()[tag]
    assert Path(pretrained_tag(tag).source) == folder
    arch_name, _, label = tag.partition(".")
    data, _, backend_and_variant = label.partition("_")  # <data>_<backend>[_<variant>]
    model = zoo.from_pretrained(tag)
    config = json.loads((folder / "config.json").read_text())
    assert config["architecture"] == arch_name
    backend = model.config["backend"].replace("-", "_")
    assert backend_and_variant == backend or backend_and_variant.startswith(f"{backend}_")
    if backend_and_variant == "randomized_topk":  # the top-K baseline: no sampled states
        assert model.config["k2"] == 0
    assert type(model).__name__ == architecture(arch_name).class_path.rsplit(".", 1)[-1]
    assert str(next(model.parameters()).dtype) == f"torch.{config.get('compute_dtype', config['dtype'])}"
    same = zoo.create_model(tag, pretrained=True)
    assert all((a == b).all() for a, b in zip(model.state_dict().values(), same.state_dict().values()))
    assert (folder / "model.safetensors").stat().st_size <= MAX_BYTES


@pytest.mark.parametrize("tag", TAGS)
def test_card_and_results_agree(tag):
    folder = bundled_folders()[tag]
    results = json.loads((folder / "results.json").read_text())
    card = (folder / "README.md").read_text()
    assert "default_root_dir" not in (folder / "training_config.yaml").read_text()  # no machine path
    assert results["metrics"] and all(math.isfinite(v) for v in results["metrics"].values())
    assert {"test/nll"} <= set(results["metrics"])
    for name, value in results["metrics"].items():
        assert f"| `{name}` | {value:.4g} |" in card
    training = results["training"]
    assert training["hardware"] in card and str(training["minutes"]) in card
    assert read_training_config(folder)["model"]["init_args"]["model"]["init_args"] == {
        k: v for k, v in json.loads((folder / "config.json").read_text())["init_args"].items()
        if k in read_training_config(folder)["model"]["init_args"]["model"]["init_args"]
    }  # fmt: skip
    docs = (REPO_ROOT / "docs" / "results.md").read_text()
    rows = [line for line in docs.splitlines() if line.startswith(f"| `{tag}` |")]
    assert len(rows) == 1, (
        f"docs/results.md needs one row for {tag}: python scripts/train_pretrained.py --report-only"
    )
    assert f"| {results['metrics']['test/nll']:.4g}" in rows[0], (
        f"docs/results.md disagrees with {tag}'s card"
    )


@functools.cache
def _training_vocab(data_section: str):
    """The vocabulary of a training configuration's data (its JSON text: one build per data set)."""
    return data_module({"data": json.loads(data_section)}).vocab


@pytest.mark.parametrize("tag", WORD_TAGS)
def test_word_models_carry_their_training_vocabulary(tag):
    folder = bundled_folders()[tag]
    model = zoo.from_pretrained(tag)
    vocab = _training_vocab(json.dumps(read_training_config(folder)["data"], sort_keys=True))
    assert (folder / "vocab.json").is_file() and model.vocab == vocab and model.vocab.size == 10000
    sentence = "the company said its profit rose"
    assert model.vocab.encode(sentence, add_eos=True) == vocab.encode(sentence, add_eos=True)
    assert model.vocab.encode(sentence, add_eos=True) == [2, 37, 15, 27, 177, 119, 0]  # PTB's ids


def _smallest() -> str:
    return min(TAGS, key=lambda t: (bundled_folders()[t] / "model.safetensors").stat().st_size)


@pytest.mark.parametrize("tag", [_smallest()] if TAGS else [])
def test_quick_subset_reproduces_the_recorded_number(tag):
    folder = bundled_folders()[tag]
    expected = json.loads((folder / "results.json").read_text())["quick_check"]
    measured = quick_check(zoo.from_pretrained(tag), read_training_config(folder), expected["batches"])
    assert measured["sequences"] == expected["sequences"]
    assert measured["nll"] == pytest.approx(expected["nll"], rel=QUICK_TOLERANCE)


def test_a_non_editable_install_carries_the_weights(tmp_path):
    """setuptools' package data: ``pip install . --target`` copies zoo/weights/ with every file
    (built from a copy of the sources, so no earlier build/ folder can leave stale files)."""
    import shutil

    if not TAGS:
        pytest.skip("no bundled checkpoints")
    pytest.importorskip("setuptools", reason="building offline (--no-build-isolation) needs setuptools")
    source = tmp_path / "source"
    shutil.copytree(REPO_ROOT / "zoo", source / "zoo", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", str(source), "--no-deps", "--no-build-isolation",
         "--target", str(tmp_path / "site"), "--quiet"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    for tag in TAGS:
        installed = tmp_path / "site" / "zoo" / "weights" / tag
        assert {p.name for p in installed.iterdir()} == {p.name for p in bundled_folders()[tag].iterdir()}


def test_readme_main_job_block_runs():
    """The README's Python example of the main job (bundled checkpoints, offline)."""
    import re

    import torch

    text = (REPO_ROOT / "README.md").read_text()
    block = re.search(r"## Set-up and the main job.*?```python\n(.*?)```", text, re.S).group(1)
    for tag in re.findall(r'"(\w+\.\w+)"', block):
        if tag not in TAGS:
            pytest.skip(f"{tag} is not bundled")
    torch.manual_seed(0)
    exec(compile(block, "README.md", "exec"), {})


DEMO_OUTPUT = {  # what scripts/pretrained_demo.py prints for each bundled family
    "hmm_categorical": ("log p =", "perplexity", "most likely states (Viterbi)", "HMM sample:"),
    "hmm_bernoulli": ("nats per frame",),
    "pcfg": ("MBR parse", "sample:"),
    "hsmm": ("segments found",),
    "vae": ("log p ~", "most likely states of q(z | y)", "sample:"),
}


def test_readme_main_job_script_runs_in_under_a_minute_of_cpu():
    """scripts/pretrained_demo.py uses a checkpoint of each bundled family, offline."""
    env = {**__import__("os").environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "2"}
    proc = subprocess.run(
        [sys.executable, "scripts/pretrained_demo.py"], cwd=REPO_ROOT, env=env, capture_output=True,
        text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    for prefix, markers in DEMO_OUTPUT.items():
        if any(tag.startswith(prefix) for tag in TAGS):
            assert all(marker in proc.stdout for marker in markers), f"{prefix}: {markers}\n{proc.stdout}"
    seconds = float(proc.stdout.rsplit("this took ", 1)[1].split()[0])
    assert seconds < 60, proc.stdout


def test_cli_fine_tunes_from_a_bundled_tag_offline(tmp_path):
    """``zoo fit --model.init_args.init_from <tag>``: the card's fine-tuning command, a few steps."""
    tag = _smallest()
    folder = bundled_folders()[tag]
    env = {**__import__("os").environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "zoo.cli", "fit", "--config", str(folder / "training_config.yaml"),
         "--model.init_args.init_from", tag, "--trainer.max_steps", "2", "--trainer.limit_val_batches", "1",
         "--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar", "false"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list(tmp_path.rglob("*.ckpt")), "the fine-tuning run wrote no checkpoint"


def test_results_keep_training_and_quick_check_notes():
    from zoo.hub.cards import read_results

    results = {"dataset": "ptb", "metrics": {"test/nll": 5.0}, "training": {"minutes": 4.1}, "other": 1}
    assert read_results(results) == {
        "dataset": "ptb",
        "metrics": {"test/nll": 5.0},
        "training": {"minutes": 4.1},
    }
    with pytest.raises(ValueError, match="'quick_check' must be a dict"):
        read_results({"metrics": {"test/nll": 5.0}, "quick_check": 3.0})


def test_init_from_a_float16_folder_casts_into_the_float32_model(tmp_path):
    """A half-precision checkpoint (as bundled where float16 does not move the metric) fine-tunes and
    evaluates in a float32 task model: its weights are cast exactly, nothing else changes."""
    import torch

    from zoo.tasks import LikelihoodTask

    torch.manual_seed(0)
    model = zoo.create_model("pcfg_nt10_pt20_d64", backend="low-rank")
    folder = model.save_pretrained(tmp_path / "half", storage_dtype="float16")
    task = LikelihoodTask(zoo.create_model("pcfg_nt10_pt20_d64", backend="low-rank"), init_from=str(folder))
    for name, value in task.model.state_dict().items():
        rounded = model.state_dict()[name].half().float()
        assert value.dtype == torch.float32 and torch.equal(value, rounded), name


def test_a_vae_quick_check_is_what_zoo_test_gives_on_those_batches(tmp_path):
    """The quick check drew all batches' importance samples from one generator seeded 0, while zoo test
    seeds those of batch i with i: a card's quick check was not its own command's number (audit)."""
    from zoo.cli import main

    tag = "vae_crf_n100_enc2x64_lstm128_v8000_d56.ptb_exact"
    folder = bundled_folders()[tag]
    csv_logger = "lightning.pytorch.loggers.CSVLogger"
    logger = json.dumps({"class_path": csv_logger, "init_args": {"save_dir": str(tmp_path)}})
    assert main(["test", "--config", str(folder / "training_config.yaml"), "--model.init_args.init_from",
                 str(folder), "--trainer.limit_test_batches", "2", "--trainer.logger", logger,
                 "--trainer.default_root_dir", str(tmp_path)]) == 0  # fmt: skip
    (metrics,) = tmp_path.rglob("metrics.csv")  # not --results: it records whole splits only
    (row,) = [r for r in csv.DictReader(metrics.open()) if r.get("test/nll")]
    measured = quick_check(zoo.from_pretrained(tag), read_training_config(folder))
    assert measured["nll"] == pytest.approx(float(row["test/nll"]), rel=1e-6)
    recorded = json.loads((folder / "results.json").read_text())["quick_check"]
    assert measured["nll"] == pytest.approx(recorded["nll"], rel=1e-5)


def test_flagship_anchors_say_when_the_papers_test_set_is_another():
    """The papers' PCFG perplexities are on Kim et al.'s PTB trees (ptb-wsj), ours on Mikolov's text: the
    flagship table set them beside ours as if on the same test set (audit). The HMMs' are on ours; the
    chorales have none (other corpora are not shown)."""
    scripts = str(REPO_ROOT / "scripts")
    sys.path.insert(0, scripts)
    try:
        anchors = importlib.import_module("train_pretrained").published_anchors
    finally:
        sys.path.remove(scripts)

    def shown(tag: str, metric: str) -> str:
        folder = bundled_folders()[tag]
        return anchors(folder, json.loads((folder / "results.json").read_text()), [metric])

    pcfg = shown("pcfg_nt1000_pt2000_d64.ptb_rank_space", "test/ppl")
    assert pcfg.startswith("published on ptb-wsj, not this test set: PCFG, NT 30, PT 60: `test/ppl` 252.6")
    assert shown("hmm_categorical_n1024_d128.ptb_exact", "test/ppl").startswith("published: softmax HMM")
    assert shown("hmm_bernoulli_n1024_d128.chorales_exact", "test/nll") == ""
