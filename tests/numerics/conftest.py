"""tests/numerics: one intra-op thread per test (restored after).

The DPs here are python loops over small tensors: on a busy 2-core machine the thread pool's
hand-offs cost up to 100x the arithmetic. One thread also fixes the order of every reduction, so a
float32 result cannot change from one run to the next.
"""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
