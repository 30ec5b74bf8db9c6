"""Model cards: the front matter parses and has what the Hub needs; sections and numbers are ours."""

from __future__ import annotations

import json
import sys
import types

import pytest
import torch
import yaml
from huggingface_hub import ModelCard
from zoo_testlib import small_overrides

import zoo
from zoo.cli import main
from zoo.hub.cards import METRICS, dataset_name, read_results, render_card
from zoo.hub.pretrained import read_config

SECTIONS = ["## Usage", "## Training", "## Evaluation", "## Results", "## Limitations", "## Citation"]
TRAINING = "model:\n  class_path: zoo.tasks.LikelihoodTask\ndata:\n  class_path: zoo.data.PTBDataModule\n"


def config_of(name: str, backend: str, tmp_path) -> dict:
    torch.manual_seed(0)
    model = zoo.create_model(name, backend=backend, **small_overrides(name, backend))
    return read_config(model.save_pretrained(tmp_path / name))


@pytest.mark.parametrize(
    "name, backend, dataset, metric",
    [
        ("hmm_categorical_n16384_d256", "rank-space", "ptb", "ppl"),
        ("hmm_bernoulli_n2048_d256", "low-rank", "JSB_Chorales", "nll"),
        ("pcfg_nt30_pt60_d256", "low-rank", "ptb-wsj", "sentence_f1"),
        ("hsmm_gaussian_n1024_dur60_in3200_f200_d256", "low-rank", "crosstask", "nll_sequence"),
        ("vae_crf_n2000_enc12x768_lstm256_d256", "randomized", "mscoco", "nll_sentence"),
    ],
)
def test_card_of_every_family(tmp_path, name, backend, dataset, metric):
    results = {
        "dataset": dataset,
        "metrics": {f"val/{metric}": 1.5, f"test/{metric}": 2.25, "val/nll_std": 0.1},
    }
    card = render_card(
        config_of(name, backend, tmp_path), results=results, training_config=TRAINING, repo_id="org/m"
    )
    parsed = ModelCard(str(card))
    data = parsed.data.to_dict()
    assert data["library_name"] == "structured-zoo" and data["license"] == "mit"
    assert (
        data["datasets"] == [dataset]
        and "structured-zoo" in data["tags"]
        and f"backend-{backend}" in data["tags"]
    )
    metric_type = {"ppl": "perplexity", "sentence_f1": "f1"}.get(metric, "nll")
    assert data["metrics"] == [metric_type]
    index = data["model-index"][0]
    assert index["name"].endswith(f"({backend})")
    measured = {(r["dataset"]["split"], r["metrics"][0]["value"]) for r in index["results"]}
    assert measured == {("validation", 1.5), ("test", 2.25)}  # the std is in the table, not the index
    text = parsed.text
    positions = [text.index(section) for section in SECTIONS]
    assert positions == sorted(positions)
    assert 'zoo.from_pretrained("org/m")' in text and "HF_HUB_OFFLINE=1" in text
    assert "zoo fit --config training_config.yaml" in text and "class_path: zoo.data.PTBDataModule" in text
    assert "zoo test --config training_config.yaml --model.init_args.init_from org/m" in text
    assert f"| `test/{metric}` | 2.25 |" in text and "| `val/nll_std` | 0.1 |" in text
    assert "Published numbers for comparison" in text  # the papers' numbers for this family and dataset
    assert "@inproceedings" in text


def test_card_without_results_or_training_config(tmp_path):
    card = render_card(config_of("hmm_categorical_n512_d64", "exact", tmp_path))
    data = ModelCard(str(card)).data.to_dict()
    assert "model-index" not in data and "metrics" not in data and "datasets" not in data
    assert "No evaluation results were recorded" in card.text
    assert "was not recorded with this checkpoint" in card.text
    assert 'zoo.from_pretrained("path/to/this/folder")' in card.text


def test_papers_numbers_are_shown_beside_ours(tmp_path):
    results = {"dataset": "ptb", "metrics": {"test/ppl": 262.8}}
    text = render_card(config_of("hmm_categorical_n512_d64", "exact", tmp_path), results=results).text
    row = "| rank-space HMM | 2^14..2^15 states, rank 2048..8192 | ptb | `test/ppl` | 126.4 | Yang et al."
    assert row in text
    assert "| `test/ppl` | 262.8 |" in text


