# cluster-train: `make demo` trains the demo on this machine inside the CPU image; `make test` runs every test.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST := $(VENV)/bin/pytest
# The host-side test venv takes torch's CPU wheel where the machine keeps one (pinned: any other version
# would pull gigabytes of CUDA wheels).
TORCH_WHEELS := $(wildcard /opt/wheels)
DEMO_DATA := data/cifar100-synthetic
VIDEO_DATA := data/ufc10-synthetic
PLANNER_DATA := data/navsim-synthetic
MOTION_DATA := data/smart-synthetic

-include containers/images.mk
-include benchmarks/bench.mk

.PHONY: help demo host-python apptainer slurm registry chromium sshd venv data docs test test-all test-fast golden clean
help:
	@echo "make demo       install what is missing, build the CPU image, train the demo via bin/run-cluster local,"
	@echo "                write its report and print where it is"
	@echo "make test       every test: installs Apptainer and Slurm, builds the image, starts the test cluster"
	@echo "make test-fast  unit tests only (no image, no Slurm), under 2 minutes"
	@echo "make test-all   make test, and the CUDA 12.8 image built and tested even if its inputs did not change"
	@echo "make bench      throughput, step time and memory per model and strategy -> benchmarks/results/"
	@echo "make image      build images/\$$FLAVOR.sif (FLAVOR=cpu|cuda12.8|cuda11.6) and record its sha256"
	@echo "make docs       build the documentation site into build/docs/ (strict: a warning or a broken link fails)"
	@echo "make golden     rewrite tests/golden/ and docs/reference/refusals.yaml after a deliberate change (review diff)"

# No host venv: bin/run-cluster needs only python3 with pyyaml and jinja2, and the report draws its curves without
# matplotlib where it is missing. The run id is chosen here so that the report, the last step, follows that run.
demo: apptainer host-python image $(DEMO_DATA)/cifar-100-python/meta  # the demo's own data set, not every experiment's
	@set -e; run="demo-$$(date +%Y%m%d-%H%M%S)"; \
	  echo "bin/run-cluster local cpu_2proc demo --run-id $$run"; bin/run-cluster local cpu_2proc demo --run-id "$$run"; \
	  echo "bin/run-cluster report $$run"; report=$$(bin/run-cluster report "$$run"); \
	  echo "make demo: run $$run finished; its report: $${report#wrote }"

host-python:  # bin/run-cluster's two packages: Debian's, installed where they are missing (a 0.05 s check after)
	@$(HOST_PYTHON) -c "import yaml, jinja2" 2>/dev/null || \
	  { apt-get -y -q -o DPkg::Lock::Timeout=120 install --no-install-recommends python3-yaml python3-jinja2 \
	      >/dev/null 2>&1 || { apt-get -y -q update >/dev/null && apt-get -y -q install --no-install-recommends \
	      python3-yaml python3-jinja2 >/dev/null; }; } && $(HOST_PYTHON) -c "import yaml, jinja2" || \
	  { echo "make demo: $(HOST_PYTHON) cannot import yaml and jinja2; install them: python3 -m pip install --user" \
	      "pyyaml jinja2" >&2; exit 1; }

apptainer:  # a 0.05 s no-op once installed and configured
	bash containers/install-apptainer.sh

slurm:
	bash tests/slurm/cluster.sh install

registry:  # the OCI registry the image tests push to and pull from (Debian's CNCF distribution registry)
	@dpkg-query -W -f '$${Status}' docker-registry 2>/dev/null | grep -q "install ok installed" || \
	  { apt-get -y -q -o DPkg::Lock::Timeout=120 install --no-install-recommends docker-registry >/dev/null 2>&1 || \
	    { apt-get -y -q update >/dev/null && apt-get -y -q install --no-install-recommends docker-registry >/dev/null; }; }

chromium:  # headless Chromium: the report test opens report.html and takes a screenshot (a no-op once installed)
	@dpkg-query -W -f '$${Status}' chromium 2>/dev/null | grep -q "install ok installed" || \
	  { apt-get -y -q -o DPkg::Lock::Timeout=120 install --no-install-recommends chromium >/dev/null 2>&1 || \
	    { apt-get -y -q update >/dev/null && apt-get -y -q install --no-install-recommends chromium >/dev/null; }; }

sshd:  # a real OpenSSH server plays a cluster's login node; rsync sends code; the login side's Python runs the launcher
	@dpkg-query -W -f '$${Status}\n' openssh-server openssh-client rsync python3-yaml python3-jinja2 2>/dev/null | \
	  grep -c "install ok installed" | grep -qx 5 || \
	  { apt-get -y -q -o DPkg::Lock::Timeout=120 install --no-install-recommends openssh-server openssh-client rsync \
	      python3-yaml python3-jinja2 >/dev/null 2>&1 || { apt-get -y -q update >/dev/null && apt-get -y -q install \
	      --no-install-recommends openssh-server openssh-client rsync python3-yaml python3-jinja2 >/dev/null; }; }

