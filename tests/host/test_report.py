"""`run-cluster report` and `compare`: run directories made here in the real formats (manifest.json, config.yaml,
Lightning's metrics.csv, results.json, logs/segments.jsonl), one real run trained in the image, and the report opened
in headless Chromium."""
import base64
import csv
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import pytest
import yaml
from PIL import Image

from cluster_train.shared.errors import UserError
from cluster_train.host import cli
from cluster_train.host.reports.curves import pyplot_figure
from cluster_train.host.reports.report import choose_metric, group_members, sort_by, write_report

DIGEST = "ab12" * 16
COMMIT = "0123456789abcdef0123456789abcdef01234567"
CURVE_BLUE = (31, 119, 180)  # matplotlib's first line colour
SVG = "{http://www.w3.org/2000/svg}"


def lightning_csv(path: Path, epochs: int, steps_per_epoch: int, lr: float) -> None:
    """Rows as Lightning's CSV logger writes them: train rows every step, one val row per epoch, blanks elsewhere."""
    columns = ["epoch", "step", "train/acc", "train/loss", "val/acc", "val/loss"]
    rows, step = [], 0
    rows.append({"epoch": 0, "step": 0, "val/acc": 0.01, "val/loss": 4.6})  # validate() before fit
    for epoch in range(epochs):
        for _ in range(steps_per_epoch):
            rows.append({"epoch": epoch, "step": step, "train/acc": 0.1 + lr * step, "train/loss": 4.6 - lr * step})
            step += 1
        rows.append({"epoch": epoch, "step": step - 1, "val/acc": 0.1 + lr * step, "val/loss": 4.5 - lr * step})
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows(rows)


