"""The real components end to end: the test Slurm cluster, the LSF stand-in, sshd, the registry, long runs."""
