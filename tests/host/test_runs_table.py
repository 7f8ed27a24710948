"""`run-cluster runs` fits a terminal (issue 55 item 13): one long LAST cell (a failure's cause) padded every line to
about 400 characters. At a terminal (COLUMNS, where set, its width) the LAST cells are cut to fit, with an
ellipsis, and the key columns stay whole; a pipe or a file gets whole cells, as ps and systemctl give them."""
import io

import pytest

from cluster_train.host.views import table

RUN_ID = "20261202-001122-ci-slurm-n2_gpu2-ab12"
CAUSE = "rank 1 died on host n2 (exit 137: killed, SIGKILL or the kernel's OOM killer); " + "its log said " * 30
ROWS = [{"cluster": "ci-slurm", "run": RUN_ID, "state": "FAILED", "segments": 2, "progress": "1/4", "gpu-h": "0.10",
         "last": CAUSE, "age": "3m"},
        {"cluster": "ci-slurm", "run": "short", "state": "COMPLETED", "segments": 1, "progress": "4/4",
         "gpu-h": "0.05", "last": "val/acc=0.5", "age": "1h"},
        {"cluster": "gilbreth", "run": "-", "state": "UNREACHABLE", "last": "ssh: connect to host x port 22: " + "y" * 50}]


def shown(monkeypatch, tty: bool, columns: str = "") -> str:
    monkeypatch.setattr(table, "run_rows", lambda *args: ROWS)
    monkeypatch.setattr(table.sys, "stdout", type("Out", (io.StringIO,), {"isatty": lambda self: tty})())
    if columns:  # shutil.get_terminal_size reads it first
        monkeypatch.setenv("COLUMNS", columns)
    else:  # the terminal's own width, as os.get_terminal_size would read it
        monkeypatch.delenv("COLUMNS", raising=False)
        monkeypatch.setattr(table.shutil, "get_terminal_size", lambda: type("Size", (), {"columns": 110})())
    assert table.main([]) == 0
    return table.sys.stdout.getvalue()


@pytest.mark.parametrize("tty, columns, width", [(True, "", 110), (True, "130", 130)])
def test_at_a_terminal_every_line_fits_and_the_key_columns_stay_whole(monkeypatch, tty, columns, width):
    out = shown(monkeypatch, tty, columns)
    lines = out.splitlines()
    assert max(len(line) for line in lines) == width, out  # the cut column fills what the others leave
    assert RUN_ID in lines[1] and lines[1].endswith("...  3m"), out  # its age still follows the cut cause
    assert lines[1].split()[:6] == ["ci-slurm", RUN_ID, "FAILED", "2", "1/4", "0.10"]
    assert lines[2].split()[:3] == ["ci-slurm", "short", "COMPLETED"], out
    assert lines[3].startswith("gilbreth  -") and lines[3].endswith("..."), out


@pytest.mark.parametrize("columns", ["", "100"])
def test_a_pipe_gets_whole_cells_whatever_columns_says(monkeypatch, columns):
    out = shown(monkeypatch, tty=False, columns=columns)
    assert CAUSE.strip() in out and "..." not in out


def test_a_terminal_too_narrow_for_the_keys_keeps_them_whole():
    lines = table.table(ROWS, 40).splitlines()
    assert RUN_ID in lines[1] and "COMPLETED" in lines[2] and lines[1].split()[6] == "r..."
