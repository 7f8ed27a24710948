"""Which image store a command uses: $CT_IMAGES, else the user's settings `images:`, else the cluster file's
`images:` (a lab's shared store), else images/ of this checkout (train/host/project.py decides the order)."""
from pathlib import Path
from typing import Any, Dict

from train.host import clusters, project, settings


def cluster_store(cluster: clusters.Cluster, user: Dict[str, Any]) -> Path:
    return project.images_dir(user.get("images"), cluster.images)


def store_of(cluster_file: str) -> Path:
    """The image store of a recorded run's cluster, as its user sees it now (--rerun, resume)."""
    cluster = clusters.load(clusters.find(cluster_file, project.CLUSTERS))
    return cluster_store(cluster, settings.load(cluster.name))
