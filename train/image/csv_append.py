"""Lightning's CSVLogger deletes an existing metrics.csv when a run writes into the same directory again; a resumed
run must keep every segment's rows. This one appends (and widens the header when new columns appear)."""
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


class AppendingCSVLogger(CSVLogger):
    @property
    def experiment(self) -> AppendingWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = AppendingWriter(log_dir=self.log_dir)
        return self._experiment
