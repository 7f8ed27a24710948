"""`python -m train ...` only: the command every job script runs in the image (the package is cluster_train).

Installed by the image alone (containers/install.sh), never by the host package: a top-level `train` on a login node
or in a notebook would meet the user's own train.py or train/. Import cluster_train, never this.
"""
