"""Runs inside the Apptainer image (torch, Lightning): `python -m train ...`; never imported by cluster_train/host/."""