def test_segmentation_card_has_its_metrics_and_the_papers_video_nll(tmp_path):
    metrics = {"test/nll_sequence": 151234.5, "test/frame_accuracy": 0.42, "test/boundary_f1": 0.31}
    results = {"dataset": "crosstask", "metrics": metrics}
    config = config_of("hsmm_gaussian_n128_dur60_in3200_f200_d256", "exact", tmp_path)
    card = render_card(config, results=results)
    data = card.data.to_dict()
    assert data["metrics"] == ["accuracy", "f1", "nll"]
    results = data["model-index"][0]["results"]
    rows = {m["name"]: m["value"] for r in results for m in r["metrics"]}
    assert rows == {
        "test negative log-likelihood (nats per sequence)": 151234.5,
        "test frame accuracy under the best one-to-one label map (fraction)": 0.42,
        "test segment boundary F1 (fraction)": 0.31,
    }
    text = card.text
    assert (
        "| LHSMM | 2^10 states, rank 2^4 | crosstask | `test/nll_sequence` | 142300.0 | Chiu et al." in text
    )
    assert "Raw frames of 5 features are projected to them by the whitened PCA" in text  # the test size
    assert "`frame_accuracy` is the fraction of frames" in text and "`boundary_f1`" in text


def test_smartwatch_card_shows_the_baseline_on_the_same_data_and_the_segment_ratio(tmp_path):
    metrics = {"test/frame_accuracy": 0.77, "test/boundary_f1": 0.65, "test/segment_ratio": 1.71}
    baseline = {"test/frame_accuracy": 0.68, "test/boundary_f1": 0.5, "test/segment_ratio": 2.9}
    results = {"dataset": "smartwatch", "metrics": metrics, "baselines": {"plain HMM (EM)": baseline}}
    config = config_of("hsmm_gaussian_n8_dur32_in12_f12_d32", "exact", tmp_path)
    text = render_card(config, results=results).text
    assert "Baselines measured on the same data and split" in text
    assert "| plain HMM (EM) | `test/segment_ratio` | 2.9 |" in text
    assert "| `test/segment_ratio` | 1.71 |" in text
    assert "`segment_ratio` is the number of predicted segments" in text
    assert "standardized by its own mean and standard deviation" in text  # the recipe's standardize_sequences
    assert "self-transitions are not allowed" in text
    with pytest.raises(ValueError, match="results 'baselines' must be a dict"):
        read_results({"metrics": metrics, "baselines": [baseline]})


def test_vae_card_names_its_encoder_and_the_papers_table(tmp_path):
    config = config_of("vae_crf_n100_enc12x768_lstm256_d256", "randomized", tmp_path)
    config["init_args"].update(k1=2, k2=0)  # the top-K baseline
    text = render_card(config, results={"dataset": "mscoco", "metrics": {"test/nll_sentence": 41.2}}).text
    assert "randomly initialised" in text and "K2 = 0 sampled states a position: the top-K baseline" in text
    assert (
        "| RDP-2000 | 2000 states, K1 = K2 = 200 | mscoco | `test/nll_sentence` | 39.48 | Fu et al." in text
    )
    small = zoo.create_model("vae_crf_n100_enc2x128_lstm128_v8000_d64")
    text = render_card(read_config(small.save_pretrained(tmp_path / "small"))).text
    assert "2 layers of 128, randomly initialised" in text and "K1 = 10 top and K2 = 10 sampled" in text
    assert "(the 8000 most frequent ids of its training data scored one by one" in text


def test_papers_on_other_data_are_shown_marked_as_not_comparable(tmp_path):
    config = config_of("vae_crf_n100_enc2x64_lstm128_v8000_d56", "exact", tmp_path)
    text = render_card(config, results={"dataset": "ptb-short", "metrics": {"test/nll_sentence": 60.2}}).text
    assert "| FULL-100 | 100 states, exact | mscoco | `test/nll_sentence` | 39.71 | Fu et al." in text
    assert "measured on other data than this model's\nptb-short: they show the scale" in text
    hmm_results = {"dataset": "ptb", "metrics": {"test/ppl": 262.8}}
    hmm = render_card(config_of("hmm_categorical_n512_d64", "exact", tmp_path / "hmm"), hmm_results)
    assert "| softmax HMM | 2^14 states | ptb |" in hmm.text and "other data" not in hmm.text


