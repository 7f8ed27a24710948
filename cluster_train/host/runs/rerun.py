"""A rerun: a new run of a recorded one, on its own cluster and profile, with its config, image digest, code and
data image; extra overrides apply on top and are recorded. `run-cluster --rerun`, `rerun()` and `Run.rerun()` of
the API build it here."""
from pathlib import Path
from typing import List, Optional, Sequence

from cluster_train.shared.errors import UserError
from cluster_train.host import runs
from cluster_train.host.data import directory
from cluster_train.host.images.locations import run_image
from cluster_train.host.jobs.build import Request, Site, Submission
from cluster_train.host.jobs.overrides import Overrides, typed_overrides
from cluster_train.host.runs.after import build_after
from cluster_train.host.runs.kept import kept_settings


def rerun_submission(run_dir: Path, overrides: Overrides, run_id: Optional[str] = None, dry_run: bool = False,
                     stale_image_ok: bool = False, *, extra: Sequence[str] = (),
                     after: Sequence[Path] = ()) -> Submission:
    """The checked submission of a rerun of `run_dir` (nothing queued yet); `extra`: options given that a rerun
    does not take (refused); `after`: runs it starts after."""
    if extra:
        raise UserError(f"--rerun takes the run's own cluster, profile and image; drop {', '.join(extra)} "
                        f"(or submit anew without --rerun)")
    found = runs.find(str(run_dir))
    manifest = runs.read_manifest(found)
    directory.check_rerun(found, manifest, typed_overrides(overrides))  # before the image or code is read
    site = Site.load(manifest.cluster_file)
    pulled: List[str] = []  # the image pulled from its registry first: said among the submission's warnings
    record = run_image(manifest, f"the image of {found}", site.image_store, pulled)
    # config.yaml holds every value the run had, but the profile's go over it again: its own --set values of those
    # keys are given again (kept_settings), new ones go on top.
    overrides = {**kept_settings(manifest, site.cluster.profile(manifest.profile)), **typed_overrides(overrides)}
    sub = build_after(site, Request(manifest.profile, str(Path(found) / "config.yaml"), overrides,
                                    run_id=run_id, flavor=record.flavor, image=record, rerun_of=manifest.run_id,
                                    dry_run=dry_run, stale_image_ok=stale_image_ok,
                                    recorded_code=manifest.code, code_from=Path(found),
                                    data_sha256=manifest.data_digest, after=list(after)))
    sub.warnings[:0] = pulled
    return sub
