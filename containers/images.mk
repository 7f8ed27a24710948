# Image rules, included by the top-level Makefile.
#
#   make image [FLAVOR=cpu|cuda12.8|cuda11.6]   build images/$(FLAVOR).sif and record its sha256 (images/index.json,
#                                               images/store/<sha256>.sif)
#   make lock [UPGRADE=1]                       regenerate containers/*.lock from containers/requirements/*.in
#
# Builds are content-addressed. The key of a build is the sha256 of every input that goes into the image: the
# definition file, the lock file, containers/install.sh, pyproject.toml and every file of the cluster_train package that
# runs in the image (`git ls-files` plus untracked, not ignored files; not cluster_train/host/).
# After a build, images/$(FLAVOR).inputs holds that key (one `sha256  path` line per input, taken just before the build
# started), rewritten only when its content changes.
# `make image` rebuilds exactly when the current key differs from the stamp (or there is no image): a second
# `make image` with nothing changed runs nothing and `make -q image` answers 0; touching a file without changing
# it rebuilds nothing; `make -n image` shows whether apptainer would run.
# The key is computed while the Makefile is read (cluster_train.host.images.content_key, stdlib only, ~0.1 s).
# A build runs the image's %test and fails with it. Every flavor but cpu (which make test builds anyway) then also
# keeps its key in containers/$(FLAVOR).tested, to be committed: CI builds the CUDA image only when its inputs differ
# from that key (tests/image/test_cuda_image.py), `make test-all` always.

