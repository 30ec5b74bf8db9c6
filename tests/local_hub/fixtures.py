"""The ``local_hub`` pytest fixture: one running local Hub for the whole test session.

Test modules import it (``from local_hub.fixtures import local_hub  # noqa: F401``) and take it as an
argument; give every test its own repository name and cache directory, since the Hub is shared.
"""

from __future__ import annotations

import pytest

from local_hub import LocalHub


@pytest.fixture(scope="session")
def local_hub(tmp_path_factory):
    with LocalHub(tmp_path_factory.mktemp("local_hub")) as hub:
        yield hub
