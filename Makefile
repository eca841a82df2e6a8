# minitorch - build, test, run, bench, install.
#
#   make                 build/libminitorch.so (+ frontends); CUDA when nvcc is found
#   make CUDA=0          CPU-only library
#   make print-config    what was detected
#   make run             the flagship demo (GPU when there is one, else CPU)
#   make test            every suite on the CPU backend (+ compiles every CUDA source)
#   make test-gpu        the suites with MT_DEVICE=cuda plus tests/gpu (needs a GPU)
#   make test-sanitize   the CPU suites under AddressSanitizer + UBSan (build-sanitize/)
#   make bench           benchmarks against PyTorch (needs a GPU)
#   make install PREFIX=/usr/local
#
# Settings: CUDA=0|1, NVCC=path, CUDA_HOME=path, CUDA_ARCH (gencode flags),
# CUDNN_PATH=dir with include/ and lib/ (optional; found automatically when unset), DEBUG=1.

SHELL := /bin/bash
.DEFAULT_GOAL := all

BUILD   ?= build
PREFIX  ?= /usr/local
PYTHON  ?= python3
CXX     ?= g++
CC      ?= gcc

# ---- CUDA detection ---------------------------------------------------------
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
ifeq ($(origin CUDA), undefined)
  CUDA := $(if $(NVCC),1,0)
endif
ifneq ($(filter-out 0 1,$(CUDA)),)
  $(error CUDA must be 0 or 1, got '$(CUDA)')
