"""Exit statuses of `python -m train fit` that the job scripts and the host side act on (imports nothing heavy).

0 finished; 2 bad input (cluster_train.shared.errors.UserError); the rest below.
"""
REQUEUE = 75  # EX_TEMPFAIL: a stop was requested (SIGUSR1 / SIGTERM); last.ckpt is saved, requeue the job
NAN_LOSS = 3  # the loss became NaN or infinite; the run FAILED, the last good checkpoint is kept
DISK_FULL = 4  # a checkpoint could not be written for lack of space; the previous one is kept
