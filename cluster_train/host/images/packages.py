"""What an image holds, asked without starting it (contract C2 of issue 44; the image engineer owns the full version):
JupyterLab, which `run-cluster notebook` needs, is in an image when its flavor's lock names it."""
from typing import Optional

from cluster_train.shared.errors import UserError
from cluster_train.host import project
from cluster_train.host.images import store


def jupyterlab_missing(image: store.ImageRecord) -> Optional[UserError]:
    """None when the image has JupyterLab; else the one-line error naming its flavor and the fix."""
    base = image.flavor.partition("+")[0]
    lock = project.ROOT / "containers" / f"{base}.lock"
    if lock.is_file() and any(line.startswith("jupyterlab==") for line in lock.read_text().splitlines()):
        return None
    return UserError(f"JupyterLab is not in the {image.flavor} image; use a cpu or cuda12.8 image, or add jupyterlab "
                     f"to containers/requirements/{base}.in, then make lock and make image FLAVOR={base}")
