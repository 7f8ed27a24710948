"""Which image store a command uses: $CT_IMAGES, else the user's settings `images:`, else the cluster file's
`images:` (a lab's shared store), else images/ of this checkout (cluster_train/host/project.py decides the order); and
`run_image`, the verified image a recorded run used, from the store of its cluster (--rerun, resume)."""
from pathlib import Path
from typing import Any, Dict, List, Optional

from cluster_train.host import clusters, project, settings
from cluster_train.host.images import oci, store


def cluster_store(cluster: clusters.Cluster, user: Dict[str, Any]) -> Path:
    return project.images_dir(user.get("images"), cluster.images)


def store_of(cluster_file: str) -> Path:
    """The image store of a recorded run's cluster, as its user sees it now (--rerun, resume)."""
    cluster = clusters.load(clusters.find(cluster_file, project.CLUSTERS))
    return cluster_store(cluster, settings.load(cluster.name))


# The fix for a store that cannot be written: the data store lives inside the image store, so it moves with it
STORE_FIX = "point $CT_IMAGES (or images: in your settings, or the cluster file's) at a directory you can write"


def command_store(cluster: Optional[str]) -> Path:
    """The store an `images` or `data` command works on: that cluster's (--cluster), else this machine's own."""
    return store_of(cluster) if cluster else project.images_dir(settings.load("").get("images"))


def run_image(manifest, what: str, root: Optional[Path] = None,
              warnings: Optional[List[str]] = None) -> store.ImageRecord:
    """The image a recorded run used, verified, from this machine's store for its cluster (`root`, when the caller
    has it already); pulled first from the registry the run recorded where the store lacks it (--rerun and resume on
    another machine), which a line in `warnings` says (the submission's: the command line prints them, the API
    returns them; the library never prints). A derived image comes with its parent, verified too: a rerun pins
    both."""
    root = root if root is not None else store_of(manifest.cluster_file)
    sha256, source = manifest.image_sha256, manifest.image_registry
    if store.find(sha256, root) is None and isinstance(source, dict) and source.get("reference"):
        if warnings is not None:
            warnings.append(f"warning: {what} (sha256 {sha256}) was not in {root}: pulled {source['reference']}")
        oci.pull_into_store(source["reference"], bool(source.get("plain_http")), sha256, root)
    record = store.verified(sha256, root, what)
    parent = manifest.image_parent_sha256 or record.parent_sha256
    if parent:
        store.verified(parent, root, f"the parent image of {what} ({record.flavor} was built on it)")
    return record
