"""What a rerun or resume keeps of the user's choices: the values they set of keys the profile decides. config.yaml
holds every value the run had, but the profile's values go over it again when it is built anew; these win over
them again, as they did when set (a run set to fsdp stays fsdp under a profile of ddp)."""
from typing import Any, Dict

from cluster_train.shared import config as cfg
from cluster_train.host.clusters import Profile
from cluster_train.host.jobs.resolve import profile_values
from cluster_train.host.runs.manifest import Manifest


def kept_settings(manifest: Manifest, profile: Profile) -> Dict[str, Any]:
    decided = profile_values(profile)
    return {key: value for key, value in user_settings(manifest).items() if key in decided}


def user_settings(manifest: Manifest) -> Dict[str, Any]:
    """Every value the user set, typed back from the manifest's text form: the submission's overrides, then each
    resume's (the latest wins)."""
    settings: Dict[str, Any] = {}
    for lines in (manifest.overrides, *(r.get("overrides") or [] for r in manifest.resumes)):
        settings.update(cfg.parse_settings(list(lines)))
    return settings
