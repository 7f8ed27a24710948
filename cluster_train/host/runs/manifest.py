"""A run's record, manifest.json, read and written here only: `Manifest`, its typed view, and the functions that read,
write and update the file. The JSON keeps the keys runs on disk hold (the node reads some: shared/tracker_identity.py)
plus `schema_version`; one without it is version 1 (every run before the key), read as it always was. Code reads a
manifest by property (`.job_id`, `.adapter`); the mapping interface stays for the public `Run.manifest`."""
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional

from cluster_train.shared import config as cfg
from cluster_train.shared.errors import UserError
from cluster_train.host import project
from cluster_train.host.data import binding
from cluster_train.host.jobs import user_code
from cluster_train.host.schedulers import adapter

MANIFEST = "manifest.json"
# 1: no schema_version key (before issue 57); 2: the key written, the other keys as version 1 holds them
SCHEMA_VERSION = 2
# What every reader relies on: key -> type (nested keys dotted); a manifest lacking one is damaged
REQUIRED = {"run_id": str, "cluster_file": str, "profile": str, "image.sha256": str, "scheduler.name": str,
            "scheduler.job_id": str}


class Manifest(Mapping[str, Any]):
    """A run's manifest.json as typed properties; `Manifest.read(run_dir)` checks it first. Read-only: a change
    goes to the file (`update`), and the run's next read sees it."""

    def __init__(self, record: Dict[str, Any], path: Optional[Path] = None) -> None:
        self._record = record
        self.path = path  # the file it was read from; None for one made in memory

    @classmethod
    def read(cls, run_dir: Path) -> "Manifest":
        """The manifest of a run directory; a missing, damaged or newer-versioned one refused in one line."""
        path = Path(run_dir) / MANIFEST
        if not path.is_file():
            raise UserError(f"{run_dir} has no {MANIFEST}; pass a run directory made by run-cluster (runs/<id>)")
        try:
            record = json.loads(path.read_bytes().decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as err:
            raise UserError(f"{path} is not a valid manifest ({type(err).__name__}); it is damaged, restore "
                            f"it") from None
        if isinstance(record, dict):  # anything else lacks every key below
            checked_version(record, path)
        for key, kind in REQUIRED.items():
            if not isinstance(dotted(record, key), kind) or not dotted(record, key):
                raise UserError(f"{path} lacks {key}; it is damaged or not a run-cluster manifest, restore it")
        return cls(record, path)

    # ---- the mapping interface (Run.manifest's public form) ------------------------------------------------------

    def __getitem__(self, key: str) -> Any:
        return self._record[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._record)

    def __len__(self) -> int:
        return len(self._record)

    def __repr__(self) -> str:
        return f"Manifest({self._record.get('run_id')!r})"

    def as_dict(self) -> Dict[str, Any]:  # as the JSON holds it (a copy at the top level)
        return dict(self._record)

    def _part(self, key: str) -> Dict[str, Any]:  # a nested record; {} where there is none or null
        value = self._record.get(key)
        return value if isinstance(value, dict) else {}

    # ---- who and where -------------------------------------------------------------------------------------------

    @property
    def schema_version(self) -> int:
        return int(self._record.get("schema_version") or 1)

    @property
    def run_id(self) -> str:
        return self._record["run_id"]

    @property
    def submitted_at(self) -> str:
        return self._record.get("submitted_at") or ""

    @property
    def cluster(self) -> str:
        """The cluster's name (a manifest before it was recorded: its cluster file's stem)."""
        return self._record.get("cluster") or Path(self._record.get("cluster_file") or "").stem

    @property
    def cluster_file(self) -> str:
        return self._record["cluster_file"]

    @property
    def profile(self) -> str:
        return self._record["profile"]

    @property
    def scheduler_name(self) -> str:
        return self._part("scheduler")["name"]

    @property
    def adapter(self):
        """The run's scheduler (cluster_train/host/schedulers), by the name it was queued with."""
        return adapter(self.scheduler_name)

    @property
    def job_id(self) -> str:
        """Its current job: the last resume's, else the submission's."""
        return self._part("scheduler")["job_id"]

    # ---- what runs -------------------------------------------------------------------------------------------------

    @property
    def experiment(self) -> str:
        return self._record.get("experiment") or ""

    @property
    def overrides(self) -> List[str]:
        """The --set lines (text) it was submitted with, as the command line shows them."""
        return list(self._record.get("overrides") or [])

    @property
    def config(self) -> Dict[str, Any]:
        """The run config it was submitted with, every override applied ({} where none is recorded)."""
        return self._part("config")

    @property
    def command(self) -> List[str]:
        """Your own command's words ([] for a task's run)."""
        return list(self.config.get("command") or [])

    @property
    def is_own_code(self) -> bool:
        """A run of your own command (config.command), not of a task."""
        return bool(self.command)

    @property
    def job(self) -> Dict[str, Any]:
        """The resolved job's flat record (cluster_train/host/scheduling/job.py ResolvedJob.as_dict)."""
        return self._part("job")

    @property
    def tasks(self) -> List[str]:
        """A packed run's task names (each in its own directory); [] for any other run."""
        return [task["name"] for task in self.job.get("tasks") or []]

    @property
    def image(self) -> Dict[str, Any]:
        return self._part("image")

    @property
    def image_sha256(self) -> str:
        return self.image["sha256"]

    @property
    def image_flavor(self) -> str:
        return self.image.get("flavor") or ""

    @property
    def image_registry(self) -> Optional[Dict[str, Any]]:
        """Where the image was pulled from or pushed to (a reference), None where it was built here."""
        registry = self.image.get("registry")
        return registry if isinstance(registry, dict) else None

    @property
    def image_parent_sha256(self) -> str:
        return self.image.get("parent_sha256") or ""

    @property
    def data(self) -> Optional[Dict[str, Any]]:
        """The data record: a data image's (name, sha256) or a directory's (root, digest); None where none."""
        return self._record.get("data") or None

    @property
    def data_digest(self) -> str:
        """The digest of the data image it read ("" where it read a directory): a rerun or resume reads it again."""
        return (self.data or {}).get("sha256") or ""

    def data_version(self, digits: int = 12) -> str:
        """The data it read: its data image (name and digest: the bytes a rerun reads again), else its directory."""
        data = self.data or {}
        if data.get("sha256"):
            return f"{data.get('name') or '?'} sha256:{data['sha256'][:digits]}"
        root = (self.config.get("data") or {}).get("root")
        return f"directory {root}" if root else "-"

    @property
    def code(self) -> Optional[Dict[str, Any]]:
        """The snapshot of the code that ran (a command's project, --dev's package), None where the image's ran."""
        return self._record.get("code") or None

    @property
    def git(self) -> Dict[str, Any]:
        return self._part("git")

    # ---- its history -----------------------------------------------------------------------------------------------

    @property
    def rerun_of(self) -> Optional[str]:
        return self._record.get("rerun_of")

    @property
    def resumes(self) -> List[Dict[str, Any]]:
        """Each resume's record, oldest first (its job, profile, overrides, previous job)."""
        return list(self._record.get("resumes") or [])

    @property
    def after(self) -> List[Dict[str, Any]]:
        """The runs the submission waited on (--after, a pipeline's earlier stages)."""
        return list(self._record.get("after") or [])

    @property
    def sweep(self) -> Optional[Dict[str, Any]]:
        """A sweep element's sweep, index and swept values; None for any other run."""
        return self._record.get("sweep") or None

    @property
    def segments(self) -> List[Dict[str, Any]]:
        """The segments the last status recorded (logs/segments.jsonl is the run's own, newer word)."""
        return list(self._record.get("segments") or [])

    @property
    def cost(self) -> Dict[str, Any]:
        """What the last status recorded the run cost ({} before)."""
        return self._part("cost")


read_manifest = Manifest.read


def dotted(record: Dict[str, Any], key: str) -> Any:
    value: Any = record
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def checked_version(record: Dict[str, Any], path: Path) -> None:
    """A manifest this checkout reads: version 1 (no key) up to SCHEMA_VERSION; a newer one came from a newer
    cluster-train, whose keys this one may misread."""
    version = record.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UserError(f"{path} has schema_version {version!r}, not a whole number from 1; it is damaged, "
                        f"restore it")
    if version > SCHEMA_VERSION:
        raise UserError(f"{path} is a manifest of schema version {version}; this cluster-train reads versions up "
                        f"to {SCHEMA_VERSION}: upgrade cluster-train (git pull) to read it")


def write_manifest(job, run: cfg.RunConfig, job_id: str, experiment: str, overrides, rerun_of=None,
                   code=None, **extra) -> Manifest:
    """The manifest of a queued job, written in its run directory: everything needed to rerun it exactly."""
    record = {
        "schema_version": SCHEMA_VERSION,
        "run_id": job.run_id,
        "submitted_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "cluster": job.cluster,
        "cluster_file": job.cluster_file,
        "profile": job.profile,
        "experiment": experiment,
        "overrides": cfg.setting_lines(overrides),  # the text form; parse_settings reads it back as typed
        "image": {"path": job.image.path, "sha256": job.image.sha256, "flavor": job.image.flavor,
                  "registry": job.image.registry, "signed_from": job.image.signed_from or None,
                  "parent_sha256": job.image.parent_sha256 or None},
        "data": binding.manifest_record(job),  # the data image the job binds (data.image), else null
        "scheduler": {"name": job.scheduler, "job_id": job_id},
        "git": project.git_state(),
        # the snapshot of the code that runs (a command's project, --dev's cluster_train package), else null
        "code": code,
        "command": sys.argv,
        "rerun_of": rerun_of,
        "job": job.as_dict(),
        "config": user_code.recorded_config(run),  # a command's: its command, code, binds (no task defaults)
        **extra,  # a sweep element: its sweep, index and swept values
    }
    path = Path(job.work.run_dir) / MANIFEST
    write(path, record)
    return Manifest(record, path)


def update_manifest(run_dir: Path, **fields: Any) -> Manifest:
    """Fields set (a key's whole value replaced) in a run's manifest; its schema version kept."""
    record = {**Manifest.read(run_dir).as_dict(), **fields}
    path = Path(run_dir) / MANIFEST
    write(path, record)
    return Manifest(record, path)


def write(path: Path, record: Dict[str, Any]) -> None:
    """Whole or not at all: a status reading it meanwhile (the search driver's, a user's) sees the old or the new."""
    temporary = path.with_name(f".{MANIFEST}.{os.getpid()}.{threading.get_ident()}")
    temporary.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(temporary, path)

