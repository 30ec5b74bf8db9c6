"""close_process_group: a finished run's gloo group is closed before the interpreter exits."""

import torch
import torch.distributed as dist

from zoo.tasks.distributed import close_process_group


def test_closes_an_open_group_and_is_a_no_op_without_one(tmp_path):
    close_process_group()  # no group: nothing to do
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    tensor = torch.ones(2)
    dist.all_reduce(tensor)
    assert dist.is_initialized()
    close_process_group()
    assert not dist.is_initialized()
    close_process_group()
