"""The optional parts of structured-zoo and the pip extras that install them.

``pip install structured-zoo`` installs the engine (``zoo.inference``) and what ``from_pretrained`` of
the HMMs, PCFGs and HSMMs needs: torch, numpy, huggingface_hub, safetensors, pyyaml and jinja2. The
rest comes with extras (pyproject.toml); a part whose extra is missing raises ``MissingExtraError``,
one line that names the extra.
"""

from __future__ import annotations

import importlib

EXTRAS = {  # extra -> the modules it brings (pyproject.toml's optional-dependencies)
    "train": ("lightning", "torchmetrics", "jsonargparse"),
    "plots": ("matplotlib", "scipy"),
    "vae": ("transformers", "tokenizers"),
}


class MissingExtraError(ImportError):
    """A part of the zoo whose optional dependencies are not installed."""


def require(extra: str, purpose: str) -> None:
    """Import the modules of ``extra``, or raise ``MissingExtraError`` saying that ``purpose`` needs it."""
    for module in EXTRAS[extra]:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise MissingExtraError(
                f"{purpose} needs the {extra!r} extra, which is not installed ({error}): "
                f"pip install 'structured-zoo[{extra}]'"
            ) from None


def imported(module: str, extra: str, purpose: str):
    """``module`` imported, after ``require(extra, purpose)``."""
    require(extra, purpose)
    return importlib.import_module(module)


def pyplot(purpose: str):
    """matplotlib's pyplot on the file-only Agg backend (no display needed), after ``require("plots")``."""
    matplotlib = imported("matplotlib", "plots", purpose)
    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")