endif
ifeq ($(CUDA),1)
  ifeq ($(NVCC),)
    $(error CUDA=1 but nvcc was not found; set NVCC=/path/to/nvcc or build with CUDA=0)
  endif
  CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(realpath $(NVCC)))
  CUDA_LIBDIR := $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/targets/x86_64-linux/lib))
  CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90
  NVCC_VERSION := $(shell $(NVCC) --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
endif

ifdef DEBUG
  OPT := -O0 -g
else
  OPT := -O2 -g
endif

CPPFLAGS := -Iabi -I. -MMD -MP
CXXFLAGS := -std=c++17 $(OPT) -fPIC -fvisibility=hidden -fvisibility-inlines-hidden -Wall -Wextra -Wno-unused-parameter -pthread
CFLAGS_C := -std=c99 $(OPT) -Wall -Wextra -pedantic
LDLIBS   := -pthread -ldl
NVCCFLAGS := -std=c++17 -O3 -lineinfo $(CUDA_ARCH) --expt-relaxed-constexpr \
             -Xcompiler -fPIC,-fvisibility=hidden,-Wall -Iabi -I.

NVCCFLAGS += $(NVCC_EXTRA)

LIB_SRCS := $(wildcard abi/*.cpp autograd/*.cpp backend/*.cpp backend/cpu/*.cpp)
CU_SRCS  := $(wildcard backend/cuda/*.cu backend/cuda/*/*.cu)
ifeq ($(CUDA),1)
  CPPFLAGS += -DMT_HAVE_CUDA -isystem $(CUDA_HOME)/include
  NVCCFLAGS += -DMT_HAVE_CUDA
  LIB_SRCS += $(wildcard backend/cuda/*.cpp)
  LDLIBS += -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcublasLt -lcublas -lcudart
  # cuDNN when CUDNN_PATH is not given: torch's wheel, else a system cudnn.h (CUDNN_PATH=
  # on the command line turns it off).
  ifeq ($(origin CUDNN_PATH), undefined)
    CUDNN_PATH := $(patsubst %/include/cudnn.h,%,$(firstword $(wildcard \
      /opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/include/cudnn.h \
      /usr/include/cudnn.h $(CUDA_HOME)/include/cudnn.h)))
  endif
  ifneq ($(CUDNN_PATH),)
    CPPFLAGS += -DMT_HAVE_CUDNN -isystem $(CUDNN_PATH)/include
    NVCCFLAGS += -DMT_HAVE_CUDNN -I$(CUDNN_PATH)/include
    LDLIBS += -L$(CUDNN_PATH)/lib -Wl,-rpath,$(CUDNN_PATH)/lib -l:libcudnn.so.9
  endif
endif

# Objects of the CPU-only and the CUDA configuration live apart, and the library is
# relinked whenever the configuration changes (build/config records the last one).
OBJ      := $(BUILD)/obj-$(if $(filter 1,$(CUDA)),cuda,cpu)
CONFIG_LINE := CUDA=$(CUDA) ARCH=$(CUDA_ARCH) CUDNN=$(CUDNN_PATH)
$(shell mkdir -p $(BUILD); [ "$$(cat $(BUILD)/config 2>/dev/null)" = "$(CONFIG_LINE)" ] || echo "$(CONFIG_LINE)" > $(BUILD)/config)
LIB_OBJS := $(LIB_SRCS:%.cpp=$(OBJ)/%.o)
CU_OBJS  := $(CU_SRCS:%.cu=$(OBJ)/%.o)
ALL_OBJS := $(LIB_OBJS) $(if $(filter 1,$(CUDA)),$(CU_OBJS))
LIB      := $(BUILD)/libminitorch.so
ARCHIVE  := $(BUILD)/libminitorch_static.a

C_DEMOS  := $(patsubst frontends/c/%.c,$(BUILD)/%,$(wildcard frontends/c/*.c))
UNIT_SRCS := $(wildcard tests/unit/*.cpp)
UNIT_OBJS := $(UNIT_SRCS:%.cpp=$(OBJ)/%.o)
UNIT_BIN := $(BUILD)/unit_tests

# Frontends with build steps of their own add rules in a fragment:
#   frontends/<name>/<name>.mk may append to FRONTEND_TARGETS (built by `make`),
#   EXTRA_TESTS (run by `make test`) and EXTRA_GPU_TESTS (run by `make test-gpu`).
FRONTEND_TARGETS :=
EXTRA_TESTS :=
EXTRA_GPU_TESTS :=
include $(wildcard frontends/*/*.mk)

.PHONY: all lib print-config run test test-unit test-c test-python test-gpu test-sanitize \
        compile-cuda bench install clean deps frontends

all: deps print-config lib frontends

print-config:
	@echo "minitorch build configuration"
	@echo "  CUDA       = $(CUDA)$(if $(filter 1,$(CUDA)), (nvcc $(NVCC_VERSION) at $(NVCC)))"
	@echo "  CUDA_HOME  = $(CUDA_HOME)"
	@echo "  CUDA_ARCH  = $(CUDA_ARCH)"
	@echo "  CUDNN_PATH = $(if $(CUDNN_PATH),$(CUDNN_PATH),(none: cuDNN paths off))"
	@echo "  CXX        = $(CXX) $(OPT)"

lib: $(LIB) $(ARCHIVE)

$(LIB): $(ALL_OBJS) abi/exports.map $(BUILD)/config
	@mkdir -p $(@D)
	$(CXX) -shared -o $@ $(ALL_OBJS) -Wl,--version-script=abi/exports.map -Wl,-soname,libminitorch.so $(LDLIBS)

$(ARCHIVE): $(ALL_OBJS) $(BUILD)/config
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $(ALL_OBJS)

$(OBJ)/%.o: %.cpp
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

$(OBJ)/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) $(NVCC_TARGET_ARCH) -MMD -MP -c $< -o $@

# The Hopper-only kernels (wgmma) are built for sm_90a alone, whatever CUDA_ARCH says; the
# host side checks for a compute capability 9.0 device before it launches them.
SM90A_SRCS := backend/cuda/attention/flash_forward_wgmma.cu backend/cuda/attention/flash_backward_wgmma.cu \
  backend/cuda/gemm_f32_wgmma.cu backend/cuda/attention/attention_f32_wgmma.cu
$(SM90A_SRCS:%.cu=$(OBJ)/%.o) $(SM90A_SRCS:%.cu=$(BUILD)/obj-cuda/%.o): \
  NVCCFLAGS := $(filter-out $(CUDA_ARCH),$(NVCCFLAGS))
