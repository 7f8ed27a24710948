"""The image definitions and lock files, checked without building anything (no Apptainer, no network).

- the cpu and cuda12.8 images bootstrap Debian from the mirror build argument; cuda11.6's docker base is pinned by
  digest; the definition files parse with spython;
- each CUDA flavor's lock carries the torch build of that CUDA version (cuda12.8: PyPI's torch with the 12.8 runtime
  wheels; cuda11.6: the +cu116 build from PyTorch's index), and %test checks kernels for every GPU of the flavor;
- every requirement in every lock is hash-pinned, and the locks agree with their top-level pins and the labels;
- no file names a Debian mirror (the CPU image bootstraps from `{{ MIRROR }}`, filled in by `make image`);
- all three flavors install through the same containers/install.sh with the same %files layout.
"""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTAINERS = ROOT / "containers"
REQS = CONTAINERS / "requirements"
FLAVORS = ["cpu", "cuda12.8", "cuda11.6"]
CUDA_FLAVORS = ["cuda12.8", "cuda11.6"]
DEBOOTSTRAP_FLAVORS = ["cpu", "cuda12.8"]  # built here from Debian's mirror and PyPI
DOCKER_FLAVORS = ["cuda11.6"]  # nvidia/cuda base and PyTorch's index: built where Docker Hub is reachable
SECTION = re.compile(r"^%(\w+)\s*$")


def parse_def(path: Path):
    """(header {key: value}, {section: [lines]}) of an Apptainer definition file, comments dropped."""
    header, sections, current = {}, {}, None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = SECTION.match(line)
        if match:
            current = sections.setdefault(match.group(1), [])
        elif current is None:
            key, _, value = line.partition(":")
            header[key.strip()] = value.strip()
        else:
            current.append(line)
    return header, sections


def labels(sections):
    return dict(line.split(None, 1) for line in sections["labels"])


def parse_lock(path: Path):
    """(option lines, [(name, version, [hashes])]) of a pip requirements file written by `make lock`."""
    options, entries, logical = [], [], []
    buffer = ""
    for raw in path.read_text().splitlines():
        line = raw.split(" #")[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        logical.append((buffer + line).strip())
        buffer = ""
    assert not buffer, f"{path.name}: ends inside a continued line"
    for line in logical:
        if line.startswith("--"):
            options.append(line)
            continue
        spec, *hash_opts = line.split(" --hash=")
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)(\s*;.*)?", spec.strip())
        assert match, f"{path.name}: not an exact pin: {line[:80]}"
        entries.append((canonical(match.group(1)), match.group(2), [h.strip() for h in hash_opts]))
    return options, entries


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path):
    """{name: version} of the exact pins in a .in / constraints file."""
    out = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#")[0].strip()
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)(\s*;.*)?", line)
        if match:
            out[canonical(match.group(1))] = match.group(2)
    return out


def lock_versions(flavor):
    return {name: version for name, version, _ in parse_lock(CONTAINERS / f"{flavor}.lock")[1]}


# ---------------------------------------------------------------------------------------------------------------
# Base images


@pytest.mark.parametrize("flavor", DOCKER_FLAVORS)
def test_docker_definition_parses_with_spython_and_pins_base_by_digest(flavor):
    from spython.main.parse.parsers import SingularityParser

    recipe = SingularityParser(str(CONTAINERS / f"{flavor}.def")).recipe["spython-base"]
    image, _, digest = recipe.fromHeader.partition("@")
    assert image.startswith(f"nvidia/cuda:{flavor.replace('cuda', '')}."), recipe.fromHeader
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), (
        f"{flavor}.def must pin its base image by digest (From: IMAGE:TAG@sha256:...), got {recipe.fromHeader!r}")
    assert recipe.cmd == 'exec python -m train "$@"'  # spython: %runscript


@pytest.mark.parametrize("flavor", DEBOOTSTRAP_FLAVORS)
def test_definition_bootstraps_debian_from_the_mirror_build_argument(flavor):
    header, sections = parse_def(CONTAINERS / f"{flavor}.def")
    assert header["Bootstrap"] == "debootstrap"
    assert header["OSVersion"] == "trixie"
    assert header["MirrorURL"] == "{{ MIRROR }}"
    include = header["Include"].split()
    wanted = {"cpu": ["python3-torch", "python3-torchvision", "python3-pip"],
              "cuda12.8": ["libibverbs1", "ibverbs-providers", "librdmacm1t64", "g++", "python3-dev"]}[flavor]
    for package in wanted + ["python3-venv", "ca-certificates"]:
        assert package in include
    env = "\n".join(sections["environment"])
    wanted = {"cpu": ["USE_LIBUV=0", "DS_ACCELERATOR=cpu"], "cuda12.8": ["CUDA_MODULE_LOADING=LAZY"]}[flavor]
    for setting in wanted + ["PYTHONNOUSERSITE=1", "TORCH_EXTENSIONS_DIR=", "/opt/venv/bin"]:
        assert setting in env


