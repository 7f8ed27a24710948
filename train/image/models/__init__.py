"""The models themselves (torch); their names and parameters: train/shared/models.py."""
