"""What the user chose for a recorded run, kept when it is rerun or resumed."""
from typing import List

from cluster_train.shared import config as cfg
from cluster_train.host.clusters import Profile
from cluster_train.host.jobs.resolve import profile_values


def kept_choices(manifest: dict, profile: Profile, overrides: List[str]) -> List[str]:
    """The run's earlier --set values (its submission's, its resumes') of keys the profile decides and `overrides`
    does not set. A rerun or resume reads the run's config.yaml as its experiment, under which the profile's values
    would go again: these win over them again, as they did when typed (a run set to fsdp resumes and reruns as fsdp,
    not as the profile's ddp)."""
    earlier = [*manifest.get("overrides", []), *(o for r in manifest.get("resumes", []) for o in r["overrides"])]
    latest = {key_of(typed): typed for typed in earlier}
    decided, now_set = profile_values(profile), cfg.parse_settings(overrides)
    return [typed for key, typed in latest.items() if key in decided and key not in now_set]


def key_of(typed: str) -> str:
    return typed.partition("=")[0].strip()
