"""A Lightning script as it is written for one machine: `Trainer()` names no devices, nodes or strategy, and nothing
of cluster-train is imported. Under run-cluster it still trains one model over every rank of the job (the launcher
gives the Trainer its defaults: docs/how-to/own-code.md, "Lightning"):

    bin/run-cluster ci-slurm n2_gpu1 -- python train.py      # 2 nodes: one model, world size 2, one test loss

resumable.py is the same script with cluster-train's resume callback added (docs/how-to/own-code.md, "Long runs").
"""
import argparse
import os
import time
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset


class Regression(pl.LightningModule):
    """A small MLP fitting a noisy linear map; dropout, so a resumed run must also restore the RNG to match."""

    def __init__(self, step_sleep_s: float = 0.0):
        super().__init__()
        self.step_sleep_s = step_sleep_s
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                                       torch.nn.Linear(32, 1))

    def training_step(self, batch, _):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        if self.step_sleep_s:
            time.sleep(self.step_sleep_s)  # stands in for a real model's step time (the requeue test)
        return loss

    def validation_step(self, batch, _):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=True)

    def test_step(self, batch, _):
        x, y = batch
        self.log("test_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=True)

    def on_train_epoch_end(self):
        if self.global_rank == 0:
            print(f"epoch {self.current_epoch} done", flush=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


def data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return TensorDataset(x, x @ torch.linspace(-1, 1, 8)[:, None] + 0.1 * torch.randn(n, 1, generator=g))


def main(callbacks=()):
    p = argparse.ArgumentParser(description="train a small regression model")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds each training step sleeps")
    args = p.parse_args()
    pl.seed_everything(0)
    trainer = pl.Trainer(max_epochs=args.epochs, callbacks=list(callbacks), deterministic=True, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0)
    model = Regression(args.step_sleep)
    train = DataLoader(data(256, 1), batch_size=16, shuffle=True)  # per rank: 8 batches per epoch over 2 ranks
    trainer.fit(model, train, DataLoader(data(64, 2), batch_size=32))
    test_loss = trainer.test(model, DataLoader(data(64, 3), batch_size=32), verbose=False)[0]["test_loss"]
    print(f"rank {trainer.global_rank}/{trainer.world_size} nodes {trainer.num_nodes} test_loss {test_loss:.8f}",
          flush=True)
    if trainer.global_rank == 0:
        torch.save(model.state_dict(), Path(os.environ.get("CT_RUN_DIR", ".")) / "final_weights.pt")


if __name__ == "__main__":
    main()
