"""The strategies themselves (torch); their names and parameters: train/shared/strategies.py."""