FLAVOR ?= cpu
IMAGE_FLAVORS := $(patsubst containers/%.def,%,$(wildcard containers/*.def))  # containers/flavors.yaml describes each
# $CT_IMAGES: a store shared with other clones and users (see bin/run-cluster images); no comment after a value here,
# make would keep the spaces before it
IMAGES_DIR ?= $(or $(CT_IMAGES),images)
HOST_PYTHON ?= python3
APPTAINER ?= apptainer
IMAGE_DEF = containers/$(FLAVOR).def
IMAGE_LOCK = containers/$(FLAVOR).lock
IMAGE_SIF = $(IMAGES_DIR)/$(FLAVOR).sif
IMAGE_STAMP = $(IMAGES_DIR)/$(FLAVOR).inputs
# apptainer build's whole output, kept; the terminal (or CI log) shows its current step, and the log's end if it fails
# (cluster_train/host/images/build_log.py)
IMAGE_BUILD_LOG = $(IMAGES_DIR)/$(FLAVOR).apptainer.log
# "fresh" when the stamp holds the current key and the store an image built from it; anything else (stale, no stamp,
# the store copy gone, an error) rebuilds
IMAGE_STATUS := $(if $(wildcard $(IMAGE_DEF)),$(shell $(HOST_PYTHON) -m cluster_train.host.images.content_key inputs \
	--def $(IMAGE_DEF) --lock $(IMAGE_LOCK) --stamp $(IMAGE_STAMP) --flavor $(FLAVOR) --root $(IMAGES_DIR) 2>/dev/null))
# pip inside the build goes through this machine's TLS-intercepting proxy: let it see the host's CA bundle, read-only
# (containers/install.sh uses it only if it is there; clusters do not need it). `--mount` is `--bind
# /etc/ssl/certs:/mnt/host-certs:ro` without apptainer build's spurious "destination is already in the mount point
# list" warning.
IMAGE_BUILD_BINDS ?= $(if $(wildcard /etc/ssl/certs/ca-certificates.crt),\
	--mount type=bind$(_ct_comma)source=/etc/ssl/certs$(_ct_comma)destination=/mnt/host-certs$(_ct_comma)ro)
_ct_comma := ,
# The CPU image (CI, laptops, `make demo`) is squashed with zstd at a low level instead of gzip -9: every `apptainer
# exec` mounts the SIF afresh and decompresses what it imports again (import torch: 1.5 s of system time with gzip,
# 0.7 s with zstd, measured here), and the whole build took 145 s instead of 243 s (646 MiB instead of 627). The
# cluster images keep Apptainer's default, gzip, which every kernel and squashfuse of a cluster mounts.
IMAGE_SQUASHFS_cpu := --mksquashfs-args="-comp zstd -Xcompression-level 3"

.PHONY: image lock _image_rebuild
image: $(IMAGE_SIF)

_image_rebuild: ;

# The build goes to a temporary file renamed into place at the end: an interrupted build never leaves half an image.
$(IMAGE_SIF): $(if $(filter fresh,$(IMAGE_STATUS)),,_image_rebuild)
	@case " $(IMAGE_FLAVORS) " in *" $(FLAVOR) "*) ;; \
	  *) echo "make image: unknown FLAVOR=$(FLAVOR) (one of: $(IMAGE_FLAVORS))" >&2; exit 2;; esac
	@command -v $(APPTAINER) >/dev/null || \
	  { echo "make image: $(APPTAINER) not found; install it first (make apptainer)" >&2; exit 1; }
	@mkdir -p $(IMAGES_DIR)
	@set -e; \
	tmp="$(IMAGES_DIR)/.$(FLAVOR).sif.$$$$.tmp"; keys="$(IMAGES_DIR)/.$(FLAVOR).inputs.$$$$.tmp"; \
	trap 'rm -f "$$tmp" "$$keys"' EXIT INT TERM; \
	$(HOST_PYTHON) -m cluster_train.host.images.content_key inputs --def $(IMAGE_DEF) --lock $(IMAGE_LOCK) \
	  --stamp $(IMAGE_STAMP) --snapshot "$$keys"; \
	commit=$$(git rev-parse HEAD 2>/dev/null || echo unknown); \
	if [ "$$commit" != unknown ] && [ -n "$$(git status --porcelain -- $(IMAGE_DEF) $(IMAGE_LOCK) \
	    containers/install.sh pyproject.toml cluster_train train 2>/dev/null)" ]; then commit="$$commit-dirty"; fi; \
	set -- --build-arg "GIT_COMMIT=$$commit"; \
	if grep -q '{{ *MIRROR *}}' $(IMAGE_DEF); then \
	  set -- "$$@" --build-arg "MIRROR=$$(bash containers/apt-mirror.sh)"; fi; \
	if [ "$$(id -u)" = 0 ]; then export APPTAINER_DROP_CAPS=CAP_SYS_RESOURCE; fi; \
	echo "make image: building $@ from $(IMAGE_DEF) (git $$commit)"; \
	start=$$(date +%s); \
	$(HOST_PYTHON) -m cluster_train.host.images.build_log --log $(IMAGE_BUILD_LOG) --label "building $@" -- \
	  $(APPTAINER) build --force $(IMAGE_SQUASHFS_$(FLAVOR)) $(IMAGE_BUILD_BINDS) "$$@" "$$tmp" $(IMAGE_DEF); \
	mv -f "$$tmp" $@; \
	echo "make image: built $@ in $$(( $$(date +%s) - start )) s"; \
	$(HOST_PYTHON) -m cluster_train.host.images.content_key record --flavor $(FLAVOR) --sif $@ --def $(IMAGE_DEF) \
	  --lock $(IMAGE_LOCK) --root $(IMAGES_DIR) --git-commit "$$commit" --inputs "$$keys" --stamp $(IMAGE_STAMP); \
	$(if $(filter-out cpu,$(FLAVOR)),cmp -s "$$keys" containers/$(FLAVOR).tested || cp "$$keys" containers/$(FLAVOR).tested)

# ---------------------------------------------------------------------------------------------------------------
# Lock files: containers/requirements/FLAVOR.in -> containers/FLAVOR.lock, the full closure with sha256 hashes.
# The current lock is the starting point (uv keeps its versions unless they must move); UPGRADE=1 re-resolves all.
# Each flavor resolves for its image's own Python and glibc:
#   cpu       Debian trixie, Python 3.13. torch/torchvision/numpy are Debian's (cpu.debian.txt constrains them to
#             Debian's versions and they are not emitted); PyPI torch's CUDA wheels are excluded from the resolution.
#   cuda12.8  Debian trixie, Python 3.13. PyPI's torch 2.8 is the CUDA 12.8 build: everything, CUDA wheels
#             included, resolves and hashes from PyPI.
#   cuda11.6  Ubuntu 20.04, Python 3.8. Resolved with PyPI's torch 1.13.1 minus its CUDA 11.7 wheels (the +cu116
#             wheel bundles CUDA); torch/torchvision are then replaced by the hash-pinned +cu116 block.
# uv: the venv's (make venv installs it there), else one on PATH, else installed into $(VENV) first: a fresh clone has
# none, and `make lock-derived` said `uv: command not found` (exit 127). Only uv goes into the venv then (seconds);
# `make venv` adds the test requirements later.
VENV ?= .venv
UV ?= $(or $(wildcard $(VENV)/bin/uv),$(shell command -v uv 2>/dev/null),$(VENV)/bin/uv)
UV_INSTALL := $(filter $(VENV)/bin/uv,$(UV))
$(VENV)/bin/uv:
	@echo "make: installing uv into $(VENV) (python3 -m venv, pip install uv)"
	@python3 -m venv $(VENV) || { echo "make: python3 -m venv failed; install python3-venv (apt-get install" \
	  "python3-venv), or put uv on PATH (https://docs.astral.sh/uv/)" >&2; exit 1; }
	@$(VENV)/bin/python -m pip install -q uv
LOCK_INDEX ?= https://pypi.org/simple
LOCK_REQS := containers/requirements
LOCK_OPTS_cpu := --python-version 3.13 --python-platform x86_64-manylinux_2_36 \
	-c $(LOCK_REQS)/cpu.debian.txt --excludes $(LOCK_REQS)/cpu.excludes.txt \
	--no-emit-package torch --no-emit-package torchvision --no-emit-package numpy
LOCK_OPTS_cuda12.8 := --python-version 3.13 --python-platform x86_64-manylinux_2_36
LOCK_OPTS_cuda11.6 := --python-version 3.8 --python-platform x86_64-manylinux_2_31 \
	--excludes $(LOCK_REQS)/cuda11.6.excludes.txt --no-emit-package torch --no-emit-package torchvision

.PHONY: $(addprefix lock-,$(IMAGE_FLAVORS))
lock: $(addprefix lock-,$(IMAGE_FLAVORS))

$(addprefix lock-,$(IMAGE_FLAVORS)): lock-%: | $(UV_INSTALL)
	@test -f $(LOCK_REQS)/$*.in || { echo "make lock: no $(LOCK_REQS)/$*.in" >&2; exit 2; }
	@set -e; out=containers/$*.lock; tmp=containers/.$*.lock.tmp; trap 'rm -f "$$tmp" "$$tmp.new"' EXIT INT TERM; \
	if [ -f "$$out" ]; then awk '/^--/ { next } /^[A-Za-z0-9].*[+]cu[0-9]/ { skip = 1 } \
	  skip { if (!/\\$$/) skip = 0; next } { print }' "$$out" > "$$tmp"; else : > "$$tmp"; fi; \
	$(UV) pip compile --quiet --no-header --generate-hashes --default-index $(LOCK_INDEX) \
	  $(if $(UPGRADE),--upgrade) $(LOCK_OPTS_$*) $(LOCK_REQS)/$*.in -o "$$tmp"; \
	{ echo "# containers/$*.lock: generated by \`make lock\` from $(LOCK_REQS)/$*.in; do not edit."; \
	  echo "# Installed by containers/install.sh: pip install --require-hashes --no-deps -r containers/$*.lock"; \
	  echo "# uv pip compile --generate-hashes $(strip $(LOCK_OPTS_$*)) $(LOCK_REQS)/$*.in"; \
	  if [ -f $(LOCK_REQS)/$*.torch.txt ]; then cat $(LOCK_REQS)/$*.torch.txt; fi; \
	  cat "$$tmp"; } > "$$tmp.new"; \
	mv -f "$$tmp.new" "$$out"; \
	echo "make lock: $$out: $$(grep -c '^[A-Za-z0-9]' "$$out") packages"

# ---------------------------------------------------------------------------------------------------------------
# A project's own packages, for `bin/run-cluster images derive` (docs/how-to/images-across-machines.md):
#   make lock-derived REQS=path/requirements.in [FLAVOR=cpu]   ->  path/requirements.lock
# Resolved as FLAVOR's own lock is (its Python, platform, exclusions, Debian's torch for cpu), constrained to the
# versions the image already holds (containers/FLAVOR.lock), which it then leaves out: the lock lists only what the
# derived image adds, each file hash-pinned.
#   make lock-derived REQS=path/requirements.in WHEELS=DIR [FLAVOR=cpu]   (offline: no index, no uv)
# Each wheel of DIR (pip download -r requirements.in -d DIR, made where PyPI is reachable) hash-pinned, less what the
# image holds; every name of REQS must have its wheel there (cluster_train/host/images/wheel_lock.py). Build it with
# images derive ... --wheels DIR. The inputs are checked before uv is installed (where it is missing).
REQS ?=
WHEELS ?=
DERIVED_LOCK ?= $(basename $(REQS)).lock
LOCK_HELD_cpu := --held $(LOCK_REQS)/cpu.debian.txt
.PHONY: lock-derived
lock-derived:
	@test -n "$(REQS)" && test -f "$(REQS)" || \
	  { echo "make lock-derived: REQS='$(REQS)' is not a file; give REQS=path/requirements.in (one package a line)" >&2; \
	    exit 2; }
	@test -f containers/$(FLAVOR).lock || \
	  { echo "make lock-derived: no containers/$(FLAVOR).lock (FLAVOR=cpu|cuda12.8|cuda11.6)" >&2; exit 2; }
ifneq ($(WHEELS),)
	$(HOST_PYTHON) -m cluster_train.host.images.wheel_lock --wheels "$(WHEELS)" --flavor $(FLAVOR) \
	  --held containers/$(FLAVOR).lock $(LOCK_HELD_$(FLAVOR)) --reqs "$(REQS)" -o "$(DERIVED_LOCK)"
else
	$(if $(UV_INSTALL),@$(MAKE) --no-print-directory $(UV_INSTALL))
	$(UV) pip compile --quiet --generate-hashes --default-index $(LOCK_INDEX) $(LOCK_OPTS_$(FLAVOR)) \
	  -c containers/$(FLAVOR).lock \
	  $$(awk -F'==' '/^[A-Za-z0-9]/ { print "--no-emit-package", $$1 }' containers/$(FLAVOR).lock) \
	  "$(REQS)" -o "$(DERIVED_LOCK)"
	@echo "make lock-derived: $(DERIVED_LOCK): $$(grep -c '^[A-Za-z0-9]' "$(DERIVED_LOCK)") packages" \
	  "on top of the $(FLAVOR) image"
endif
