"""The tasks themselves (torch); their names and parameters: cluster_train/shared/tasks.py."""
