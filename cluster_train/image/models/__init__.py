"""The models themselves (torch); their names and parameters: cluster_train/shared/models.py."""