def test_tree_files_are_named_by_what_they_are(tmp_path, monkeypatch):
    """Trees are "ptb-wsj" (the papers' F1 data) only when the test split is WSJ section 23's 2,416
    trees; other trees are named by their folder and digest."""
    folder = tmp_path / "my-trees"
    folder.mkdir()
    tree = "(S (NP (DT the) (NN cat)) (VP (VBD sat)))\n"
    files = {}
    for split, count in (("train", 3), ("valid", 2), ("test", 2)):
        (folder / f"{split}.txt").write_text(tree * count)
        files[split] = str(folder / f"{split}.txt")
    data = {"class_path": "zoo.data.PCFGDataModule", "init_args": {"tree_files": files}}
    name = dataset_name(data)
    assert name.startswith("trees in my-trees (sha256 ") and name != dataset_name(
        {**data, "init_args": {"tree_files": {**files, "valid": files["train"]}}}
    )
    monkeypatch.setattr("zoo.data.pcfg.WSJ_TEST_TREES", 2)
    assert dataset_name(data) == "ptb-wsj"


def test_read_results_formats_and_errors(tmp_path):
    lightning = [{"test/ppl": 10.0, "test/nll": 2.3}]
    assert read_results(lightning, dataset="ptb") == {
        "dataset": "ptb",
        "metrics": {"test/ppl": 10.0, "test/nll": 2.3},
    }
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"dataset": "chorales", "metrics": {"val/nll": 7}}))
    assert read_results(path) == {"dataset": "chorales", "metrics": {"val/nll": 7.0}}
    with pytest.raises(ValueError, match="result 'test/ppl' must be a finite number, got 'high'"):
        read_results({"test/ppl": "high"})
    with pytest.raises(ValueError, match="cannot read results JSON"):
        read_results(tmp_path / "missing.json")


def test_dataset_names(monkeypatch):
    assert dataset_name({"class_path": "zoo.data.PTBDataModule"}) == "ptb"
    assert (
        dataset_name(
            {"class_path": "zoo.data.MusicDataModule", "init_args": {"dataset": "data/Nottingham.pickle"}}
        )
        == "Nottingham"
    )
    assert dataset_name({"class_path": "zoo.data.MusicDataModule", "init_args": {}}) == "chorales"
    pcfg = "zoo.data.PCFGDataModule"
    assert dataset_name({"class_path": pcfg, "init_args": {"tree_files": {"train": "x"}}}) == "trees in x"
    assert dataset_name({"class_path": "zoo.data.SmartwatchDataModule", "init_args": {}}) == "smartwatch"
    assert dataset_name({"class_path": "zoo.data.CrossTaskDataModule", "init_args": {}}) == "crosstask"
    captions = "zoo.data.CaptionsDataModule"
    assert dataset_name({"class_path": captions, "init_args": {"source": "coco-karpathy"}}) == "mscoco"
    assert dataset_name({"class_path": captions, "init_args": {}}) == "ptb-short"
    assert dataset_name({"class_path": captions, "init_args": {"source": "text", "path": "d/caps"}}) == "caps"
    own = {"class_path": captions, "init_args": {"path": "d/mytext"}}  # ptb-short of your own text: not PTB's
    assert dataset_name(own) == "text in mytext, short sentences"
    npy = {"class_path": "zoo.data.NpyFolderDataModule", "init_args": {"data_dir": "/data/my-imu/"}}
    assert dataset_name(npy) == "my-imu"
    assert dataset_name(None) is None
    # a data module names its own data (card_dataset); one that cannot be imported, or names nothing, is
    # named by its class
    assert dataset_name({"class_path": "my_package.ReviewsDataModule"}) == "reviews"
    monkeypatch.setitem(sys.modules, "my_data", types.SimpleNamespace(OwnDataModule=OwnDataModule))
    assert dataset_name({"class_path": "my_data.OwnDataModule", "init_args": {"x": 1}}) == "own x=1"
    assert dataset_name({"class_path": "collections.OrderedDict"}) == "ordereddict"


