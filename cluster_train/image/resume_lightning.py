"""Resume for Lightning scripts: one callback, no other change to the script.

    from cluster_train.image.resume_lightning import ResumeOnSignal

    trainer = Trainer(..., callbacks=[ResumeOnSignal()])
    trainer.fit(model, train_loader, val_loader)   # resumes from $CT_CHECKPOINT_DIR/last.ckpt when it is there

At the time-limit warning (SIGUSR1, or the job's stop file) every rank agrees at the next step boundary, the trainer
saves `$CT_CHECKPOINT_DIR/last.ckpt` and the process exits `$CT_REQUEUE_EXIT` (75): the job requeues, and the next
segment's fit goes on from that file (unless the script passes its own ckpt_path, which wins). A warning on an epoch's
last batch saves after that epoch's validation. The RNG states and the position in the epoch travel in the
checkpoint, and a plain DataLoader is fast-forwarded to it (Lightning restarts an epoch's iterator from the start), so
the resumed run ends bit for bit as an uninterrupted one.

Works with `pytorch_lightning` and `lightning.pytorch`: the callback subclasses the Callback of whichever the script
imported (both, if it imported both). Importing this module imports neither, nor torch.
"""
import os
import signal
import sys
import threading
import warnings
from pathlib import Path

from cluster_train.image import stop
from cluster_train.image.resume import (  # one rule for both helpers
    DEFAULT_DIR, FILE, _rng_states, _set_rng_states, requeue_exit, say)

PACKAGES = ("lightning.pytorch", "pytorch_lightning")
_classes = {}
# Lightning's warning on a mid-epoch resume with a DataLoader without state_dict (training_epoch_loop.py)
NOT_RESUMABLE = "You're resuming from a checkpoint that ended before the epoch ended"


def ResumeOnSignal(directory=None):  # noqa: N802 (a class to its users; a factory so Lightning is picked late)
    """The callback, a subclass of the Lightning Callback the script uses. `directory`: where last.ckpt goes
    (default $CT_CHECKPOINT_DIR)."""
    bases = tuple(sys.modules[name].Callback for name in _lightning_packages())
    if bases not in _classes:
        _classes[bases] = type("ResumeOnSignal", (_Resume, *bases), {"__module__": __name__})
    return _classes[bases](directory)


def _lightning_packages():
    """The Lightning packages already imported (the script's Trainer is one of theirs), else whichever is installed."""
    found = [name for name in PACKAGES if name in sys.modules]
    if found:
        return found
    for name in reversed(PACKAGES):  # pytorch_lightning first: every image has it
        try:
            __import__(name)
            return [name]
        except ImportError:
            continue
    raise ImportError("ResumeOnSignal needs Lightning: neither pytorch_lightning nor lightning is installed")


