"""The optimizers and learning-rate schedulers cluster_train/shared/optimizers.py
names; torch is imported when one is built."""


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
