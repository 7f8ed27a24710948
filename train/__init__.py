"""cluster-train: one training code base, any GPU cluster.

`train.host` (torch-free) resolves, checks, renders and submits jobs on a login node;
the rest runs inside the image (`python -m train ...`).
"""

__version__ = "0.1.0"
