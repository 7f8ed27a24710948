# Included from the Makefile (`-include benchmarks/bench.mk`): `make bench` measures every strategy on this machine, the
# demo's epoch time with four 1-CPU ranks against one alone, before and after per-rank threads (bench-threads), and
# a 1000-element sweep's preparation and status on the test Slurm cluster (bench-sweeps), and 100,000 small files
# read from a directory against the same files as one SquashFS image bound into the container (bench-data).
.PHONY: bench bench-threads bench-sweeps bench-data
bench: venv bench-threads bench-sweeps bench-data
	USE_LIBUV=0 $(PY) -m train bench
bench-sweeps: venv slurm
	bash tests/slurm/cluster.sh status >/dev/null 2>&1 || bash tests/slurm/cluster.sh start
	$(PY) benchmarks/sweep_scale.py
bench-threads: venv $(DEMO_DATA)/cifar-100-python/meta
	$(PY) benchmarks/rank_threads.py --data $(DEMO_DATA)

# Data sets as images (issue 28): 100,000 files of 2-4 KiB in 1000 folders read cold and warm from the directory (on
# the host, and bound into the container) and from one SquashFS image of it (the project's packer, bound with
# image-src=/); the host opens each way (fanotify; strace, installed here if missing, counts the calls); pack time,
# size, same sha256 twice; a job's start staged (copy + sha256) against unstaged ->
# benchmarks/results/<host>-<date>-data.json.
# Root only (without it the bench says so and writes nothing); ~5 minutes, ~1 GB under /var/tmp.
bench-data: venv image
	@command -v strace >/dev/null || apt-get -y -q -o DPkg::Lock::Timeout=120 install --no-install-recommends \
	  strace >/dev/null 2>&1 || { apt-get -y -q update >/dev/null && apt-get -y -q install --no-install-recommends \
	  strace >/dev/null; } || echo "bench-data: strace could not be installed; its counts are left out" >&2
	$(PY) benchmarks/data_files.py --image $(IMAGES_DIR)/cpu.sif

# The registered training loop's cost per step beyond a plain loop, piece by piece, and what each of issue 29's
# removals bought (one process, a one-layer model, ~4 minutes) -> benchmarks/results/<host>-<date>-loop.json.
.PHONY: bench-loop
bench-loop: venv
	$(PY) benchmarks/loop_overhead.py

# Container overhead: the image's own files inside the container (the SIF as jobs run it, its files as a sandbox
# directory, exec into a running instance) and outside it (chroot into the same files), so the container is the only
# difference -> benchmarks/results/<host>-<date>-container.json. Root. BENCH_IMAGE: the CUDA one on a GPU machine.
BENCH_IMAGE ?= cpu
.PHONY: bench-container
bench-container:
	$(MAKE) image FLAVOR=$(BENCH_IMAGE)
	python3 benchmarks/container_overhead.py --image images/$(BENCH_IMAGE).sif

# A node's ranks starting together (issue 47): bare, a mount per rank, one mount per node (--sharens, what the
# trainer's srun ranks use) and a sandbox unpacked to local disk per job, at 1, 2, 4 and 8 ranks ->
# benchmarks/results/<host>-<date>-rank-start.json. Root. ~8 min on 2 cores.
.PHONY: bench-rank-start
bench-rank-start:
	$(MAKE) image FLAVOR=$(BENCH_IMAGE)
	python3 benchmarks/rank_start.py --image images/$(BENCH_IMAGE).sif

# The command line's answer (issue 40): `bin/run-cluster ci-slurm n1_gpu1 demo --dry-run` as a whole process, 20 runs
# after a warm-up, wall and CPU min/median/max -> benchmarks/results/<host>-<date>-cli.json (target: at most 0.3 s).
# BASELINE=DIR times another checkout in the same loop (e.g. main's), runs alternated. ~30 s.
.PHONY: bench-cli
bench-cli: venv
	$(PY) benchmarks/cli_speed.py $(if $(BASELINE),--baseline $(BASELINE))

# Mid-epoch saves (issue 43, trainer.checkpoint_every): a ~90 MB checkpoint saved every 10 of 60 CPU steps, in the
# background (single, ddp) and synchronously (DeepSpeed, FSDP); the saving step's time against the others
# -> benchmarks/results/<host>-<date>-checkpoint-saves.json. ~30 s.
.PHONY: bench-checkpoint-saves
bench-checkpoint-saves: venv
	$(PY) benchmarks/checkpoint_saves.py

spine-counts: venv image  # issue 57's counts of this checkout (ROOT=DIR: another one, by this checkout's rules)
	$(VENV)/bin/python benchmarks/spine_counts.py --root $(or $(ROOT),.) --out benchmarks/results/spine-counts-$$(git -C $(or $(ROOT),.) rev-parse --short HEAD).json
