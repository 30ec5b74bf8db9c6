"""Families declare themselves (``zoo.hub.families``): every exported family has its declarations in its own
package, the cards and results tables read them, and bad declarations are refused with a sentence."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import zoo
from zoo.hub.families import CARD_PARTS, Family, families, family, paper_results, register_family, token_batch
from zoo.hub.registry import architecture
from zoo.models.base import ZooModel


def test_every_registered_architecture_has_its_family_declared_in_its_own_package():
    declared = {f.model_class: f for f in families()}
    classes = {architecture(name).class_path.rsplit(".", 1)[-1] for name in zoo.list_models()}
    assert classes == set(declared)
    for name, declared_family in declared.items():
        model_class = getattr(zoo.models, name)
        assert issubclass(model_class, ZooModel)
        package = Path(model_class.__module__.replace(".", "/")).parent  # zoo/models/<family>/
        assert declared_family.card_templates.parent.parent.as_posix().endswith(package.as_posix())
        assert all((declared_family.card_templates / part).is_file() for part in CARD_PARTS)
        assert declared_family.results_title and declared_family.results_metrics
        assert all(metric.startswith(("test/", "synthetic/")) for metric in declared_family.results_metrics)


def test_the_papers_rows_come_from_the_family_and_filter_by_dataset():
    assert {r.dataset for r in paper_results("CategoricalHMM")} == {"ptb"}
    assert [r.value for r in paper_results("CategoricalHMM", "ptb") if r.metric == "test/ppl"] == [
        136.8,
        131.8,
        133.49,
        126.4,
    ]
    assert paper_results("PCFG", "ptb-wsj") and not paper_results("PCFG", "smartwatch")
    assert paper_results("NotAFamily") == []


def test_bad_declarations_and_unknown_families_are_one_sentence(tmp_path):
    with pytest.raises(ValueError, match=r"no family 'Foo' is registered \(known: \["):
        family("Foo")
    (tmp_path / "intro.md").write_text("a Foo")
    foo = Family("Foo", tmp_path, "Foos", ("test/nll",), token_batch)
    with pytest.raises(ValueError, match=r"family 'Foo': no card parts \['metric.md', 'limitations.md'"):
        register_family(foo)
    with pytest.raises(ValueError, match="'PCFG' is already registered"):
        register_family(family("PCFG"))


def test_the_word_models_example_batch_is_ragged_and_in_the_vocabulary():
    model = type("Words", (), {"config": {"vocab_size": 7}})()
    batch = token_batch(model, torch.Generator().manual_seed(0))
    assert batch["tokens"].shape == (3, 5) and batch["tokens"].max() < 7
    assert batch["lengths"].tolist() == [5, 3, 4]
