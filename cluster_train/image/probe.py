"""`python -m train probe_data --config C [--batches N] [--out F]`, inside the image (bin/run-cluster probe-data runs it
there): the host memory of a run's data loading, measured before its first submission. N batches go through the
experiment's own data module with its num_workers, batch_size and prefetch_factor, and PSS is sampled as in training
(cluster_train/image/pss.py). No model is built: a worker's memory is the data's (the data set's state each worker
holds, the batches it prefetches), so the probe measures the workers; a rank's own memory (the model, the optimizer,
CUDA) only a run measures."""
import time

import pytorch_lightning as pl

from cluster_train.shared import config as cfg
from cluster_train.shared.data import build
from cluster_train.image.pss import PeakPss


def probe(run: cfg.RunConfig, batches: int) -> dict:
    pl.seed_everything(run.seed, workers=True)
    data = build(run.data)
    data.setup("fit")
    peaks, started, taken = PeakPss(), time.time(), 0
    peaks.start()
    loader = iter(data.train_dataloader())
    for _ in range(batches):
        if next(loader, None) is None:  # a data set shorter than the batches asked for
            break
        taken += 1
    peaks.sample()  # the workers now hold their prefetched batches: at their fullest
    peaks.stop()
    figures = peaks.figures()
    return {"num_workers": run.data.num_workers, "batch_size": run.data.batch_size,
            "prefetch_factor": run.data.prefetch_factor, "batches": taken,
            "worker_peak_gb": figures["worker_peak_gb"], "workers_seen": figures["workers_seen"],
            "loader_peak_gb": figures["peak_gb"], "seconds": round(time.time() - started, 1)}
