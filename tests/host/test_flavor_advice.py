"""An image flavor is one of containers/flavors.yaml, each built from its containers/<flavor>.def (issue 55 item 10):
an unknown one is refused as unknown, naming those there are, before any advice; no message advises building a
flavor that `make image` cannot build."""
import os

import pytest
from conftest import ROOT, run_cluster

from cluster_train.shared.errors import UserError
from cluster_train.host.clusters.flavors import image_flavors, make_image


def test_every_flavor_has_its_definition():
    assert sorted(image_flavors()) == sorted(p.stem for p in (ROOT / "containers").glob("*.def"))


def test_only_a_known_flavor_is_advised_to_build():
    assert make_image("cuda12.8") == "make image FLAVOR=cuda12.8"
    for unknown in ("cuda99", "cuda99+proj"):
        with pytest.raises(UserError, match="unknown image flavor 'cuda99'; choose one of: cpu, cuda11.6, cuda12.8"):
            make_image(unknown)


def test_every_build_advice_goes_through_make_image():
    """`make image FLAVOR={...}` written anywhere else could name a flavor no one can build."""
    advising = [f"{path.relative_to(ROOT)}:{number}" for path in sorted((ROOT / "cluster_train" / "host").rglob("*.py"))
                if path.name != "flavors.py"
                for number, line in enumerate(path.read_text().splitlines(), 1) if "make image FLAVOR={" in line]
    assert advising == []


@pytest.mark.parametrize("flavor, said", [
    ("cuda99", "unknown image flavor 'cuda99'; choose one of: cpu, cuda11.6, cuda12.8 (containers/flavors.yaml)"),
    ("cuda11.6", "no cuda11.6 image has been built here; build it with: make image FLAVOR=cuda11.6"),
])
def test_a_notebook_of_a_flavor_with_no_image_says_why_in_one_line(tmp_path, flavor, said):
    """Was an AttributeError traceback: the JupyterLab check read the labels of an image that is not there."""
    (tmp_path / "settings.yaml").write_text("{}\n")
    env = {**os.environ, "CT_IMAGES": str(tmp_path / "images"), "CT_RUNS_DIR": str(tmp_path / "runs"),
           "CT_SETTINGS": str(tmp_path / "settings.yaml")}
    done = run_cluster("notebook", "local", "cpu_1proc", "--flavor", flavor, env=env, timeout=60)
    assert (done.returncode, done.stderr, done.stdout) == (2, f"run-cluster: error: {said}\n", "")
    assert not (tmp_path / "runs").exists()
