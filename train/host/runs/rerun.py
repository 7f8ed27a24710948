"""A rerun: a new run of a recorded one, on its own cluster and profile, with its config, image digest, code and
data image; extra overrides apply on top and are recorded. `run-cluster --rerun` and `Run.rerun()` build it here."""
from pathlib import Path
from typing import List, Optional

from train.host import runs
from train.host.images.locations import run_image
from train.host.jobs.build import Request, Site, Submission, build


def rerun_submission(run_dir: Path, overrides: List[str], run_id: Optional[str] = None, dry_run: bool = False,
                     stale_image_ok: bool = False) -> Submission:
    """The checked submission of a rerun of `run_dir` (nothing queued yet)."""
    manifest = runs.read_manifest(run_dir)
    site = Site.load(manifest["cluster_file"])
    record = run_image(manifest, f"the image of {run_dir}", site.image_store)
    # The run's config.yaml already holds every override it was submitted with; new ones go on top.
    return build(site, Request(manifest["profile"], str(Path(run_dir) / "config.yaml"), list(overrides),
                               run_id=run_id, flavor=record.flavor, image=record, rerun_of=manifest["run_id"],
                               dry_run=dry_run, stale_image_ok=stale_image_ok, recorded_code=manifest.get("code"),
                               code_from=Path(run_dir), data_sha256=runs.data_digest(manifest)))