def fake_run(root: Path, run_id: str, lr: float, epochs: int = 3, dirty: bool = False, results: bool = True,
             code: dict = None) -> Path:
    run_dir = root / run_id
    (run_dir / "logs").mkdir(parents=True)
    config = {"task": "classify", "seed": 0, "output_dir": str(run_dir),
              "model": {"name": "resnet_cifar", "params": {}},
              "data": {"name": "cifar100", "batch_size": 32, "num_workers": 0},
              "optim": {"name": "adamw", "lr": lr}, "trainer": {"max_epochs": epochs, "precision": "32"}}
    manifest = {"run_id": run_id, "submitted_at": "2026-11-24T01:00:00+0000", "cluster": "local",
                "cluster_file": "clusters/local.yaml", "profile": "cpu_1proc", "experiment": "demo",
                "overrides": [f"optim.lr={lr}"],
                "image": {"path": "images/cpu.sif", "sha256": DIGEST, "flavor": "cpu", "registry": None},
                "scheduler": {"name": "local", "job_id": "4242"}, "git": {"commit": COMMIT, "dirty": dirty},
                "code": code,
                "job": {}, "config": config}
    (run_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    lightning_csv(run_dir / "metrics.csv", epochs, steps_per_epoch=5, lr=lr)
    segments = [{"event": "start", "segment": 1, "job_id": "4242", "hosts": "node1", "time": "2026-11-24T01:00:01"},
                {"event": "train_start", "segment": 1, "output_dir": str(run_dir), "resumed_epoch": None,
                 "resumed_step": None}]
    if results:  # a run without results.json is still running: its segment has not ended
        segments.append({"event": "end", "segment": 1, "how": "COMPLETED", "exit_code": 0,
                         "time": "2026-11-24T01:02:00"})
    (run_dir / "logs" / "segments.jsonl").write_text("".join(json.dumps(e) + "\n" for e in segments))
    if results:
        record = {"model": "resnet_cifar", "initial_val_loss": 4.6, "final_val_loss": 4.5 - lr * 15,
                  "final_val_acc": 0.1 + lr * 15, "best_val_loss": 4.5 - lr * 15, "epochs": epochs, "world_size": 1,
                  "hostnames": ["node1"], "precision": "32",
                  "input": {"steps": 15, "data_wait_s": 0.5, "compute_s": 2.5, "wait_fraction": 0.167,
                            "input_bound": True, "num_workers": 0}}
        (run_dir / "results.json").write_text(json.dumps(record, indent=2))
    return run_dir


@pytest.fixture
def sweep(tmp_path):
    """A directory of three finished runs differing in optim.lr, and one that has not finished."""
    root = tmp_path / "sweep"
    for run_id, lr in (("lr-0.01", 0.01), ("lr-0.05", 0.05), ("lr-0.02", 0.02)):
        fake_run(root, run_id, lr)
    fake_run(root, "lr-0.1-running", 0.1, results=False)
    return root


# ---- what the HTML holds ------------------------------------------------------------------------------------------

def curve_points(page: str) -> list:
    block = re.search(r'<script type="application/json" id="curve-points">(.*?)</script>', page, re.S)
    return json.loads(block.group(1))


def images_of(page: str) -> dict:
    """Every <img> of the page, decoded from its data: URI: id -> PIL image."""
    found = {}
    for image_id, data in re.findall(r'<img id="curve-(\d+)"[^>]*src="data:image/png;base64,([^"]+)"', page):
        raw = base64.b64decode(data)
        assert raw.startswith(b"\x89PNG\r\n\x1a\n")
        found[int(image_id)] = Image.open(io.BytesIO(raw)).convert("RGB")
    assert len(found) == page.count("<img "), "an image that is not an embedded PNG"
    return found


def drawn(image: Image.Image) -> int:
    """How many pixels are curve-coloured (matplotlib's first colour): zero on an empty plot."""
    pixels = np.asarray(image.convert("RGB"), dtype=int)
    return int((np.abs(pixels - CURVE_BLUE).max(axis=2) < 40).sum())


def csv_points(csv_path: Path, column: str) -> int:
    with csv_path.open(newline="") as f:
        return sum(1 for row in csv.DictReader(f) if row.get(column) not in (None, ""))


def check_curves(page: str, report_dir: Path, expect_images: int) -> list:
    """Every image is a non-empty PNG; every curve drew as many points as its CSV column has values."""
    images, points = images_of(page), curve_points(page)
    assert len(images) == expect_images
    assert {p["image"] for p in points} == set(images)
    for p in points:
        assert p["points"] == csv_points(report_dir / p["run"] / p["source"], p["column"]) > 0, p
    for image in images.values():
        assert image.width > 300 and image.height > 150 and drawn(image) > 100
    return points


def test_run_report_has_curves_results_config_digest_code_segments_and_throughput(tmp_path):
    run_dir = fake_run(tmp_path / "runs", "one", lr=0.02, dirty=True)
    out = write_report(run_dir)
    assert out == run_dir / "report.html"
    page = out.read_text()
    points = check_curves(page, run_dir, expect_images=1)
    assert {p["column"] for p in points} == {"train/acc", "train/loss", "val/acc", "val/loss"}
    assert next(p["points"] for p in points if p["column"] == "val/loss") == 4  # before fit + 3 epochs
    for text in (DIGEST, COMMIT, "uncommitted changes", "final_val_loss", "<td>4.2</td>", "COMPLETED", "node1",
                 "max_epochs: 3", "samples/s", "17%", "160",  # 15 steps x 32 / 3 s = 160 samples/s
                 "0.0331 CPU-hours held"):  # its segment's 119 s on one CPU (issue 46's cost)
        assert text in page, text
    assert page.count("<table") == 5 and "<script" not in page.replace('<script type="application/json"', "")


def test_the_runs_own_throughput_measure_is_shown_where_it_has_one(tmp_path):
    run_dir = fake_run(tmp_path / "runs", "one", lr=0.02)
    results = json.loads((run_dir / "results.json").read_text())
    # cluster_train/image/speed.py's
    results["throughput"] = {"samples_per_s": 987.5, "epochs_measured": 2, "world_size": 1}
    (run_dir / "results.json").write_text(json.dumps(results))
    page = write_report(run_dir).read_text()
    assert "<td>987.5</td>" in page and "throughput, best first" not in page  # one run's figures, not per model


def test_report_of_a_multi_model_run_ranks_the_models_and_draws_each_log(tmp_path):
    """Seed 000's FINAL RESULTS SUMMARY: test accuracy per model, best first, and each model's own curves."""
    run_dir = fake_run(tmp_path, "suite", lr=0.02, results=False)
    (run_dir / "metrics.csv").unlink()
    for model in ("LateFusion2D", "EarlyFusion3D"):
        (run_dir / "logs" / model).mkdir()
        lightning_csv(run_dir / "logs" / model / "metrics.csv", epochs=2, steps_per_epoch=3, lr=0.02)
    (run_dir / "results.json").write_text(json.dumps({"task": "video_suite", "best_model": "EarlyFusion3D",
                                                      "test_acc": {"LateFusion2D": 0.4, "EarlyFusion3D": 0.6}}))
    page = write_report(run_dir).read_text()
    check_curves(page, run_dir, expect_images=2)
    assert "test_acc, best first" in page
    assert page.index("<td>EarlyFusion3D</td><td>0.6</td>") < page.index("<td>LateFusion2D</td><td>0.4</td>")


def test_group_report_sorts_by_the_first_validation_metric_and_shows_what_differs(sweep):
    page = write_report(sweep).read_text()
    check_curves(page, sweep, expect_images=4)  # train/acc, train/loss, val/acc, val/loss, each overlaid
    runs_table = page[page.index('<table class="runs">'):]
    runs_table = runs_table[:runs_table.index("</table>")]
    order = re.findall(r"<td>(lr-[^<]*)</td>", runs_table)
    assert order == ["lr-0.05", "lr-0.02", "lr-0.01", "lr-0.1-running"]  # final_val_loss, lowest first
    assert "sorted by final_val_loss (lower is better)" in page
    assert "<td>lr-0.1-running</td><td>RUNNING</td>" in runs_table
    assert "<th>optim.lr</th>" in runs_table and "output_dir" not in runs_table and "<th>seed</th>" not in runs_table
    lines = {p["run"] for p in curve_points(page) if p["column"] == "val/loss"}
    assert lines == {"lr-0.01", "lr-0.02", "lr-0.05", "lr-0.1-running"}


def test_group_is_sorted_by_the_metric_asked_for_best_first(sweep):
    members = group_members(sweep)  # the ordering alone: the page around it is the test above's
    ordered = sort_by(members, choose_metric(members, "final_val_acc"))
    assert [r.run_id for r in ordered] == ["lr-0.05", "lr-0.02", "lr-0.01", "lr-0.1-running"]  # highest first
    assert choose_metric(members, None) == "final_val_loss"  # the first best_*/final_* validation metric


def test_compare_shows_differing_keys_digests_code_and_metrics(tmp_path, capsys):
    a = fake_run(tmp_path, "a", lr=0.01)
    b = fake_run(tmp_path, "b", lr=0.05, dirty=True, code={"source": "/home/me/project", "sha256": "cd34" * 16})
    assert cli.main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.strip() and line[0] != "-"}
    assert rows["run"] == ["a", "b"]
    assert rows["optim.lr"] == ["0.01", "0.05"]
    assert "trainer.max_epochs" not in rows and "output_dir" not in rows  # same in both / each run's own
    assert rows["image"] == ["cpu", DIGEST[:12], "cpu", DIGEST[:12]]
    assert rows["code"] == [COMMIT[:10], COMMIT[:10] + "+dirty", "code", "cd34" * 3]  # and b's code snapshot
    assert rows["final_val_loss"] == ["4.35", "3.75", "*"]  # the best one marked
    assert rows["final_val_acc"] == ["0.25", "0.85", "*"]