def test_no_file_names_a_mirror_host():
    """Only `{{ MIRROR }}`: the host comes from the building machine's apt configuration at build time."""
    mine = [*CONTAINERS.glob("*.def"), *CONTAINERS.glob("*.lock"), CONTAINERS / "images.mk",
            CONTAINERS / "install.sh", *REQS.iterdir()]
    for path in CONTAINERS.glob("*.def"):
        header, _ = parse_def(path)
        assert "MirrorURL" not in header or header["MirrorURL"] == "{{ MIRROR }}"
        text = path.read_text()
        assert not re.search(r"https?://(?!download\.pytorch\.org)", text), f"{path.name} names a host"
    done = subprocess.run(["bash", str(CONTAINERS / "apt-mirror.sh")], capture_output=True, text=True)
    if done.returncode == 0 and "://" in done.stdout:
        host = done.stdout.strip().split("://", 1)[1].split("/")[0]
        for path in mine:
            assert host not in path.read_text(), f"{path.relative_to(ROOT)} names this machine's mirror {host}"


# ---------------------------------------------------------------------------------------------------------------
# One install step, one layout


def test_all_flavors_use_the_same_install_step_and_layout():
    for flavor in FLAVORS:
        _, sections = parse_def(CONTAINERS / f"{flavor}.def")
        post = sections["post"]
        assert f"sh /opt/cluster-train/containers/install.sh {flavor}" in post, f"{flavor}.def %post"
        assert sum("install.sh" in line for line in post) == 1
        # nothing is pip-installed outside the shared step
        assert not any(re.search(r"\bpip3? install\b", line) for line in post), f"{flavor}.def installs on its own"
        assert sections["files"] == [
            "pyproject.toml /opt/cluster-train/pyproject.toml",
            "cluster_train /opt/cluster-train/cluster_train",
            "train /opt/cluster-train/train",
            "containers/install.sh /opt/cluster-train/containers/install.sh",
            f"containers/{flavor}.lock /opt/cluster-train/containers/{flavor}.lock",
        ]
        assert sections["runscript"] == ['exec python -m train "$@"']
        assert any("python -m train selftest" in line for line in sections["test"])
        assert labels(sections)["org.cluster-train.flavor"] == flavor
        assert labels(sections)["org.cluster-train.git-commit"] == "{{ GIT_COMMIT }}"
        assert "GIT_COMMIT=unknown" in sections["arguments"]


def test_install_script_is_valid_sh_and_knows_every_flavor():
    subprocess.run(["sh", "-n", str(CONTAINERS / "install.sh")], check=True)
    text = (CONTAINERS / "install.sh").read_text()
    for needle in ["--require-hashes", "--no-deps", "--system-site-packages", "compileall", "pip check",
                   "/mnt/host-certs/ca-certificates.crt"]:
        assert needle in text


# ---------------------------------------------------------------------------------------------------------------
# Locks


@pytest.mark.parametrize("flavor", FLAVORS)
def test_every_locked_requirement_is_hash_pinned(flavor):
    options, entries = parse_lock(CONTAINERS / f"{flavor}.lock")
    assert len(entries) > 20
    for name, version, hashes in entries:
        assert hashes, f"{flavor}.lock: {name}=={version} has no --hash"
        assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), f"{flavor}.lock: {name}"
    # the only option a lock may carry: PyTorch's own index, for the +cu116 builds of torch/torchvision
    allowed = {"--extra-index-url https://download.pytorch.org/whl/cu116"} if flavor in DOCKER_FLAVORS else set()
    assert set(options) <= allowed, options
    names = [name for name, _, _ in entries]
    assert len(names) == len(set(names)), f"{flavor}.lock pins a package twice"
    assert {"pip", "setuptools", "pytorch-lightning", "deepspeed", "tensorboard", "fire", "spython", "pyyaml",
            "jinja2"} <= set(names)