class _Resume:
    def __init__(self, directory=None):
        super().__init__()
        self.path = Path(directory or os.environ.get("CT_CHECKPOINT_DIR") or DEFAULT_DIR) / FILE
        self.requeue_code = requeue_exit()  # a bad CT_REQUEUE_EXIT is said before fit, as Checkpointer says it
        self._warned = False
        self._at_epoch_end = self._deferred = False
        self._saving = None  # the state this callback writes into its own save, while it saves
        self._loaded = None  # the state last.ckpt brought back
        self._before_iter = None  # the RNG states just before this epoch's training iterator was made
        if threading.current_thread() is threading.main_thread():
            # installed before fit: Lightning keeps a SIGUSR1 handler it finds, so its SLURM auto-requeue (which
            # calls scontrol, absent in the image: Lightning#21404) never takes the warning
            signal.signal(signal.SIGUSR1, self._on_warning)

    def _on_warning(self, signum, frame):
        self._warned = True  # only a flag: the ranks act on it together, at a step boundary

    # --- resume on start ---
    def setup(self, trainer, pl_module, stage):
        if stage == "fit":
            resume_from_last(trainer, self.path)

    def on_fit_start(self, trainer, pl_module):
        if self._loaded is None:  # a fresh start: epoch 0's iterator is made next, from these states
            self._before_iter = _rng_states()

    def on_train_start(self, trainer, pl_module):
        loaded, self._loaded = self._loaded, None
        if loaded and loaded.get("batches") is not None:
            fast_forward(trainer, loaded)
        if self._before_iter is None:  # resumed from a checkpoint someone else saved
            self._before_iter = _rng_states()

    def on_train_epoch_start(self, trainer, pl_module):
        self._before_iter = _rng_states()  # epoch > 0 makes its iterator after this hook (epoch 0's was made before)

    # --- stop at the warning ---
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        asked = self._warned or bool(stop.poll())
        if not trainer.strategy.reduce_boolean_decision(asked, all=False) or self._at_epoch_end:
            return
        if batch_idx + 1 >= trainer.num_training_batches:
            self._at_epoch_end = True  # the epoch's validation first: resume at a clean boundary
        elif (batch_idx + 1) % trainer.accumulate_grad_batches:
            return  # mid-accumulation: the gradients so far are in no checkpoint; stop where the optimizer stepped
        elif self._deferred or not trainer._logger_connector.should_update_logs:
            self._save_and_exit(trainer, batch_idx + 1)
        else:  # this step's metrics row is written after this hook: stop one step later, so no row is lost
            self._deferred = True

    def on_train_epoch_end(self, trainer, pl_module):
        if self._at_epoch_end and not _last_epoch(trainer):  # after the last one the run just completes
            self._save_and_exit(trainer, None)

    def _save_and_exit(self, trainer, batches):
        for logger in trainer.loggers:  # rows a logger still buffers would die with the process
            logger.save()
        self._saving = {"batches": batches, "before_iter": self._before_iter}
        trainer.save_checkpoint(str(self.path))  # every rank calls it (a collective); rank 0 writes
        self._saving = None
        if trainer.is_global_zero:
            where = f"batch {batches} of epoch {trainer.current_epoch}" if batches else \
                f"the end of epoch {trainer.current_epoch}"
            say(f"stop requested: saved {self.path} at step {trainer.global_step} ({where}); "
                f"exiting {self.requeue_code} to be requeued")
        from cluster_train.image.leave import leave

        # srun SIGTERMs the other ranks once one has exited: one still in its exit handlers would die 143 (or run
        # Lightning's SIGTERM handler, a collective with a rank gone) and the run would look as if it saved nothing
        for sig in (signal.SIGTERM, signal.SIGUSR1):
            signal.signal(sig, signal.SIG_IGN)
        leave(self.requeue_code)  # a hard exit: a plain one can abort in gloo's teardown and lose the requeue code

    # --- what travels in the checkpoint ---
    def state_dict(self):
        if self._saving is None:  # another callback's save (ModelCheckpoint): Lightning's own resume applies
            return {}
        return {**self._saving, "rng": _rng_states()}

    def load_state_dict(self, state_dict):
        if state_dict.get("rng"):
            self._loaded = dict(state_dict)
            if state_dict.get("batches") is not None:  # fast_forward makes the plain DataLoader resume where it was
                warnings.filterwarnings("ignore", message=NOT_RESUMABLE)
            _set_rng_states(state_dict["rng"])  # the next epoch's iterator (an epoch-end save) draws from these
            self._before_iter = state_dict["rng"] if state_dict.get("batches") is None else state_dict["before_iter"]


def resume_from_last(trainer, path: Path) -> None:
    """Make this fit start from `path` when it exists and the script named no checkpoint itself (trainer.fit's
    ckpt_path, or trainer.ckpt_path, win): the checkpoint connector is asked for None, and gets `path`, once."""
    connector = trainer._checkpoint_connector
    start = connector.resume_start

    def resume_start(checkpoint_path=None, *args, **kwargs):
        connector.resume_start = start  # once: a later validate or test loads what it is asked
        if checkpoint_path is None and path.is_file():
            if trainer.is_global_zero:
                say(f"resuming from {path}")
            checkpoint_path = str(path)
        return start(checkpoint_path, *args, **kwargs)

    connector.resume_start = resume_start


def fast_forward(trainer, loaded: dict) -> None:
    """Lightning resumes mid-epoch with a fresh iterator from the epoch's start; a plain DataLoader would hand the
    resumed run the epoch's first batches again. Make the epoch's iterator as it was made (same RNG states, same
    sampler epoch), skip the batches already trained on, then take the RNG states of the save."""
    loop = trainer.fit_loop
    loaders = loop._combined_loader.flattened
    if all(hasattr(dl, "state_dict") and hasattr(dl, "load_state_dict") for dl in loaders):
        return  # a stateful loader: Lightning restored its position itself
    if getattr(loop._data_fetcher, "length", None) is None:  # unsized: prefetched as its iterator is made
        if trainer.is_global_zero:
            say("warning: a training loader of unknown length cannot be moved on to the saved batch; the resumed "
                "epoch draws its batches from the start (give the loader a __len__, or state_dict/load_state_dict)")
        return
    _set_rng_states(loaded["before_iter"])
    for dl in loaders:
        for sampler in (getattr(dl, "sampler", None), getattr(getattr(dl, "batch_sampler", None), "sampler", None)):
            if hasattr(sampler, "set_epoch"):
                sampler.set_epoch(trainer.current_epoch)  # as Lightning sets it before the epoch's iterator
    fetcher = loop._data_fetcher
    iter(fetcher)
    for _ in range(loaded["batches"]):
        next(fetcher.iterator)
    _set_rng_states(loaded["rng"])
    if trainer.is_global_zero:
        say(f"resumed at batch {loaded['batches']} of epoch {trainer.current_epoch}")


def _last_epoch(trainer) -> bool:
    if trainer.max_steps not in (None, -1) and trainer.global_step >= trainer.max_steps:
        return True
    return trainer.max_epochs not in (None, -1) and trainer.current_epoch + 1 >= trainer.max_epochs
