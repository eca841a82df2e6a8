# frontends/c/data.mk - build and test rules for the data loaders and the data demos;
# included by the root Makefile.
#
#   make test-data-demos    the MNIST/sales demos on small generated fixtures (run by `make test`)
#   make data               scripts/fetch_data.sh: MNIST, Fashion-MNIST and data/sales.tsv
#
# The IDX/TSV loaders (autograd/io.cpp) read gzip and plain files through zlib.

LDLIBS += -lz

DATA_DEMOS := $(BUILD)/mnist_mlp $(BUILD)/softmax_regression $(BUILD)/sales
# every C demo is rebuilt when one of the shared headers changes (common.h, progress.h,
# nn.h, mnist.h)
$(C_DEMOS): $(wildcard frontends/c/*.h)

EXTRA_TESTS += test-data-demos
EXTRA_GPU_TESTS += test-data-demos

.PHONY: test-data-demos data

test-data-demos: $(LIB) $(DATA_DEMOS)
	MT_DEVICE=$${MT_DEVICE:-cpu} $(PYTHON) tests/c/test_data_demos.py $(BUILD)

data:
	scripts/fetch_data.sh
