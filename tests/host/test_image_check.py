"""The job's image check (schedulers/templates/_preamble.sh.j2, ct_image_ok): the first job hashes the image and
leaves <image>.verified; later jobs trust a stamp whose stat still matches and hash nothing; a file changed in place
(same size), a replaced file or a stamp of another digest is hashed again and refused when it differs."""
import hashlib
import os
import subprocess
import time
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parents[2] / "cluster_train/host/schedulers/templates/_preamble.sh.j2"


def image_check() -> str:
    text = TEMPLATE.read_text()
    start = text.index("ct_image_ok() {")
    return text[start:text.index("\n}\n", start) + 3]


def check(image: Path, digest: str, path: str) -> int:
    """ct_image_ok's status for `image` against `digest`, with `path` as PATH (a PATH without sha256sum proves that
    nothing was hashed)."""
    env = {"PATH": path, "IMAGE": str(image), "IMAGE_SHA256": digest}
    return subprocess.run(["/bin/bash", "-c", image_check() + "ct_image_ok"], env=env).returncode


def test_the_image_is_hashed_once_and_hashed_again_whenever_it_may_have_changed(tmp_path):
    image = tmp_path / "cpu.sif"
    image.write_bytes(b"an image" * 4096)
    digest = hashlib.sha256(image.read_bytes()).hexdigest()
    no_hashing = tmp_path / "bin"  # the commands the check needs, but no sha256sum
    no_hashing.mkdir()
    for tool in ("stat", "cat", "mv", "rm"):
        os.symlink(subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip(), no_hashing / tool)
    everything = os.environ["PATH"]

    assert check(image, digest, str(no_hashing)) != 0  # no stamp yet: it must hash, and cannot
    assert check(image, digest, everything) == 0 and (tmp_path / "cpu.sif.verified").is_file()
    assert check(image, digest, str(no_hashing)) == 0  # the stamp matches: nothing hashed
    assert check(image, "0" * 64, everything) != 0  # another recorded digest: hashed, and refused

    time.sleep(0.01)
    with image.open("r+b") as f:  # changed in place, same size
        f.seek(100)
        f.write(b"tampered")
    assert check(image, digest, str(no_hashing)) != 0 and check(image, digest, everything) != 0

    image.write_bytes(b"an image" * 4096)  # restored: hashed again, and the stamp renewed
    assert check(image, digest, everything) == 0 and check(image, digest, str(no_hashing)) == 0
    replaced = tmp_path / "other.sif"
    replaced.write_bytes(image.read_bytes())
    os.replace(replaced, image)  # the same bytes in another file: a new inode, hashed again
    assert check(image, digest, str(no_hashing)) != 0 and check(image, digest, everything) == 0

    (tmp_path / "ro").mkdir()
    unwritable = tmp_path / "ro" / "cpu.sif"
    unwritable.write_bytes(image.read_bytes())
    (tmp_path / "ro").chmod(0o555)  # a store this user cannot write (root writes anyway: then a stamp appears)
    assert check(unwritable, digest, everything) == 0
    assert not list((tmp_path / "ro").glob("*.verified.*"))  # no half-written stamp left behind
