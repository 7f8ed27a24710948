# Included from the Makefile (`-include bench/bench.mk`): `make bench` measures every strategy on this machine.
.PHONY: bench
bench: venv
	USE_LIBUV=0 $(PY) -m train bench