@pytest.mark.parametrize("argv, names", [
    (["report", "{tmp}/nothing-here"], "nothing-here is neither a run directory"),
    (["report", "{tmp}/sweep", "--metric", "final_val_accuracy"], "'final_val_accuracy' is in no run's results.json; "
                                                                   "choose one of: initial_val_loss, final_val_loss"),
    (["compare", "{tmp}/sweep/lr-0.01"], "compare needs two run directories or more"),
    (["compare", "{tmp}/sweep/lr-0.01", "{tmp}"], "has no manifest.json; pass a run directory"),
])
def test_bad_input_is_one_line_naming_the_value_and_the_fix(sweep, tmp_path, capsys, argv, names):
    (tmp_path / "nothing-here").mkdir()
    assert cli.main([a.format(tmp=tmp_path) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("run-cluster: error: ") and names in err, err
    assert not (sweep / "report.html").exists()


def svg_lines(page: str) -> dict:
    """Every <img> of the page as SVG decoded from its data: URI: id -> how many points each of its lines has."""
    found = {}
    for image_id, data in re.findall(r'<img id="curve-(\d+)"[^>]*src="data:image/svg\+xml;base64,([^"]+)"', page):
        svg = ElementTree.fromstring(base64.b64decode(data))
        assert svg.get("width") == "750", svg.attrib  # the PNGs' width: the page lays out the same
        found[int(image_id)] = [len(line.get("points").split()) for line in svg.iter(SVG + "polyline")]
    assert len(found) == page.count("<img "), "an image that is not an embedded SVG"
    return found


def test_without_matplotlib_the_report_draws_its_curves_as_svg(sweep, monkeypatch):
    """A login node's or a laptop's python3 with only pyyaml and jinja2: the report is still made, each curve a line
    of as many points as its CSV column has values; only `scaling` names the install."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    page = write_report(sweep / "lr-0.02").read_text()
    points = curve_points(page)
    lines = svg_lines(page)
    assert list(lines) == [1] and sorted(lines[1]) == sorted(p["points"] for p in points) and len(points) == 4
    for p in points:
        assert p["points"] == csv_points(sweep / "lr-0.02" / p["source"], p["column"]), p
    group = write_report(sweep).read_text()
    assert sorted(svg_lines(group).values()) == [[4] * 4] * 2 + [[15] * 4] * 2  # val/*: 4 points, train/*: 15
    with pytest.raises(UserError, match=r"matplotlib is not installed; .*pip install --user matplotlib"):
        pyplot_figure()


# ---- in a browser -------------------------------------------------------------------------------------------------

# Appended to a copy of the report: after load, what the browser made of it, on the console (Chromium logs it to
# stderr). The report itself has no script.
PROBE = """<script>window.addEventListener("load", () => console.log("rendered " + JSON.stringify({
  images: [...document.images].map(i => i.naturalWidth), tables: document.querySelectorAll("table").length,
  rows: document.querySelectorAll("tr").length})));</script>"""


def screenshot(page: Path, shot: Path) -> dict:
    """One headless Chromium run: the page's screenshot, and what PROBE logged."""
    exe = shutil.which("chromium")
    if exe is None:
        pytest.fail("chromium is not installed: run `make chromium` (make test does)")
    done = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--user-data-dir={shot.parent / 'chromium-profile'}", "--enable-logging=stderr", "--v=0",
                           f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri()],
                          capture_output=True, text=True, timeout=120, cwd=shot.parent)
    logged = re.search(r'"rendered (\{.*?\})", source:', done.stderr)
    assert logged and shot.is_file(), done.stderr[-3000:]
    return json.loads(logged.group(1))