def test_cuda11_6_lock_has_the_cu116_torch_build_from_pytorchs_index():
    header, sections = parse_def(CONTAINERS / "cuda11.6.def")
    assert header["From"].startswith("nvidia/cuda:11.6.")
    assert labels(sections)["org.cluster-train.cuda"] == "11.6"
    options, entries = parse_lock(CONTAINERS / "cuda11.6.lock")
    versions = {name: version for name, version, _ in entries}
    assert versions["torch"].endswith("+cu116") and versions["torchvision"].endswith("+cu116"), versions["torch"]
    assert "--extra-index-url https://download.pytorch.org/whl/cu116" in options
    assert labels(sections)["org.cluster-train.torch"] == versions["torch"]
    assert not [n for n in versions if n.startswith("nvidia-") and n.endswith("cu12")]


def test_cuda12_8_lock_carries_cuda_12_8_as_pypi_wheels():
    """PyPI's torch 2.8 is the CUDA 12.8 build: its METADATA pins the 12.8 runtime wheels, which the lock holds."""
    versions = lock_versions("cuda12.8")
    _, sections = parse_def(CONTAINERS / "cuda12.8.def")
    assert labels(sections)["org.cluster-train.cuda"] == "12.8"
    assert "+" not in versions["torch"] and versions["torch"] == labels(sections)["org.cluster-train.torch"]
    for wheel in ("nvidia-cuda-runtime-cu12", "nvidia-cuda-nvrtc-cu12", "nvidia-cublas-cu12", "nvidia-nvjitlink-cu12"):
        assert versions[wheel].startswith("12.8."), f"{wheel} {versions[wheel]}: not CUDA 12.8"
    assert {"nvidia-cudnn-cu12", "nvidia-nccl-cu12", "triton"} <= set(versions)
    assert not [n for n in versions if n.startswith("nvidia-") and n.endswith("cu11")]


def test_image_test_checks_kernels_for_every_gpu_the_flavor_drives(flavor="cuda12.8"):
    """%test runs `python -m train imagecheck CUDA CAPABILITY...` with every GPU containers/flavors.yaml maps here
    (the cuda11.6 image, built elsewhere, checks torch.version.cuda only)."""
    import yaml

    table = yaml.safe_load((CONTAINERS / "flavors.yaml").read_text())
    spec = table["flavors"][flavor]
    gpus = {float(g["capability"]) for g in table["gpus"].values() if g["capability"] != "none"
            and spec["min_capability"] <= g["capability"] <= spec["max_capability"]}
    _, sections = parse_def(CONTAINERS / f"{flavor}.def")
    checks = [line.split()[4:] for line in sections["test"] if line.startswith("python -m train imagecheck")]
    assert checks and checks[0][0] == spec["cuda"], checks
    assert {float(c) for c in checks[0][1:]} == gpus


def test_cpu_lock_leaves_torch_to_debian():
    versions = lock_versions("cpu")
    for name in ["torch", "torchvision", "numpy", "triton"]:
        assert name not in versions, f"{name} must come from Debian, not cpu.lock"
    assert not [n for n in versions if n.startswith("nvidia-")]
    # Debian's torch 2.6 metadata pins sympy==1.13.1 (trixie ships 1.13.3): the venv must satisfy `pip check`
    assert versions["sympy"] == "1.13.1"


@pytest.mark.parametrize("flavor", FLAVORS)
def test_lock_agrees_with_top_level_pins_and_labels(flavor):
    versions = lock_versions(flavor)
    for name, version in pins(REQS / f"{flavor}.in").items():
        if name in ("torch", "torchvision") and flavor != "cpu":
            assert versions[name].split("+")[0] == version, name  # replaced by the +cuXXX build
        else:
            assert versions.get(name) == version, f"{flavor}.lock: {name} != {version} of {flavor}.in (make lock)"
    _, sections = parse_def(CONTAINERS / f"{flavor}.def")
    label = labels(sections)
    provided = pins(REQS / "cpu.debian.txt") if flavor == "cpu" else versions
    assert label["org.cluster-train.torch"] == provided["torch"]
    assert label["org.cluster-train.torchvision"] == provided["torchvision"]
    assert label["org.cluster-train.pytorch-lightning"] == versions["pytorch-lightning"]
    assert label["org.cluster-train.deepspeed"] == versions["deepspeed"]
    # how the host knows an image has JupyterLab without starting it (cluster_train/host/images/packages.py)
    assert label.get("org.cluster-train.jupyterlab") == versions.get("jupyterlab"), "jupyterlab label != lock"


def test_make_lock_recipe_uses_uv_with_hashes():
    done = subprocess.run(["make", "-n", "-f", str(CONTAINERS / "images.mk"), "lock"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for flavor in FLAVORS:
        assert f"containers/requirements/{flavor}.in" in done.stdout
    assert done.stdout.count("pip compile --quiet --no-header --generate-hashes") == 3
