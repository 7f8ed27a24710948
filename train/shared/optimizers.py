"""Optimizer and learning-rate scheduler registries: `optim.name` and `optim.scheduler` in a run config.

An optimizer takes the module's parameters plus the OptimConfig fields its signature names (its registry params:
sgd reads lr, momentum and weight_decay; adamw has no momentum). A scheduler takes the optimizer and the run's
max_epochs and returns a torch scheduler, or None for a constant learning rate. Torch is imported when one is built.
"""
from train.shared.registry import Registry

OPTIMIZERS = Registry("optimizer", {"sgd": "train.shared.optimizers:sgd", "adamw": "train.shared.optimizers:adamw"},
                      fixed=("parameters",))
LR_SCHEDULERS = Registry("scheduler", {"cosine": "train.shared.optimizers:cosine", "none": "train.shared.optimizers:constant"},
                      fixed=("optimizer", "max_epochs"))


def sgd(parameters, lr, momentum, weight_decay):
    import torch

    return torch.optim.SGD(parameters, lr=lr, momentum=momentum, weight_decay=weight_decay)


def adamw(parameters, lr, weight_decay):
    import torch

    return torch.optim.AdamW(parameters, lr=lr, weight_decay=weight_decay)


def cosine(optimizer, max_epochs):
    import torch

    return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, max_epochs))


def constant(optimizer, max_epochs):
    return None


def build_optimizer(parameters, config):
    """The config's optimizer over `parameters`, given the OptimConfig fields it takes."""
    return OPTIMIZERS.build(config.name, parameters=parameters,
                            **{key: getattr(config, key) for key in OPTIMIZERS.params(config.name)})


def build_scheduler(optimizer, config, max_epochs):
    return LR_SCHEDULERS.build(config.scheduler, optimizer=optimizer, max_epochs=max_epochs)
