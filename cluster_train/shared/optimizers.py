"""Optimizer and learning-rate scheduler registries: `optim.name` and `optim.scheduler` in a run config.

An optimizer takes the module's parameters plus the OptimConfig fields its signature names (its registry params:
sgd reads lr, momentum and weight_decay; adamw has no momentum). A scheduler takes the optimizer and the run's
max_epochs and returns a torch scheduler, or None for a constant learning rate. Torch is imported when one is built.
"""
from cluster_train.shared.registry import Registry

_C = "cluster_train.image.optimizers"  # the constructors, which import torch
OPTIMIZERS = Registry("optimizer", {"sgd": f"{_C}:sgd", "adamw": f"{_C}:adamw"}, fixed=("parameters",))
LR_SCHEDULERS = Registry("scheduler", {"cosine": f"{_C}:cosine", "none": f"{_C}:constant"},
                         fixed=("optimizer", "max_epochs"))


def build_optimizer(parameters, config):
    """The config's optimizer over `parameters`, given the OptimConfig fields it takes."""
    return OPTIMIZERS.build(config.name, parameters=parameters,
                            **{key: getattr(config, key) for key in OPTIMIZERS.params(config.name)})


def build_scheduler(optimizer, config, max_epochs):
    return LR_SCHEDULERS.build(config.scheduler, optimizer=optimizer, max_epochs=max_epochs)