$(SM90A_SRCS:%.cu=$(OBJ)/%.o) $(SM90A_SRCS:%.cu=$(BUILD)/obj-cuda/%.o): \
  NVCC_TARGET_ARCH := -gencode arch=compute_90a,code=sm_90a

# The sources that test MT_HAVE_CUDNN follow the configuration (cuDNN found or not).
$(OBJ)/backend/cuda/cudnn.o $(OBJ)/autograd/ops_cnn.o: $(BUILD)/config

# Compiles every CUDA source even in a CPU-only configuration (CI has nvcc, no GPU).
compile-cuda:
	@if [ -z "$(NVCC)" ]; then echo "compile-cuda: nvcc not found, skipped"; else \
	  $(MAKE) --no-print-directory CUDA=1 $(CU_SRCS:%.cu=$(BUILD)/obj-cuda/%.o) $(BUILD)/launch_floor; fi

# The CUDA runtime's own host costs, by part (scripts/bench/launch_floor.cu; needs nvcc).
$(BUILD)/launch_floor: scripts/bench/launch_floor.cu
	@mkdir -p $(@D)
	$(NVCC) -std=c++17 -O2 $(CUDA_ARCH) $< -o $@

frontends: $(C_DEMOS) $(FRONTEND_TARGETS)

$(BUILD)/%: frontends/c/%.c abi/minitorch.h $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_C) -Iabi $< -o $@ -L$(BUILD) -Wl,-rpath,'$$ORIGIN' -lminitorch -lm


# ---- tests ------------------------------------------------------------------
DOCTEST_H := $(firstword $(wildcard /usr/include/doctest/doctest.h /usr/local/include/doctest/doctest.h))