class OwnDataModule:
    """A user's data module that names its data for the cards."""

    @classmethod
    def card_dataset(cls, args: dict) -> str:
        return f"own x={args['x']}"


def test_zoo_card_command_rerenders_with_results(tmp_path, capsys):
    torch.manual_seed(0)
    folder = zoo.create_model("pcfg_nt10_pt20_d64").save_pretrained(tmp_path / "m")
    results = tmp_path / "metrics.json"
    results.write_text(json.dumps([{"test/ppl": 431.7}]))
    assert main(["card", str(folder), "--results", str(results), "--repo-id", "org/pcfg"]) == 0
    assert json.loads((folder / "results.json").read_text()) == {
        "dataset": None,
        "metrics": {"test/ppl": 431.7},
    }
    card = ModelCard.load(folder / "README.md")
    assert card.data.to_dict()["model-index"][0]["results"][0]["metrics"][0]["value"] == 431.7
    assert 'zoo.from_pretrained("org/pcfg")' in card.text
    assert main(["card", str(tmp_path)]) == 2
    assert "is not a zoo pretrained-model folder" in capsys.readouterr().err


def test_text_of_a_data_dir_is_named_by_what_it_is(tmp_path):
    import hashlib

    from zoo.data.ptb import PTB_FILES, read_ptb

    ptb, own = tmp_path / "ptb-copy", tmp_path / "plays"
    for folder in (ptb, own):
        folder.mkdir()
    for split, name in PTB_FILES.items():  # Mikolov's PTB as its files hold it
        (ptb / name).write_text("".join(f" {' '.join(words)} \n" for words in read_ptb(split)))
        (own / name).write_text("to be or not to be\nthat is the question\n")
    for module in ("zoo.data.PTBDataModule", "zoo.data.PCFGDataModule"):
        assert dataset_name({"class_path": module, "init_args": {"data_dir": str(ptb)}}) == "ptb"
        digest = hashlib.sha256(b"".join((own / n).read_bytes() for n in PTB_FILES.values())).hexdigest()
        named = dataset_name({"class_path": module, "init_args": {"data_dir": str(own)}})
        assert named == f"text in plays (sha256 {digest[:12]})"
    gone = {"class_path": "zoo.data.PTBDataModule", "init_args": {"data_dir": "gone"}}
    assert dataset_name(gone) == "text in gone"


def test_a_card_of_other_text_claims_no_ptb_number(tmp_path):
    training = {"data": {"class_path": "zoo.data.PTBDataModule", "init_args": {"data_dir": "/data/plays"}}}
    config = config_of("hmm_categorical_n512_d64", "exact", tmp_path)
    results = {"metrics": {"test/ppl": 312.0}}
    card = render_card(config, results=results, training_config=yaml.safe_dump(training))
    assert "Measured on text in plays" in card.text and "Measured on ptb" not in card.text
    assert "measured on other data than this model's" in card.text


@pytest.mark.parametrize("name", ["hmm_categorical_n512_d64", "pcfg_nt10_pt20_d64"])
def test_limitations_agree_with_usage_on_the_stored_vocabulary(tmp_path, name):
    """A word model's card says the same about its vocabulary in Usage and in Limitations: with a stored
    vocab.json both say it comes with the weights; without one neither claims it."""
    config = config_of(name, "exact", tmp_path)
    for stored in (True, False):
        text = render_card({**config, "vocab_sha256": "0" * 64 if stored else None}).text
        usage = text[text.index("## Usage") : text.index("## Training")]
        limitations = text[text.index("## Limitations") : text.index("## Citation")]
        assert ("comes with it as `model.vocab`" in usage) == stored
        assert ("`vocab.json`, stored with the weights" in limitations) == stored
        assert ("stores no vocabulary" in limitations) == (not stored)


def test_every_share_metric_names_its_unit():
    """F1 and accuracy are logged as % for parsing and as fractions for segmentation: a card that names
    neither would put 0.72 beside 52.6 with nothing to tell them apart."""
    shares = {name: human for name, (kind, human) in METRICS.items() if kind in ("f1", "accuracy")}
    assert set(shares) == {"sentence_f1", "corpus_f1", "frame_accuracy", "boundary_f1"}
    for name, human in shares.items():
        assert human.endswith(("(%)", "(fraction)")), (name, human)
