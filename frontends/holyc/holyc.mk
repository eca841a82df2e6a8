# frontends/holyc/holyc.mk - hcrun (the HolyC interpreter) and its tests; included by the root Makefile.
#
#   make build/hcrun      the interpreter (C11 + libffi + libdl)
#   make test-holyc       tests/holyc on the CPU backend (run by `make test`)
#   make test-holyc-gpu   the examples with MT_DEVICE=cuda (run by `make test-gpu`)
#
# libffi: headers from pkg-config or the system include path; where only the runtime
# (libffi.so.8) is installed, frontends/holyc/vendor_ffi_headers.sh run on a machine that has
# the headers fills .deps/ffi/include, and the link falls back to -l:libffi.so.8.

HCRUN := $(BUILD)/hcrun
HCRUN_SRCS := $(wildcard frontends/holyc/*.c)
HCRUN_OBJS := $(HCRUN_SRCS:%.c=$(BUILD)/obj/%.o)

FFI_CFLAGS ?= $(shell pkg-config --cflags libffi 2>/dev/null)
ifeq ($(wildcard /usr/include/ffi.h /usr/include/*/ffi.h /usr/local/include/ffi.h),)
  FFI_CFLAGS += -I.deps/ffi/include
endif
FFI_LIBS ?= $(if $(wildcard /usr/lib/libffi.so /usr/lib/*/libffi.so /usr/lib64/libffi.so /usr/local/lib/libffi.so),-lffi,-l:libffi.so.8)

HCRUN_CFLAGS := -std=c11 -D_GNU_SOURCE $(OPT) -Wall -Wextra -Wno-unused-parameter -MMD -MP $(FFI_CFLAGS)

FRONTEND_TARGETS += $(HCRUN)
EXTRA_TESTS += test-holyc
EXTRA_GPU_TESTS += test-holyc-gpu

$(HCRUN): $(HCRUN_OBJS)
	@mkdir -p $(@D)
	$(CC) $(HCRUN_OBJS) -o $@ $(FFI_LIBS) -ldl -lm -pthread

$(BUILD)/obj/frontends/holyc/%.o: frontends/holyc/%.c
	@mkdir -p $(@D)
	$(CC) $(HCRUN_CFLAGS) -c $< -o $@

.PHONY: test-holyc test-holyc-gpu holyc-header

# Regenerates frontends/holyc/minitorch.HH from abi/minitorch.h (a test checks it is current).
holyc-header:
	$(PYTHON) scripts/gen_holyc_header.py -o frontends/holyc/minitorch.HH

test-holyc: $(HCRUN) $(LIB)
	MT_DEVICE=$${MT_DEVICE:-cpu} MINITORCH_LIB=$(abspath $(LIB)) $(PYTHON) tests/holyc/run.py --hcrun $(HCRUN)

test-holyc-gpu: $(HCRUN) $(LIB)
	MT_DEVICE=cuda MINITORCH_LIB=$(abspath $(LIB)) $(PYTHON) tests/holyc/run.py --hcrun $(HCRUN) --only examples --gpu
