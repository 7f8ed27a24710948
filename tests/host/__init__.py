"""Login-node logic (cluster_train/host, bin/run-cluster), checked without the image or the test Slurm cluster."""
