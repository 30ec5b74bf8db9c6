"""LightningModules: how each family is trained and evaluated."""

from zoo.tasks.likelihood import LikelihoodTask

__all__ = ["LikelihoodTask"]
