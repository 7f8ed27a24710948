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

# Container overhead: start time and CPU throughput of the same torch build inside the CUDA 12.8 image and outside
# it (a venv with the image's torch release from PyPI, ~4 GB) -> bench/results/<host>-<date>-container.json.
BENCH_VENV ?= .bench-venv
BENCH_TORCH = $(shell sed -n 's/^ *org.cluster-train.torch //p' containers/cuda12.8.def)
.PHONY: bench-container
bench-container:
	$(MAKE) image FLAVOR=cuda12.8
	test -x $(BENCH_VENV)/bin/python || python3 -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q "torch==$(BENCH_TORCH)"
	python3 bench/container_overhead.py --image images/cuda12.8.sif --outside $(BENCH_VENV)/bin/python
