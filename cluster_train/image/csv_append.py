"""Lightning's CSVLogger deletes an existing metrics.csv when a run writes into the same directory again; a resumed
run must keep every segment's rows. This one appends (and widens the header when new columns appear), and drops the
rows of the steps a resumed segment trains again (logged after the checkpoint it resumes from: a crash)."""
import csv
import os

from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter


class AppendingWriter(ExperimentWriter):
    def __init__(self, log_dir: str) -> None:
        super().__init__(log_dir)
        if os.path.isfile(self.metrics_file_path):
            with open(self.metrics_file_path, newline="") as f:
                self.metrics_keys = list(next(csv.reader(f), []))

    def _check_log_dir_exists(self) -> None:
        """Keep what an earlier segment wrote (Lightning's removes metrics.csv here)."""

    def drop_from_step(self, step: int) -> None:
        """Forget the rows logged at `step` or later: a segment that ended without saving (a rank killed) logged steps
        after its last checkpoint, and the segment resuming from that checkpoint at `step` logs them again."""
        if not os.path.isfile(self.metrics_file_path):
            return
        with open(self.metrics_file_path, newline="") as f:
            rows = list(csv.DictReader(f))
        kept = [row for row in rows if not (row.get("step") or "").isdigit() or int(row["step"]) < step]
        if len(kept) == len(rows):
            return
        partial = f"{self.metrics_file_path}.partial"  # replaced whole: a kill now leaves the old file, never half
        with open(partial, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.metrics_keys)
            writer.writeheader()
            writer.writerows(kept)
        os.replace(partial, self.metrics_file_path)


class AppendingCSVLogger(CSVLogger):
    @property
    def experiment(self) -> AppendingWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = AppendingWriter(log_dir=self.log_dir)
        return self._experiment


def resumed_at(trainer) -> None:
    """Once the checkpoint restored the step (on_train_start), rank 0's CSV rows from that step on are dropped."""
    if trainer.ckpt_path is None or not trainer.is_global_zero:
        return
    for logger in trainer.loggers:
        if isinstance(logger, AppendingCSVLogger):
            logger.experiment.drop_from_step(trainer.global_step)
