"""The run record (cluster_train/host/runs/manifest.py): a manifest written before schema_version (version 1: the fake
runs of tests/host/test_report.py hold that format) reads as typed properties and stays version 1 when a status
updates it; a submission's manifest is version 2 and reads back as written; a newer version is refused with the fix."""
import json

import pytest
from host.test_own_code_data import data_dir, project, recorded_run
from host.test_report import DIGEST, fake_run

from cluster_train.shared.errors import UserError
from cluster_train.host.runs.manifest import SCHEMA_VERSION, Manifest, update_manifest


def test_a_version_1_manifest_reads_as_typed_properties_and_an_update_keeps_its_version(tmp_path):
    run_dir = fake_run(tmp_path, "lr-0.05", 0.05)
    manifest = Manifest.read(run_dir)
    assert "schema_version" not in manifest and manifest.schema_version == 1
    assert (manifest.run_id, manifest.cluster, manifest.profile, manifest.job_id) == \
        ("lr-0.05", "local", "cpu_1proc", "4242")
    assert (manifest.adapter.name, manifest.image_sha256, manifest.overrides) == ("local", DIGEST, ["optim.lr=0.05"])
    assert manifest.config["optim"]["lr"] == 0.05 and manifest["config"] is manifest.config  # the mapping: Run's
    assert (manifest.tasks, manifest.resumes, manifest.rerun_of, manifest.data, manifest.data_version()) == \
        ([], [], None, None, "-")
    updated = update_manifest(run_dir, segments=[{"segment": 1}])
    on_disk = json.loads((run_dir / "manifest.json").read_text())
    assert "schema_version" not in on_disk and updated.as_dict() == on_disk and updated.segments == [{"segment": 1}]


def test_a_submissions_manifest_is_the_current_version_and_reads_back_as_written(store, tmp_path, monkeypatch):
    run_dir = recorded_run(store, project(tmp_path), data_dir(tmp_path), monkeypatch)
    on_disk = json.loads((run_dir / "manifest.json").read_text())
    assert on_disk["schema_version"] == SCHEMA_VERSION == 2
    manifest = Manifest.read(run_dir)
    assert manifest.as_dict() == on_disk and manifest.path == run_dir / "manifest.json"
    assert (manifest.run_id, manifest.job_id, manifest.scheduler_name, manifest.command) == \
        ("r", "1", "local", ["python", "train.py"])
    assert manifest.is_own_code and manifest.code["sha256"] and manifest.data["method"] == "content"


@pytest.mark.parametrize("version, said", [
    (3, "is a manifest of schema version 3; this cluster-train reads versions up to 2: upgrade cluster-train "
        "(git pull) to read it"),
    ("2", "has schema_version '2', not a whole number from 1; it is damaged, restore it")])
def test_a_newer_or_damaged_version_is_refused_in_one_line(tmp_path, version, said):
    run_dir = fake_run(tmp_path, "r", 0.1)
    record = json.loads((run_dir / "manifest.json").read_text())
    (run_dir / "manifest.json").write_text(json.dumps({**record, "schema_version": version}))
    with pytest.raises(UserError) as refused:
        Manifest.read(run_dir)
    assert str(refused.value) == f"{run_dir / 'manifest.json'} {said}"