def check_in_browser(report: Path, tmp_path: Path, expect_images: int, expect_tables: int) -> Path:
    """The browser decoded every image and laid out the tables; its screenshot shows curves (returned for a look)."""
    probe = tmp_path / f"{report.parent.name}.html"
    probe.write_text(report.read_text().replace("</body>", PROBE + "</body>"))
    shot = tmp_path / f"{report.parent.name}.png"
    rendered = screenshot(probe, shot)
    assert len(rendered["images"]) == expect_images and all(w > 300 for w in rendered["images"]), rendered
    assert rendered["tables"] == expect_tables and rendered["rows"] == report.read_text().count("<tr>"), rendered
    image = Image.open(shot).convert("RGB")
    pixels = np.asarray(image, dtype=np.uint32)
    colours = np.unique(pixels[..., 0] << 16 | pixels[..., 1] << 8 | pixels[..., 2])
    assert image.size == (1280, 2000) and len(colours) > 50  # not a blank page
    assert drawn(image) > 200, "no curve visible in the screenshot"
    return shot


@pytest.mark.slow
@pytest.mark.parametrize("drawn_by", ["matplotlib", "svg"])
def test_run_and_group_reports_render_in_headless_chromium(sweep, tmp_path, monkeypatch, drawn_by):
    if drawn_by == "svg":
        monkeypatch.setitem(sys.modules, "matplotlib", None)
    check_in_browser(write_report(sweep / "lr-0.02"), tmp_path, expect_images=1, expect_tables=5)
    check_in_browser(write_report(sweep), tmp_path, expect_images=4, expect_tables=2)
