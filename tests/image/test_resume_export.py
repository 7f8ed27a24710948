"""A run stopped after epoch 1 on 2 ranks resumes on 1 and on 2 ranks (zero2) or on the other rank count (zero3,
fsdp), with the weights it stopped with; its exported plain weights file gives the same predictions as the live model
that wrote the checkpoint."""
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from image.test_strategies import make_data, tiny_net
from cluster_train.shared import config as cfg
from cluster_train.image.localrun import spawn

# real multi-process training, which make test runs inside the image (test_in_image.py) and not here again
pytestmark = [pytest.mark.slow, pytest.mark.image_copy]


def worker(rank, strategy, nprocs, out, epochs, ckpt_path, train_batches=None):
    from torch.utils.data import DataLoader

    from cluster_train.image.trainer import build_trainer
    from cluster_train.image.lit import Classifier

    class Module(Classifier):
        def training_step(self, batch, batch_idx):
            return super().training_step(batch[:2], batch_idx)

        def validation_step(self, batch, batch_idx):
            return super().validation_step(batch[:2], batch_idx)

    run = cfg.resolve(
        {
            "output_dir": str(out),
            "optim": {"name": "sgd", "lr": 0.1, "scheduler": "none"},
            "trainer": {"accelerator": "cpu", "devices": nprocs, "strategy": strategy, "max_epochs": epochs,
                        "limit_train_batches": train_batches},
        }
    )
    module = Module(tiny_net(), run.optim)
    data = make_data()
    trainer = build_trainer(run, out)
    trainer.fit(module, DataLoader(data, batch_size=8), DataLoader(data, batch_size=8), ckpt_path=ckpt_path)
    with torch.no_grad():  # through the strategy's wrapper: ZeRO-3 and FSDP gather the sharded weights for it
        logits = trainer.strategy.model(data.tensors[0]).detach().clone()
    return {"epoch": trainer.current_epoch, "step": trainer.global_step, "logits": logits}


RESUMES = [("zero2", 1), ("zero2", 2), ("zero3", 1), ("fsdp", 1)]


@pytest.fixture(scope="module")
def stopped_after_epoch_1(tmp_path_factory):
    """strategy -> (its last checkpoint after epoch 1 on 2 ranks, each rank's result), each run once."""
    cache = {}

    def run(strategy):
        if strategy not in cache:
            out = tmp_path_factory.mktemp(f"{strategy}_2ranks")
            cache[strategy] = out / "checkpoints" / "last.ckpt", spawn(worker, 2, strategy, 2, out, 1, None)
        return cache[strategy]

    return run


@pytest.mark.parametrize("strategy, ranks", RESUMES)
def test_resumes_on_other_rank_counts_with_the_weights_it_stopped_with(strategy, ranks, stopped_after_epoch_1,
                                                                       tmp_path):
    ckpt, first = stopped_after_epoch_1(strategy)
    with ThreadPoolExecutor(1) as pool:  # resumed without a training batch, beside the resumed run: own processes
        frozen = pool.submit(spawn, worker, ranks, strategy, ranks, tmp_path / "frozen", 2, str(ckpt), 0)
        resumed = spawn(worker, ranks, strategy, ranks, tmp_path / "resumed", 2, str(ckpt))
        frozen = frozen.result()
    assert resumed[0]["epoch"] == 2
    # 64 samples: 4 steps/epoch on 2 ranks x 8; on 1 rank epoch 2 takes 8 steps of 8
    assert resumed[0]["step"] == first[0]["step"] + 64 // (8 * ranks)
    # the weights it resumed with are the weights it stopped with
    torch.testing.assert_close(frozen[0]["logits"], first[0]["logits"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("strategy", ["zero2", "fsdp"])
def test_exported_weights_predict_like_the_checkpoint(strategy, stopped_after_epoch_1, tmp_path):
    from cluster_train.image.cli import main

    ckpt, first = stopped_after_epoch_1(strategy)
    out = tmp_path / "models" / "tiny_best_weights.pth"
    main(["export", "--checkpoint", str(ckpt), "--out", str(out)])
    net = tiny_net()
    net.load_state_dict(torch.load(out, map_location="cpu", weights_only=True))  # no DeepSpeed involved
    with torch.no_grad():
        logits = net(make_data().tensors[0])
    torch.testing.assert_close(logits, first[0]["logits"], rtol=1e-6, atol=1e-6)
