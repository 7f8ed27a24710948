"""Exit statuses the training process and the job script agree on (torch-free: the host side reads them too)."""
REQUEUE = 75  # EX_TEMPFAIL: every rank saved checkpoints/last.ckpt on a warning signal; requeue me
NAN_LOSS = 3  # the loss became NaN or infinite; the last good checkpoint is kept
DISK_FULL = 4  # a checkpoint could not be written: the file system is full
