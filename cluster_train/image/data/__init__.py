"""The data themselves (torch); their names and parameters: cluster_train/shared/data.py."""
