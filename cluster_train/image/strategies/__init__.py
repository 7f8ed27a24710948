"""The strategies themselves (torch); their names and parameters: cluster_train/shared/strategies.py."""
