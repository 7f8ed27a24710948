"""A run's data image in its job: `data.image` (a name or sha256 of the data store; a rerun's recorded digest wins
over the name) resolved once to the stored SquashFS the job binds read-only at data.root, whether each node first
copies it to its local disk (the profile's stage_data, the partition's local_dir), and the manifest's record of it.

Submission checks only that the file is there and is SquashFS (hashing hundreds of GB on a login node for every
sweep element would be slow); the job hashes the bytes it reads before the ranks start (cluster_train/host/schedulers/
templates/_data.sh.j2), so a modified image is refused there."""
from pathlib import Path
from typing import Any, Dict, List, Optional

from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError
from cluster_train.host.clusters import Partition, Profile
from cluster_train.host.data import directory, store

GB = 10**9  # local_disk_gb, as sites state disk sizes


def data_image(runs: List[cfg.RunConfig], image_store: Path, pinned: str = "") -> Optional[store.DataRecord]:
    """The stored data image the job's runs name (packed tasks must name one, or none); `pinned`: the digest a
    rerun or resume recorded, used in place of the name so the same bytes are read or nothing runs."""
    named = {run.data.image for run in runs} - {""}
    if len(named) > 1:
        raise UserError(f"the tasks of one job read one data image, not {', '.join(sorted(named))}; submit them as "
                        f"separate jobs")
    if not named:
        return None
    ref, root = pinned or named.pop(), store.data_root(image_store)
    entry = store.find(ref, root)
    if entry is None and pinned:
        raise UserError(f"the data image sha256:{pinned} this run read is not in {root}; pack the same directory "
                        f"again (the same files give the same digest) or import that file (bin/run-cluster data "
                        f"import FILE.sqsh), then rerun")
    if entry is None:
        store.verified(ref, root)  # raises: names the known ones and the fix
    if not store.is_squashfs(Path(entry.path)):
        raise UserError(f"the data image {entry.path} ({entry.name}) is not SquashFS any more; restore it or pack "
                        f"the data again")
    cut = store.truncation(Path(entry.path))
    if cut:  # a copy cut short would fail only in the job, after its wait in the queue
        raise UserError(f"the data image {entry.path} ({entry.name}) is damaged ({cut}); pack the data again, or "
                        f"import a whole copy (bin/run-cluster data verify lists what is damaged)")
    return entry


def fits_local_disk(entry: store.DataRecord, part: Partition) -> bool:
    return part.local_disk_gb is None or entry.size <= part.local_disk_gb * GB


def job_fields(entry: Optional[store.DataRecord], run: cfg.RunConfig, profile: Profile, part: Partition,
               cluster_file: str) -> Dict[str, Any]:
    """The fields of the Job's data image (DataImage of scheduling/job.py; none: the run reads a directory); a profile that
    stages where its partition names no local disk is refused."""
    if entry is None:
        return {}
    for name, value in (("data.root", run.data.root), (f"local_dir of partition {part.name}", part.local_dir)):
        if "," in value:  # Apptainer's bind list (APPTAINER_BIND) separates binds by commas
            raise UserError(f"{name} {value!r} holds a comma, which Apptainer's bind list cannot carry; "
                            f"choose a path without one")
    staging = profile.stage_data or profile.stage_required
    if staging and not part.local_dir:
        raise UserError(f"profile {profile.name!r} stages its data image but partition {part.name!r} names no "
                        f"local_dir; add the node-local disk (e.g. local_dir: $TMPDIR) to it in {cluster_file}")
    if profile.stage_required and not fits_local_disk(entry, part):
        raise UserError(f"data image {entry.name} is {entry.size / GB:.1f} GB but the local disk of partition "
                        f"{part.name!r} is {part.local_disk_gb} GB and profile {profile.name!r} requires staging; "
                        f"choose a partition with a larger local_disk_gb or set stage_required: false")
    stage = staging and fits_local_disk(entry, part)
    return dict(path=entry.path, sha256=entry.sha256, name=entry.name, size=entry.size,
                stage=part.local_dir if stage else "", stage_required=stage and profile.stage_required)


def staging_warnings(job, profile: Profile, part: Partition) -> List[str]:
    """A profile that asked for staging the partition's local disk is too small for: the job reads the shared copy."""
    if not job.data.path or job.data.stage or not profile.stage_data:
        return []
    return [f"warning: data image {job.data.name} ({job.data.size / GB:.1f} GB) does not fit partition "
            f"{part.name!r}'s local disk ({part.local_disk_gb} GB): the ranks read the shared copy, not a staged one"]


def manifest_record(job) -> Optional[Dict[str, Any]]:
    """What a manifest keeps of the data image: the digest a rerun reads again, the name it was asked for by; of a
    command's data directory, its digest (cluster_train/host/data/directory.py), which --rerun checks."""
    if not job.data.path:
        command_dir = job.work.entry == "command" and job.work.data_dir
        return directory.record(job.work.data_dir) if command_dir else None
    return {"name": job.data.name, "sha256": job.data.sha256, "path": job.data.path, "size": job.data.size,
            "staged_to": job.data.stage or None}