# What the build and the tests need from Debian: doctest (unit suites), libffi (hcrun's
# calls), zlib (gzip IDX files). Installed only when the header is missing.
DEPS_MISSING := $(if $(DOCTEST_H),,doctest-dev) \
  $(if $(wildcard /usr/include/ffi.h /usr/include/*/ffi.h /usr/local/include/ffi.h .deps/ffi/include/ffi.h),,libffi-dev) \
  $(if $(wildcard /usr/include/zlib.h /usr/local/include/zlib.h),,zlib1g-dev)

deps:
	@if [ -n "$(strip $(DEPS_MISSING))" ]; then \
	  echo "installing $(strip $(DEPS_MISSING)) (needed by the build and the tests)"; \
	  if command -v apt-get >/dev/null; then \
	    SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get install -y -q $(DEPS_MISSING) >/dev/null || { $$SUDO apt-get update -q >/dev/null && $$SUDO apt-get install -y -q $(DEPS_MISSING) >/dev/null; }; \
	  else echo "missing $(DEPS_MISSING) and apt-get is unavailable: install them" >&2; exit 1; fi; \
	fi

# One object per suite file, so that `make -j` compiles them side by side (as one g++ call
# they were the longest serial step of a build), linked against the static archive.
$(UNIT_OBJS): CXXFLAGS += -fvisibility=default
$(UNIT_BIN): $(UNIT_OBJS) $(ARCHIVE)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) $(UNIT_OBJS) -o $@ $(ARCHIVE) $(LDLIBS)

test-unit: deps
	@$(MAKE) --no-print-directory $(UNIT_BIN)
	MT_DEVICE=$${MT_DEVICE:-cpu} $(UNIT_BIN)

test-c: lib frontends
	MT_DEVICE=$${MT_DEVICE:-cpu} $(PYTHON) tests/c/run_c_demos.py $(BUILD)

test-python: lib
	MT_DEVICE=$${MT_DEVICE:-cpu} MINITORCH_LIB=$(abspath $(LIB)) $(PYTHON) -m unittest discover -s tests/python -t . -v 2>&1 | tail -n 40; exit $${PIPESTATUS[0]}

# AddressSanitizer + UndefinedBehaviorSanitizer on the CPU backend: the library, the C demos,
# the HolyC interpreter and the unit tests built into $(BUILD)-sanitize, then the unit tests, the
# C demo suites, the Python suites (the sanitizer runtimes preloaded into python3) and the HolyC
# suite with its fuzzer. Any report fails the run. Not part of `make test`: about 10 minutes on
# 2 cores. float-cast-overflow (a float converted to an integer type it does not fit) is not part
# of GCC's `undefined` group, so it is named.
SAN_BUILD := $(BUILD)-sanitize
SAN_FLAGS := -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=undefined,float-cast-overflow \
             -fno-omit-frame-pointer
SAN_ENV := MT_DEVICE=cpu ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:use_sigaltstack=0 \
           UBSAN_OPTIONS=print_stacktrace=1
test-sanitize: deps
	@$(MAKE) --no-print-directory BUILD=$(SAN_BUILD) CUDA=0 CXX="$(CXX) $(SAN_FLAGS)" CC="$(CC) $(SAN_FLAGS)" \
	  lib frontends $(SAN_BUILD)/unit_tests
	$(SAN_ENV) $(SAN_BUILD)/unit_tests
	for t in run_c_demos test_data_demos test_cnn_demos test_char_gpt; do \
	  $(SAN_ENV) $(PYTHON) tests/c/$$t.py $(SAN_BUILD) || exit 1; done
	$(SAN_ENV) ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
	  LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	  MINITORCH_LIB=$(abspath $(SAN_BUILD))/libminitorch.so $(PYTHON) -m unittest discover -s tests/python -t .
	$(SAN_ENV) MT_HOLYC_NO_MEMLIMIT=1 MINITORCH_LIB=$(abspath $(SAN_BUILD))/libminitorch.so \
	  $(PYTHON) tests/holyc/run.py --hcrun $(SAN_BUILD)/hcrun
	@echo "make test-sanitize: no reports"

test: deps
	@$(MAKE) --no-print-directory all
	@$(PYTHON) scripts/gen_fa_wgmma.py --check
	@$(MAKE) --no-print-directory compile-cuda
	@$(MAKE) --no-print-directory test-unit
	@$(MAKE) --no-print-directory test-c
	@$(MAKE) --no-print-directory test-python
	@for t in $(EXTRA_TESTS); do $(MAKE) --no-print-directory $$t || exit 1; done
	@echo "make test: all suites passed"

test-gpu:
	@$(MAKE) --no-print-directory all CUDA=1
	MT_DEVICE=cuda $(MAKE) --no-print-directory test-unit test-c test-python
	MT_DEVICE=cuda MINITORCH_LIB=$(abspath $(LIB)) $(PYTHON) -m unittest discover -s tests/gpu -t . -v
	@for t in $(EXTRA_GPU_TESTS); do MT_DEVICE=cuda $(MAKE) --no-print-directory $$t || exit 1; done
	@echo "make test-gpu: all suites passed"

bench:
	@$(MAKE) --no-print-directory all CUDA=1
	MINITORCH_LIB=$(abspath $(LIB)) $(PYTHON) scripts/bench/run.py

# The flagship demo: the roadmap CNN on MNIST (frontends/c/mnist_cnn.c: 10 epochs on a GPU;
# on the CPU one epoch on the first 10000 training images), after fetching MNIST when it is
# missing.
run: all
	scripts/fetch_data.sh mnist
	$(BUILD)/mnist_cnn

# ---- install ----------------------------------------------------------------
install: lib
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 755 $(LIB) $(DESTDIR)$(PREFIX)/lib/libminitorch.so
	install -m 644 abi/minitorch.h $(DESTDIR)$(PREFIX)/include/minitorch.h
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(shell sed -n 's/#define MT_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)/\2/p' abi/minitorch.h | paste -sd.)|g' \
	    -e 's|@LIBS_PRIVATE@|$(LDLIBS)|g' abi/minitorch.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/minitorch.pc

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD)/obj* -name '*.d' 2>/dev/null)
