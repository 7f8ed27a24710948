"""Torch-free code both sides import: the login node (train/host/) and the image (train/image/)."""
