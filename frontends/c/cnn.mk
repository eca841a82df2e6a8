# frontends/c/cnn.mk - the test of the convolutional demos (frontends/c/mnist_cnn.c and
# lenet5.c on a small generated MNIST-like set); included by the root Makefile.
#
#   make test-cnn-demos    run by `make test` (CPU) and `make test-gpu` (MT_DEVICE=cuda)

EXTRA_TESTS += test-cnn-demos
EXTRA_GPU_TESTS += test-cnn-demos

.PHONY: test-cnn-demos

test-cnn-demos: $(LIB) $(BUILD)/mnist_cnn $(BUILD)/lenet5
	MT_DEVICE=$${MT_DEVICE:-cpu} $(PYTHON) tests/c/test_cnn_demos.py $(BUILD)
