"""Test-wide set-up: hypothesis settings, and the device the tests run on.

``pytest --device cuda`` (or ``ZOO_TEST_DEVICE=cuda``) runs the suite on the GPU: torch's default
device becomes CUDA, so every tensor a test makes (and every ``torch.Generator()`` it seeds) lives
there, and the engine's kernels, custom backward and random draws run on the GPU. Without a GPU those
runs are skipped. Device placement itself (inputs moved by the user, models moved with ``.to``) is
tested by tests/test_device.py through the ``device`` fixture, which never relies on the default.
``--tf32`` allows TF32 matrix products; ``--autocast bf16`` runs every test under bfloat16 autocast.
"""

import os
import sys

import pytest
import torch
from hypothesis import HealthCheck, settings

# tests/bruteforce.py and tests/strategies.py are imported as top-level modules.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_addoption(parser):
    parser.addoption("--device", default=os.environ.get("ZOO_TEST_DEVICE", "cpu"), choices=("cpu", "cuda"),
                     help="run the tests on this device (default: cpu, or $ZOO_TEST_DEVICE)")  # fmt: skip
    parser.addoption("--tf32", action="store_true", help="allow TF32 matrix products (CUDA)")
    parser.addoption("--autocast", default=None, choices=("bf16",), help="run every test under autocast")


def _on_cuda(config) -> bool:
    return config.getoption("--device") == "cuda"


class _DefaultDeviceGenerator(torch.Generator):
    """``torch.Generator()`` on the default device (CPU unless set), as factories already are; torch's
    own calls (gradcheck draws its probe vectors on the CPU) keep the CPU default."""

    def __new__(cls, device=None):
        if device is None and not sys._getframe(1).f_globals.get("__name__", "").startswith("torch"):
            device = torch.get_default_device()
        return super().__new__(cls, "cpu" if device is None else device)


def pytest_configure(config):
    if _on_cuda(config) and torch.cuda.is_available():
        torch.set_default_device("cuda")
        torch.Generator = _DefaultDeviceGenerator
        torch.backends.cuda.matmul.allow_tf32 = config.getoption("--tf32")
        torch.backends.cudnn.allow_tf32 = config.getoption("--tf32")


def pytest_collection_modifyitems(config, items):
    if _on_cuda(config) and not torch.cuda.is_available():
        skip = pytest.mark.skip(reason="--device cuda: no CUDA device here")
        for item in items:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _autocast(request):
    """Every test under the ``--autocast`` dtype, when one is given."""
    if request.config.getoption("--autocast") is None:
        yield
        return
    device_type = "cuda" if _on_cuda(request.config) else "cpu"
    with torch.autocast(device_type, dtype=torch.bfloat16):
        yield


@pytest.fixture
def device(request) -> torch.device:
    """The device of ``--device``: tests that place tensors and models there explicitly."""
    return torch.device(request.config.getoption("--device"))
