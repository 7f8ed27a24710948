"""train.py with cluster-train's resume callback, its one change: at the time-limit warning it saves last.ckpt and
asks for a requeue, and the next segment's fit goes on from it, bit for bit (docs/how-to/own-code.md, "Long runs")."""
from cluster_train.image.resume_lightning import ResumeOnSignal

from train import main

if __name__ == "__main__":
    main(callbacks=[ResumeOnSignal()])
