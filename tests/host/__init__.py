"""Login-node logic (train/host, bin/run-cluster), checked without the image or the test Slurm cluster."""
