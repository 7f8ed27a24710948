"""The tasks themselves (torch); their names and parameters: train/shared/tasks.py."""
