"""Torch-free code both sides import: the login node (cluster_train/host/) and the image (cluster_train/image/)."""
