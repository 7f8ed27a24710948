"""What an image holds, known without starting a container: read from the labels its definition gave it.

`bin/run-cluster notebook` asks before anything is queued whether the image has JupyterLab. The cpu and cuda12.8
definitions label the version they lock (org.cluster-train.jupyterlab; tests/host/test_containers.py holds the label
to the lock, and the image's %test imports it); an image built before that label, the cuda11.6 image (Python 3.8,
no JupyterLab in its lock) and one derived from either carry none. `apptainer inspect` reads the labels from the
SIF's header in milliseconds (a derived image keeps its parent's: containers/derived.def.j2).
"""
from pathlib import Path
from typing import Optional

from cluster_train.shared.errors import UserError
from cluster_train.host.clusters.flavors import make_image
from cluster_train.host.images import sif, store

JUPYTERLAB_LABEL = "org.cluster-train.jupyterlab"
NOTEBOOK_FLAVORS = ("cpu", "cuda12.8")  # the flavors whose requirements (containers/requirements/*.in) have it


def jupyterlab_missing(image: store.ImageRecord) -> Optional[UserError]:
    """None when the image has JupyterLab; else the one-line error naming its flavor and the fix."""
    shown = f"the {image.flavor} image sha256:{image.sha256[:12]}"
    try:
        labels = sif.sif_labels(Path(image.path), shown)
    except UserError as err:
        return err
    if labels.get(JUPYTERLAB_LABEL):
        return None
    base = store.base_flavor(image.flavor)
    if base in NOTEBOOK_FLAVORS:
        again = f", then derive {image.flavor} from it again" if image.flavor != base else ""
        fix = f"rebuild the {base} image with `{make_image(base)}` (its lock has JupyterLab now){again}"
    else:
        fix = (f"the {base} flavor has none: use a {' or '.join(NOTEBOOK_FLAVORS)} image, or add jupyterlab to "
               f"containers/requirements/{base}.in, then `make lock` and `{make_image(base)}`")
    return UserError(f"JupyterLab is not in {shown} (built {image.built_at[:10]}): {fix}")
