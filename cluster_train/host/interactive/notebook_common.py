"""What both sides of `run-cluster notebook` say and check: the login node's (notebook.py) and, over SSH, the
laptop's (laptop.py), which reads the login node's server line."""
from cluster_train.host.clusters.flavors import known_flavor
from cluster_train.host.jobs.build import Site

SERVER = "[cluster-train] notebook server: "  # the login node's line for a laptop (laptop.py): JSON follows


def opened(host: str, port: int, token: str) -> None:
    say(f"[cluster-train] notebook on {host}: http://127.0.0.1:{port}/lab?token={token}")
    say("[cluster-train] notebook: Ctrl-C here stops it and releases the allocation")


def say(line: str) -> None:
    print(line, flush=True)


def flavor_of(site: Site, args) -> str:
    """--flavor, refused where containers/ has no such flavor, else the partition's."""
    return known_flavor(args.flavor or site.cluster.partition(site.cluster.profile(args.profile).partition).image)


def refuse_without_jupyterlab(image) -> None:
    """An image without JupyterLab (a store.ImageRecord), refused before anything is queued: its flavor and the fix."""
    from cluster_train.host.images.packages import jupyterlab_missing

    if image is None:
        return  # none built: the job's own check refuses it with the build that makes it
    missing = jupyterlab_missing(image)
    if missing:
        raise missing
