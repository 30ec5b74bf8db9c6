"""The README's generated table is current and its usage examples run."""

import re
from pathlib import Path

import torch

from zoo.inference.capabilities import capability_table

README = Path(__file__).resolve().parent.parent / "README.md"


def test_capability_table_is_current():
    text = README.read_text()
    block = re.search(r"<!-- capabilities:start -->\n(.*?)<!-- capabilities:end -->", text, re.S)
    assert block.group(1) == capability_table() + "\n", "run: python scripts/readme_tables.py"


def test_usage_example_runs():
    text = README.read_text()
    block = re.search(r"## Use the engine.*?```python\n(.*?)```", text, re.S).group(1)
    torch.manual_seed(0)
    exec(compile(block, str(Path(README)), "exec"), {})


def test_zoo_example_runs(tmp_path, monkeypatch):
    text = README.read_text()
    block = re.search(r"## Load, fine-tune and push.*?```python\n(.*?)```", text, re.S).group(1)
    monkeypatch.chdir(tmp_path)  # the example saves into the working directory
    torch.manual_seed(0)
    exec(compile(block, str(Path(README)), "exec"), {})
    assert (tmp_path / "my-pcfg" / "model.safetensors").is_file()
