# cifar10-dp build.  `make` builds build/cifar10-train and build/cifar10-test; `make test` runs
# the test suite; `make clean`.  Needs Open MPI's mpicc, zlib and a C11 gcc with OpenMP.
# No -march=native: the vector paths (generic x86-64, AVX2+FMA, AVX-512) are all compiled and
# chosen at run time, so the binaries run on any x86-64.

MPICC   ?= mpicc
BUILD   ?= build
OPT     ?= -O3
CFLAGS  ?= $(OPT) -g
VERSION := 0.1.0
CFLAGS  += -DCIFAR10_DP_VERSION=\"$(VERSION)\"
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-format-truncation -fopenmp -ffp-contract=fast -MMD -MP
LDLIBS  += -lz -lm
PREFIX  ?= /usr/local
# `make V=1` shows the full compiler command lines.
V ?= 0
Q := $(if $(filter 1,$(V)),,@)

ifeq ($(shell command -v $(MPICC) 2>/dev/null),)
$(error $(MPICC) not found: install Open MPI (Debian: apt-get install libopenmpi-dev openmpi-bin))
endif
HASH := \#
ifeq ($(shell printf '$(HASH)include <zlib.h>\nint main(void){return 0;}' | $(MPICC) -x c - -lz -o /dev/null 2>/dev/null && echo y),)
$(error zlib not found (Debian: apt-get install zlib1g-dev))
endif
MPI_VERSION := $(shell mpirun --version 2>/dev/null | head -n 1)
NVCC_PATH := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
$(info MPI:  $(MPICC) ($(if $(MPI_VERSION),$(MPI_VERSION),mpirun not found)))
$(info zlib: found)
# CUDA=0 forces the CPU-only build (the Docker image's CPU flavour passes it).
CUDA ?= auto
ifeq ($(CUDA),0)
$(info CUDA: off (CUDA=0); building the CPU backend)
else
$(info CUDA: $(if $(NVCC_PATH),nvcc at $(NVCC_PATH); the CUDA backend is not part of this tree yet,not found); building the CPU backend)
endif

LIB_SRC := common/err.c common/rng.c common/cpus.c common/file.c common/clock.c \
           data/cifar.c data/augment.c data/shard.c \
           kernels/cpu/backend.c kernels/cpu/gemm_dispatch.c kernels/cpu/conv3x3.c \
           kernels/cpu/relu.c kernels/cpu/maxpool2.c kernels/cpu/batchnorm.c \
           kernels/cpu/linear.c kernels/cpu/softmax_xent.c kernels/cpu/sgd.c \
           app/model.c app/json.c app/safetensors.c app/checkpoint.c app/options.c app/config.c \
           app/evaluate.c
# These are compiled once per ISA (see kernels/cpu/isa.h); the path is chosen at run time.
ISA_SRC := kernels/cpu/gemm.c kernels/cpu/winograd.c
ISAS    := generic avx2 avx512
march_generic := -march=x86-64 -mtune=generic
march_avx2    := -march=x86-64-v3 -mtune=generic
march_avx512  := -march=x86-64-v4 -mtune=generic

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(foreach i,$(ISAS),$(ISA_SRC:%.c=$(BUILD)/%.$(i).o))
LIB      := $(BUILD)/libcifar10.a
BINS     := $(BUILD)/cifar10-train $(BUILD)/cifar10-test $(BUILD)/cifar10-bench
TEST_BINS := $(BUILD)/tests/test_kernels $(BUILD)/tests/test_data $(BUILD)/tests/test_checkpoint \
             $(BUILD)/tests/test_dist $(BUILD)/tests/dump_steps $(BUILD)/tests/make_synthetic

.PHONY: all test bench clean install
all: $(BINS)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	@echo "  CC    $<"
	$(Q)$(MPICC) $(CFLAGS) -c $< -o $@

# FILE.ISA.o from FILE.c (the shorter stem wins over the rule above).
define isa_rule
$$(BUILD)/%.$(1).o: %.c
	@mkdir -p $$(@D)
	@echo "  CC    $$< ($(1))"
	$$(Q)$$(MPICC) $$(CFLAGS) $$(march_$(1)) -DCPU_ISA=$(1) -c $$< -o $$@
endef
$(foreach i,$(ISAS),$(eval $(call isa_rule,$(i))))

$(LIB): $(LIB_OBJ)
	@echo "  AR    $@"
	$(Q)rm -f $@ && ar rcs $@ $^

LINK = @echo "  LINK  $@"; $(MPICC) $(CFLAGS) $^ -o $@ $(LDLIBS)
$(BUILD)/cifar10-train: $(BUILD)/app/train.o $(BUILD)/app/dist.o $(LIB)
	$(LINK)
$(BUILD)/cifar10-bench: $(BUILD)/app/bench.o $(BUILD)/app/dist.o $(LIB)
	$(LINK)
$(BUILD)/cifar10-test: $(BUILD)/app/test.o $(LIB)
	$(LINK)
$(BUILD)/tests/test_dist: $(BUILD)/tests/test_dist.o $(BUILD)/tests/check.o $(BUILD)/app/dist.o $(LIB)
	$(LINK)
$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/tests/check.o $(LIB)
	$(LINK)

test: $(BINS) $(TEST_BINS)
	BUILD=$(BUILD) tests/run.sh

# Throughput benchmark: ours (1 rank x all threads, all ranks x 1 thread) and PyTorch.
bench: $(BINS)
	BUILD=$(BUILD) scripts/bench.sh

# Keep the test objects around (they are otherwise intermediate and deleted).
.SECONDARY:

install: $(BINS)
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(BINS) scripts/get-data.sh $(DESTDIR)$(PREFIX)/bin/

clean:
	rm -rf $(BUILD)

# Dependency files are only ever written by the compiler: no rule may try to remake them (make's
# built-in "%: %.o" would otherwise turn gemm.avx2.d into a target of the %.avx2.o rule).
MAKEFLAGS += --no-builtin-rules
.SUFFIXES:
%.d: ;
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
