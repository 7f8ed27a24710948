"""The energy each rank's GPU drew, sampled (issue 46), for sites whose accounting records none (sacct's
ConsumedEnergyRaw needs an energy plugin): the heartbeat thread (heartbeat.py) reads the GPU's power draw every tick
(NVML, through torch.cuda.power_draw) and adds power x the time since the last reading. Its file
`logs/energy/segment-<S>-rank-<R>` holds one line `JOULES SECONDS SAMPLES`; the host sums every file
(cluster_train/host/runs/cost.py) and marks the figure as sampled."""
import os
import time
from pathlib import Path
from typing import Callable, Optional


class PowerMeter:
    def __init__(self, path: Path, read_watts: Callable[[], float]):
        self.path, self.read_watts = path, read_watts
        self.joules, self.seconds, self.samples = 0.0, 0.0, 0
        self._last: Optional[float] = None

    def sample(self) -> Optional[str]:
        """One reading: its power over the time since the last one; the file's line (None: NVML stopped answering,
        and the heartbeat, whose silence means a hang, must go on without it)."""
        try:
            watts = self.read_watts()
        except Exception:
            return None
        now = time.monotonic()
        if self._last is not None:
            self.joules += watts * (now - self._last)
            self.seconds += now - self._last
        self._last, self.samples = now, self.samples + 1
        return f"{self.joules:.1f} {self.seconds:.1f} {self.samples}\n"


def meter(run_dir: str, rank: int) -> Optional[PowerMeter]:
    """This rank's meter on its CUDA device; None without a GPU or where NVML does not answer."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        device = torch.cuda.current_device()

        def read_watts() -> float:
            return torch.cuda.power_draw(device) / 1000  # NVML's milliwatts

        read_watts()
    except Exception:  # no NVML (pynvml), a driver without power readings: no energy, never a failed run
        return None
    name = f"segment-{os.environ.get('CT_SEGMENT', '1')}-rank-{rank}"
    return PowerMeter(Path(run_dir) / "logs" / "energy" / name, read_watts)
