"""The data themselves (torch); their names and parameters: train/shared/data.py."""