# --compile-bytecode: uv writes no .pyc by default (pip does), and where PYTHONDONTWRITEBYTECODE is set every process
# that imports torch and Lightning compiled them again: ~16 s of each pytest worker's collection, seconds of every
# host-side training process the tests start.
venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml tests/requirements.txt docs/requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q uv
	$(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY) $(if $(TORCH_WHEELS),--find-links $(TORCH_WHEELS)) \
	  -r tests/requirements.txt
	touch $@

# The documentation site, strictly: -W a warning is an error (a broken link or cross-reference, a page in no toctree),
# -n every reference checked, --keep-going all of them listed at once. build/docs/index.html is the site.
# (DOCS_SRC, DOCS_OUT: tests/host/test_docs_site.py builds a copy, and into its own directory.)
DOCS_SRC ?= docs
DOCS_OUT ?= build/docs
docs: venv
	$(PY) -m sphinx -W -n --keep-going -q -b html $(DOCS_SRC) $(DOCS_OUT)

# the generated sets the experiments read by default (experiments/*.yaml): CIFAR-100, UFC-10, seeds 003 and 004
# An empty file under data/ is never data: it is a test session's stand-in (tests/conftest.py default_input_dirs) that
# a killed session left behind; the set is made again rather than taken as done.
STAND_INS := $(shell find data -type f -empty 2>/dev/null)
$(STAND_INS): FORCE
.PHONY: FORCE
FORCE:
data: $(DEMO_DATA)/cifar-100-python/meta $(VIDEO_DATA)/metadata/test.csv $(PLANNER_DATA)/meta.json \
  $(MOTION_DATA)/meta.json
$(DEMO_DATA)/cifar-100-python/meta: | image
	apptainer exec --cleanenv --no-home -B "$(CURDIR)" --pwd "$(CURDIR)" $(IMAGES_DIR)/cpu.sif \
		python -m train make_data cifar100 $(DEMO_DATA)
$(VIDEO_DATA)/metadata/test.csv: | image
	apptainer exec --cleanenv --no-home -B "$(CURDIR)" --pwd "$(CURDIR)" $(IMAGES_DIR)/cpu.sif \
		python -m train make_data ufc10 $(VIDEO_DATA)
$(PLANNER_DATA)/meta.json: | image
	apptainer exec --cleanenv --no-home -B "$(CURDIR)" --pwd "$(CURDIR)" $(IMAGES_DIR)/cpu.sif \
		python -m train make_data planner_scenes $(PLANNER_DATA)
$(MOTION_DATA)/meta.json: | image
	apptainer exec --cleanenv --no-home -B "$(CURDIR)" --pwd "$(CURDIR)" $(IMAGES_DIR)/cpu.sif \
		python -m train make_data motion_tokens $(MOTION_DATA)

# Both run two pytest-xdist workers, scheduled by tests/conftest.py (worker_group): a module's tests stay in one.
test-fast: venv
	$(PYTEST) -q -n 2 -m "not image and not slurm and not slow and not registry" tests

# image_copy: host copies of tests that test_in_image.py runs again inside the image, by the stack jobs use.
# The host venv and the CPU image build side by side (minutes each, neither needs the other; apt is done by then).
# Each step's time goes to $(TEST_TIMES), which the suite's closing table reads (tests/suite_report.py); a skip that
# tests/suite_report.py does not allow by name fails the run (CT_NO_SKIPS).
TEST_TIMES := $(CURDIR)/.test-times
test test-all:
	@set -e; start=$$(date +%s); $(MAKE) --no-print-directory apptainer slurm registry chromium sshd; \
	  mid=$$(date +%s); $(MAKE) --no-print-directory -j2 venv image; end=$$(date +%s); \
	  printf 'installs: Apptainer, Slurm, registry, Chromium, sshd %s\nhost venv and CPU image, side by side %s\n' \
	    $$((mid - start)) $$((end - mid)) > $(TEST_TIMES)
	CT_TIMES=$(TEST_TIMES) CT_NO_SKIPS=1 $(if $(filter test-all,$@),CT_CUDA_BUILD=always) \
	  $(PYTEST) -q -rs -p no:cacheprovider -n 2 -m "not image_copy" tests

# After a deliberate change to what a profile renders: rewrite the golden scripts, then review `git diff tests/golden`.
golden: venv
	CT_UPDATE_GOLDEN=1 $(PYTEST) -q tests/host/test_golden_scripts.py tests/host/test_bad_inputs.py

clean:
	rm -rf runs $(DEMO_DATA) $(VIDEO_DATA) $(PLANNER_DATA) $(MOTION_DATA) .pytest_cache
