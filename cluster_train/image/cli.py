"""`python -m train COMMAND`: the image-side command line (fire)."""
import os
import sys
import tempfile
from pathlib import Path

import fire

from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError


def fit(config: str, **overrides):
    """Train: `python -m train fit --config runs/<id>/config.yaml [--trainer.max_epochs=5 ...]`.

    Resumes from the run's own checkpoints/last.ckpt when an earlier segment left one. Exit statuses: 0 done,
    2 bad input, and cluster_train/shared/exit_codes.py (75 saved
    after SIGUSR1/SIGTERM, requeue me; 3 NaN loss; 4 disk full).
    """
    from cluster_train.image import stop, threads

    stop.install()  # before the heavy imports: a SIGUSR1 from here on asks for a save, it no longer kills
    threads.default_threads()  # before torch is imported: it sizes its thread pool once
    # the image's, or --dev's snapshot
    print(f"[cluster-train] cluster_train package: {Path(__file__).parent}", flush=True)
    from cluster_train.image.fit import fit as run_fit
    from cluster_train.image.leave import leave

    run = cfg.load(config, overrides)
    try:
        run_fit(run)
    except OSError as err:  # a full disk under a file the task writes itself (history, weights): the same one line
        from cluster_train.shared.durable import disk_full

        disk_full(err.filename or run.output_dir, err)
        raise
    except SystemExit as stop:  # saved for a requeue (75), NaN loss (3): the same clean ending as success
        if isinstance(stop.code, int):
            leave(stop.code)
        raise
    leave(0)  # results are written: no abort at interpreter exit may turn the run FAILED


def command(config: str):
    """Run the run's own command from its code snapshot: `command --config runs/<id>/config.yaml`
    (cluster_train/image/command.py). Its exit status is the command's (75: it saved on the job's
    warning signal and asks to be requeued)."""
    from cluster_train.image import threads
    from cluster_train.image.command import run_command

    threads.default_threads()  # inherited by the command's ranks
    sys.exit(run_command(config))


def call():
    """Make the function call this run was sent (`bin/run-cluster` never types it:
    cluster_train/host/api/function.py makes it the run's command): call/args.pkl in,
    call/result.pkl out; exit 0 returned, 1 raised, 75 saved to be requeued."""
    from cluster_train.image.call import run_call
    from cluster_train.image.leave import leave

    leave(run_call(Path(os.environ["CT_RUN_DIR"])))


def export(checkpoint: str, out: str):
    """Plain weights from any strategy's checkpoint: `export --checkpoint ... --out models/<Model>_best_weights.pth`."""
    from cluster_train.image.export import export_weights

    print(f"wrote {export_weights(checkpoint, out)}")


def bench(models=None, strategies=None, variants=None, ranks: int = 2, batch=None, steps=None, warmup=None,
          repeats=None, out_dir="benchmarks/results"):
    """Throughput, step time, peak memory per model, strategy and variant, and a plain PyTorch loop for reference:
    `bench [--models=resnet50_224,...] [--strategies=ddp,zero3] [--variants=fp32,bf16] [--batch=N] [--steps=N]
    [--repeats=N]`: steps timed (default 50 after 15 on a GPU, 100 after 3 on the CPU); repeats: the loop
    comparison's runs, alternately (default 1 on a GPU, 5 on the CPU)."""
    from cluster_train.image.bench import bench as run_bench

    run_bench(models=models, strategies=strategies, variants=variants, ranks=ranks, batch=batch, steps=steps,
              warmup=warmup, repeats=repeats, out_dir=out_dir)


def probe_data(config: str, batches: int = 20, out: str = ""):
    """The host memory of a run's data loading: `probe_data --config C [--batches=20] [--out=F]` loads N batches
    through its data module with its real num_workers and batch_size (no model) and writes the PSS peaks per worker
    (cluster_train/image/probe.py) to F as JSON, else prints
    them; bin/run-cluster probe-data runs it in the CPU image."""
    import json

    from cluster_train.image import threads

    threads.default_threads()  # before torch is imported, as for training
    from cluster_train.image.probe import probe

    record = json.dumps(probe(cfg.load(config), int(batches)))
    if out:
        Path(out).write_text(record + "\n")
    else:
        print(record)


def models():
    """List registered models with their parameter counts (at 100 classes, default params) and input shapes."""
    from cluster_train.shared.models import MODELS, input_text

    for name in MODELS.names():
        try:
            count = f"{sum(p.numel() for p in MODELS.build(name, num_classes=100).parameters()):>12,d} parameters"
        except (ImportError, UserError) as err:  # torchvision absent, local weights file absent
            count = f"{'-':>12s} ({str(err).splitlines()[0][:60]})"
        print(f"{name:32s} {count}  input {input_text(name)}")


def names():
    """Every name a run config can hold (models, fusion heads, data sets, tasks, strategies, ...), with parameters."""
    from cluster_train.shared.catalog import describe

    print(describe())


def make_data(name: str, root: str, **options):
    """Write a small learnable data set in the loader's real on-disk format: `make_data cifar100 data/cifar100`."""
    from cluster_train.shared.data import GENERATORS

    path = GENERATORS.build(name, root=root, **options)
    print(f"wrote {name} data set to {path}")


def selftest():
    """Prove the image can train: one optimisation step of a tiny model on generated data."""
    import torch

    from cluster_train.image.fit import fit as run_fit

    with tempfile.TemporaryDirectory() as tmp:
        make_data("cifar100", f"{tmp}/data", train_per_class=1, test_per_class=1)
        run = cfg.resolve(
            {
                "output_dir": f"{tmp}/run",
                "model": {"params": {"depth": 8, "width": 4}},
                "data": {"root": f"{tmp}/data", "batch_size": 16, "num_workers": 0},
                "trainer": {"max_epochs": 1, "limit_train_batches": 1, "limit_val_batches": 1, "strategy": "single"},
            }
        )
        results = run_fit(run)
    assert results["epochs"] == 1, results
    print(f"selftest passed: torch {torch.__version__}, one training step, val loss {results['final_val_loss']:.3f}")


def imagecheck(cuda: str, *capabilities: float):
    """A CUDA image's checks without a GPU (its %test): CUDA version, kernels, NCCL, verbs, DeepSpeed CPU Adam."""
    from cluster_train.image.cuda_checks import imagecheck as run_checks

    run_checks(cuda, *capabilities)


def main(argv=None):
    try:
        commands = {"fit": fit, "command": command, "call": call, "export": export, "bench": bench, "models": models,
                    "names": names, "make_data": make_data, "selftest": selftest, "imagecheck": imagecheck,
                    "probe_data": probe_data}
        fire.Fire(commands, command=argv)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
