#!/bin/sh
# The ONE install step of every image flavor (the %post of containers/cpu.def, cuda12.8.def and cuda11.6.def), so
# the three cannot drift:
#   1. a venv at /opt/venv (cpu: --system-site-packages, where torch, torchvision and numpy are Debian's CPU builds)
#   2. pip and setuptools from the flavor's lock (Ubuntu 20.04's own pip 20.0 cannot even read manylinux_2_28 tags)
#   3. every package of containers/FLAVOR.lock: pip --require-hashes --no-deps, nothing resolved at build time
#      (the CUDA locks carry PyTorch's index as --extra-index-url for their +cuXXX torch/torchvision wheels)
#   4. the cluster_train package itself from /opt/cluster-train (no network)
#   5. bytecode compiled now (PYTHONDONTWRITEBYTECODE=1 is common on clusters, and the image is read-only anyway)
#   6. pip check, and the versions printed into the build log and /opt/cluster-train/versions.txt
#   7. the top-level module names the image can import, into its label org.cluster-train.modules (the host checks a
#      command's imports against it before queueing: cluster_train/host/jobs/imports_check.py)
#
# Usage (inside the image build; %files put the sources under /opt/cluster-train):
#   sh /opt/cluster-train/containers/install.sh cpu|cuda12.8|cuda11.6
#
# Behind a TLS-intercepting proxy (like the build machines of this project) `make image` binds the host's CA
# directory read-only on /mnt/host-certs; pip then trusts it. Real clusters need nothing of the kind.
set -eu

FLAVOR=${1:?usage: install.sh cpu|cuda12.8|cuda11.6}
SRC=${CT_SRC:-/opt/cluster-train}
VENV=${CT_VENV:-/opt/venv}
PYTHON=${CT_PYTHON:-python3}
LOCK="$SRC/containers/$FLAVOR.lock"
[ -f "$LOCK" ] || { echo "install.sh: no lock file $LOCK for flavor '$FLAVOR'" >&2; exit 1; }

# pip sees only what is set here: no config files or find-links of the build host, no cache in the image.
unset PIP_FIND_LINKS PIP_EXTRA_INDEX_URL PIP_REQUIRE_VIRTUALENV PIP_USER PIP_TARGET PIP_PREFIX PIP_CERT PIP_NO_INDEX
export PIP_CONFIG_FILE=/dev/null PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
export PIP_ROOT_USER_ACTION=ignore PYTHONNOUSERSITE=1
if [ -f /mnt/host-certs/ca-certificates.crt ]; then
  export PIP_CERT=/mnt/host-certs/ca-certificates.crt
fi
# DeepSpeed is an sdist: build it without pre-compiled ops (they JIT-compile on first use, into
# TORCH_EXTENSIONS_DIR); on the CPU image it must not go looking for CUDA.
export DS_BUILD_OPS=0
case "$FLAVOR" in
  cpu) venv_opts=--system-site-packages; export DS_ACCELERATOR=cpu ;;
  cuda*) venv_opts= ;;
  *) echo "install.sh: unknown flavor '$FLAVOR' (cpu, cuda12.8, cuda11.6)" >&2; exit 1 ;;
esac

echo "install.sh: $FLAVOR: $($PYTHON --version 2>&1), venv $VENV ${venv_opts:-(isolated)}, lock $LOCK"
$PYTHON -m venv $venv_opts "$VENV"
pip="$VENV/bin/python -m pip"

# 2. pip and setuptools first, from the lock, hash-checked (their entries are copied out of the lock as they are).
bootstrap=$(mktemp)
awk '/^(pip|setuptools)==/ { keep = 1 } keep { print } keep && !/\\$/ { keep = 0 }' "$LOCK" > "$bootstrap"
$pip install -q --require-hashes --no-deps -r "$bootstrap"
rm -f "$bootstrap"

# 3. the lock. --ignore-installed: the venv holds exactly the locked, hash-checked files even where the system
# site (cpu) has the same package; --no-build-isolation: DeepSpeed's sdist builds with the locked setuptools.
$pip install -q --require-hashes --no-deps --no-build-isolation --ignore-installed -r "$LOCK"

# 4. the cluster_train package; drop bytecode and build debris copied in with the sources first.
find "$SRC" -name __pycache__ -type d -prune -exec rm -rf {} +
$pip install -q --no-deps --no-build-isolation --no-index "$SRC"
# 4b. the shim of `python -m train`, into the image only: a login node never gets a top-level train
cp -R "$SRC/train" "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/train"
rm -rf "$SRC/build" "$SRC"/*.egg-info

# 5. bytecode
$VENV/bin/python -m compileall -q -j 0 "$VENV/lib" > /dev/null

# 6. checks and versions
$pip check
$VENV/bin/python - "$FLAVOR" "$SRC/versions.txt" <<'EOF'
import importlib.metadata as md
import platform
import sys

lines = [f"flavor {sys.argv[1]}", f"python {platform.python_version()}"]
for dist in ("torch", "torchvision", "numpy", "pytorch-lightning", "lightning", "torchmetrics", "deepspeed", "tensorboard",
             "fire", "spython", "pyyaml", "jinja2", "cluster-train"):
    try:
        lines.append(f"{dist} {md.version(dist)}")
    except md.PackageNotFoundError:
        sys.exit(f"install.sh: {dist} is not installed")
print("\n".join(lines))
with open(sys.argv[2], "w") as f:
    f.write("\n".join(lines) + "\n")
EOF

# 7. the module list, as a label (%post's $APPTAINER_LABELS; a label the definition's %labels names would win)
if [ -n "${APPTAINER_LABELS:-}" ]; then
  modules=$("$VENV/bin/python" -m cluster_train.image.modules)
  echo "install.sh: $(echo "$modules" | wc -w) importable top-level modules recorded (org.cluster-train.modules)"
  echo "org.cluster-train.modules $modules" >> "$APPTAINER_LABELS"
fi
