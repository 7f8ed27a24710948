"""The first five minutes: `make demo` in a clean clone of this checkout, on a host with only what the README asks
for (python3, pyyaml, jinja2: no host venv, no matplotlib), trains the demo in the CPU image without rebuilding it,
does not warn about its own config, and ends by printing where the run's report is; that report opens in headless
Chromium with its curves drawn. The run is conftest.py's `made_demo`/`demo_run`, trained once a session."""
import pytest
from conftest import manifest, sha256
from cluster.test_end_to_end import assert_trained
from host.test_report import check_in_browser, curve_points, svg_lines


@pytest.mark.image
def test_make_demo_in_a_clean_clone_ends_with_its_report_which_opens(made_demo, demo_run, cpu_image, tmp_path):
    done = made_demo.done
    print(f"make demo took {made_demo.seconds:.0f} s")
    assert "make image: building" not in done.stdout, done.stdout[:3000]  # the stored image was current
    assert not (made_demo.clone / ".venv").exists() and " -m venv " not in done.stdout  # no host venv
    assert "input-bound" not in done.stdout + done.stderr, done.stdout[-3000:]  # the demo's config is not
    assert "matplotlib" in made_demo.refused, made_demo.refused  # the report was made without it
    last = done.stdout.rstrip().splitlines()[-1]  # make demo's last word: where the report is
    assert last == f"make demo: run {demo_run.name} finished; its report: {demo_run / 'report.html'}", last

    results = assert_trained(demo_run, world_size=2)
    recorded = manifest(demo_run)
    assert recorded["image"]["sha256"] == cpu_image.sha256 == sha256(recorded["image"]["path"])
    assert results["image_sha256"] == cpu_image.sha256  # the job saw the same digest inside
    assert recorded["config"]["trainer"]["devices"] == 2 and recorded["cluster"] == "local"
    assert recorded["git"]["commit"] == made_demo.clone_head

    page = (demo_run / "report.html").read_text()
    lines = svg_lines(page)  # drawn without matplotlib: SVG, one line per CSV column with as many points
    assert sorted(n for image in lines.values() for n in image) == sorted(p["points"] for p in curve_points(page))
    check_in_browser(demo_run / "report.html", tmp_path, expect_images=len(lines), expect_tables=page.count("<table"))
