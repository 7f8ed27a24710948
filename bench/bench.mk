# Included from the Makefile (`-include bench/bench.mk`): `make bench` measures every strategy on this machine, the
# demo's epoch time with four 1-CPU ranks against one alone, before and after per-rank threads (bench-threads), and
# a 1000-element sweep's preparation and status on the test Slurm cluster (bench-sweeps).
.PHONY: bench bench-threads bench-sweeps
bench: venv bench-threads bench-sweeps
	USE_LIBUV=0 $(PY) -m train bench
bench-sweeps: venv slurm
	bash tests/slurm/cluster.sh status >/dev/null 2>&1 || bash tests/slurm/cluster.sh start
	$(PY) bench/sweep_scale.py
bench-threads: venv $(DEMO_DATA)/cifar-100-python/meta
	$(PY) bench/rank_threads.py --data $(DEMO_DATA)

# The registered training loop's cost per step beyond a plain loop, piece by piece, and what each of issue 29's
# removals bought (one process, a one-layer model, ~4 minutes) -> bench/results/<host>-<date>-loop.json.
.PHONY: bench-loop
bench-loop: venv
	$(PY) bench/loop_overhead.py

# Container overhead: the image's own files inside the container (the SIF as jobs run it, its files as a sandbox
# directory, exec into a running instance) and outside it (chroot into the same files), so the container is the only
# difference -> bench/results/<host>-<date>-container.json. Root. BENCH_IMAGE: the CUDA one on a GPU machine.
BENCH_IMAGE ?= cpu
.PHONY: bench-container
bench-container:
	$(MAKE) image FLAVOR=$(BENCH_IMAGE)
	python3 bench/container_overhead.py --image images/$(BENCH_IMAGE).sif
