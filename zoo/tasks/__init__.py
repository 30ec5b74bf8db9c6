"""LightningModules: how each family is trained and evaluated."""

from zoo.extras import require

require("train", "zoo.tasks (training and evaluation)")
require("plots", "zoo.tasks (the segmentation metrics' matching)")

from zoo.tasks.likelihood import LikelihoodTask, LikelihoodWriter  # noqa: E402

__all__ = ["LikelihoodTask", "LikelihoodWriter"]

from zoo.tasks.parsing import ParsingTask, TreeWriter  # noqa: E402

__all__ += ["ParsingTask", "TreeWriter"]

from zoo.tasks.segmentation import SegmentationTask, SegmentationWriter  # noqa: E402

__all__ += ["SegmentationTask", "SegmentationWriter"]
from zoo.tasks.vae import VAETask  # noqa: E402

__all__ += ["VAETask"]
from zoo.tasks.throughput import TrainingThroughput  # noqa: E402

__all__ += ["TrainingThroughput"]
