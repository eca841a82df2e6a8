# frontends/c/op_overhead.mk - the test of the host-path micro-benchmark (frontends/c/op_overhead.c:
# microseconds per call of small ops); included by the root Makefile. The numbers themselves
# go to `make bench` (scripts/bench/workloads.py, row op-overhead); the test checks that the
# program runs, checks its results and prints a sane table.
#
#   make test-op-overhead    run by `make test` (CPU) and `make test-gpu` (MT_DEVICE=cuda)

EXTRA_TESTS += test-op-overhead
EXTRA_GPU_TESTS += test-op-overhead

.PHONY: test-op-overhead

test-op-overhead: $(LIB) $(BUILD)/op_overhead
	MT_DEVICE=$${MT_DEVICE:-cpu} $(PYTHON) tests/c/test_op_overhead.py $(BUILD)
