# cifar10-dp build.  `make` builds build/cifar10-train, cifar10-test, cifar10-predict and
# cifar10-bench; `make test` runs the test suite; `make clean`.  Needs Open MPI's mpicc, zlib,
# libpng, libjpeg and a C11 gcc with OpenMP; with
# nvcc and cuDNN (CUDA 13, e.g. /usr/local/cuda) the same binaries also get the CUDA backend.
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
$(info MPI:  $(MPICC) ($(if $(MPI_VERSION),$(MPI_VERSION),mpirun not found)))
$(info zlib: found)
# cifar10-predict reads pictures with libpng and libjpeg(-turbo).
ifeq ($(shell printf '$(HASH)include <stdio.h>\n$(HASH)include <png.h>\n$(HASH)include <jpeglib.h>\nint main(void){return 0;}' | $(MPICC) -x c - -lpng -ljpeg -o /dev/null 2>/dev/null && echo y),)
$(error libpng or libjpeg not found (Debian: apt-get install libpng-dev libjpeg-dev))
endif
$(info libpng, libjpeg: found)

# SANITIZE=1: AddressSanitizer and UndefinedBehaviorSanitizer, every report fatal; the CPU
# backend only, or with CUDA=emu the CUDA backend's sources and their emulation too (`make
# sanitize` builds so into build-sanitize and runs tests/sanitize.sh).
SANITIZE ?= 0
ifeq ($(SANITIZE),1)
CFLAGS  += -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
ifneq ($(CUDA),emu)
override CUDA := 0
endif
# winograd.c's unrolled transforms under ASan take 6 times longer to compile at -O3 than at -O2
# (about 100 of the build's 145 CPU-seconds) and run no faster in tests/sanitize.sh.
$(BUILD)/kernels/cpu/winograd.%.o: OPT := -O2
$(info sanitizers: address, undefined)
endif

# FUZZ=1: the library for the libFuzzer targets of tests/fuzz (clang through mpicc:
# OMPI_CC=clang), with ASan and UBSan, at -O1 as libFuzzer's documentation builds its targets;
# `make fuzz` builds them into build-fuzz.
FUZZ ?= 0
ifeq ($(FUZZ),1)
override OPT := -O1
CFLAGS  += -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -Wno-unknown-warning-option \
           -Wno-pass-failed
override CUDA := 0
$(info fuzzing build: clang's libFuzzer, address, undefined)
endif

# CUDA backend: CUDA=auto (default) builds it when nvcc and cuDNN are found, CUDA=1 insists,
# CUDA=0 builds the CPU backend only, CUDA=emu builds the backend's sources with g++ against
# tests/cudaemu (its kernels run as CPU threads: the GPU code's tests without a GPU). CUDA_ARCH: the GPU generations to compile for (SASS for
# each; PTX of the newest too, so GPUs newer than the list JIT-compile it); CUDA_ARCH=90 builds
# one quickly. CUDA_SYNC=1 synchronises after every kernel launch (debugging: names the kernel
# that faults).
CUDA      ?= auto
CUDA_ARCH ?= 75 80 86 89 90
CUDA_SYNC ?= 0
NVCC      ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
ifeq ($(CUDA),emu)
override NVCC :=
endif
ifneq ($(CUDA),0)
ifneq ($(NVCC),)
# The toolkit root, as nvcc reports it (its TOP in a dry run): `nvcc` on PATH may be a wrapper
# script elsewhere (e.g. /usr/local/bin/nvcc exec'ing /usr/local/cuda-13.0/bin/nvcc), so its own
# directory's parent is not always the toolkit. Set once (:=), so nvcc runs once per make.
ifeq ($(CUDA_HOME),)
CUDA_HOME  := $(realpath $(shell $(NVCC) --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^$(HASH)[$$] TOP=//p'))
endif
ifeq ($(CUDA_HOME),)
CUDA_HOME  := $(patsubst %/bin/nvcc,%,$(NVCC))
endif
CUDNN_INC  := $(firstword $(foreach d,$(CUDA_HOME)/include /usr/include /usr/include/x86_64-linux-gnu,$(if $(wildcard $(d)/cudnn.h),$(d))))
CUDNN_LIB  := $(firstword $(foreach d,$(CUDA_HOME)/lib64 /usr/lib/x86_64-linux-gnu,$(if $(wildcard $(d)/libcudnn.so),$(d))))
endif
endif
ifeq ($(CUDA),0)
USE_CUDA := 0
$(info CUDA: off (CUDA=0); building the CPU backend only)
else ifeq ($(CUDA),emu)
USE_CUDA := 1
CUDA_EMU := 1
$(info CUDA: emulated (CUDA=emu): the CUDA backend built by g++ against tests/cudaemu, run on the CPU)
else ifeq ($(NVCC),)
USE_CUDA := 0
ifeq ($(CUDA),1)
$(error CUDA=1 but nvcc was not found (put it on PATH or set NVCC=/path/to/nvcc))
endif
$(info CUDA: nvcc not found; building the CPU backend only)
else ifeq ($(and $(CUDNN_INC),$(CUDNN_LIB)),)
USE_CUDA := 0
ifeq ($(CUDA),1)
$(error CUDA=1 but cuDNN (cudnn.h and libcudnn.so) was not found beside $(CUDA_HOME) or in /usr)
endif
$(info CUDA: nvcc at $(NVCC) but no cuDNN; building the CPU backend only)
else
USE_CUDA := 1
NVCC_VERSION := $(shell $(NVCC) --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
$(info CUDA: nvcc $(NVCC_VERSION) at $(NVCC), cuDNN in $(CUDNN_INC); CUDA backend for sm_$(subst $() $(),/sm_,$(CUDA_ARCH)) + PTX$(if $(filter 1,$(CUDA_SYNC)), with CUDA_SYNC=1))
endif

LIB_SRC := common/err.c common/rng.c common/cpus.c common/file.c common/clock.c \
           data/cifar.c data/augment.c data/shard.c data/image.c \
           kernels/kernels.c kernels/cpu/backend.c kernels/cpu/gemm_dispatch.c kernels/cpu/conv.c \
           kernels/cpu/conv_tiles_find.c \
           kernels/cpu/relu.c kernels/cpu/maxpool.c kernels/cpu/batchnorm.c \
           kernels/cpu/linear.c kernels/cpu/softmax_xent.c kernels/cpu/sgd.c kernels/cpu/input.c \
           kernels/cpu/covariance.c kernels/cpu/bf16_act.c \
           model/net.c model/nets.c model/model.c model/batches.c model/config.c model/evaluate.c \
           model/whiten.c io/json.c io/safetensors.c io/checkpoint.c io/metrics.c io/tensorboard.c \
           app/options.c app/device.c
# patch_covariance and the input's scale and shift must give the CUDA twins' bits: no product
# contracted into an FMA, whatever the target (kernels/cpu/covariance.c, kernels/cpu/input.c;
# with -march=x86-64-v3 gcc fuses input.c's v * scale + shift otherwise).
$(BUILD)/kernels/cpu/covariance.o $(BUILD)/kernels/cpu/input.o: CFLAGS += -ffp-contract=off
# These are compiled once per ISA (see kernels/cpu/isa.h); the path is chosen at run time.
ISA_SRC := kernels/cpu/gemm.c kernels/cpu/winograd.c kernels/cpu/gelu.c kernels/cpu/small_conv.c
ISAS    := generic avx2 avx512
march_generic := -march=x86-64 -mtune=generic
march_avx2    := -march=x86-64-v3 -mtune=generic
march_avx512  := -march=x86-64-v4 -mtune=generic
# The bf16 GEMM: a generic build (the same packing, dot products emulated exactly in float: the
# tests' reference), an AVX2 one (the same sums on float FMA: bf16 on CPUs without the
# instructions) and an AVX512_BF16 one.
BF16_ISA_SRC := kernels/cpu/gemm_bf16.c
BF16_ISAS    := generic avx2 avx512bf16
march_avx512bf16 := -march=x86-64-v4 -mavx512bf16 -mtune=generic
# The AMX-BF16 tile GEMM and direct convolutions: the tile instructions, and a generic build that
# carries out the same tile operations in plain C on the same operands (the tests' check of the
# blocking; kernels/cpu/tiles.h), and amxcost: amx's code without the tile instructions, which
# times the rest on AVX512_BF16 CPUs without AMX (the bf16 path amx-cost).
AMX_ISA_SRC := kernels/cpu/gemm_amx.c kernels/cpu/conv_tiles.c
AMX_ISAS    := generic amx amxcost
march_amx   := -march=x86-64-v4 -mavx512bf16 -mamx-tile -mamx-bf16 -mtune=generic
march_amxcost := $(march_avx512bf16)

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(foreach i,$(ISAS),$(ISA_SRC:%.c=$(BUILD)/%.$(i).o)) \
            $(foreach i,$(BF16_ISAS),$(BF16_ISA_SRC:%.c=$(BUILD)/%.$(i).o)) \
            $(foreach i,$(AMX_ISAS),$(AMX_ISA_SRC:%.c=$(BUILD)/%.$(i).o))

PLUGIN_DIR := $(BUILD)/lib/cifar10-dp
ifeq ($(USE_CUDA),1)
CUDA_SRC  := kernels/cuda/backend.cu kernels/cuda/elementwise.cu kernels/cuda/maxpool.cu \
             kernels/cuda/reduce.cu kernels/cuda/batchnorm.cu kernels/cuda/softmax_xent.cu \
             kernels/cuda/linear.cu kernels/cuda/conv.cu kernels/cuda/layout.cu \
             kernels/cuda/covariance.cu kernels/cuda/filters.cu
NEWEST_ARCH := $(lastword $(CUDA_ARCH))
GENCODE   := $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a),code=sm_$(a)) \
             -gencode arch=compute_$(NEWEST_ARCH),code=compute_$(NEWEST_ARCH)
NVCCFLAGS ?= -O3 -g
NVCCFLAGS += -std=c++17 $(GENCODE) -I$(CUDNN_INC) -DCUDA_SYNC=$(CUDA_SYNC) -MMD -MP \
             -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra,-Werror --Werror all-warnings
# The backend is a plugin (kernels/cuda/plugin.h): the programs carry only its loader and open
# it where an NVIDIA driver is installed, so CPU runs never load cuDNN and cuBLAS.
CUDA_PLUGIN := $(PLUGIN_DIR)/libcifar10-cuda.so
LIB_OBJ   += $(BUILD)/kernels/cuda_load.o
ifeq ($(CUDA_EMU),1)
CFLAGS    += -DCIFAR10_CUDA=1 -DCIFAR10_CUDA_EMU=1
else
CFLAGS    += -DCIFAR10_CUDA=1 -I$(CUDA_HOME)/include
endif
# What the plugin takes from the program that opens it.
LDLIBS    += -ldl $(foreach s,err_set err_die err_progname err_check_failed kernels_check kernels_conv_out,-Wl,--export-dynamic-symbol=$(s))
# The plugin: cuDNN and cuBLAS are shared libraries found through its run path; the CUDA runtime
# is linked statically (it loads the driver, libcuda, when a GPU is used).
CUDA_LIBS := -L$(CUDNN_LIB) -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDNN_LIB) -Wl,-rpath,$(CUDA_HOME)/lib64 \
             -lcudnn -lcublas -lcudart_static -lstdc++ -ldl -lrt -lpthread
ifeq ($(CUDA_EMU),1)
# The emulation: each .cu rewritten by tests/cudaemu/rewrite.sed (launches, dynamic shared
# memory) and compiled as C++ against tests/cudaemu's stand-ins for the CUDA headers.
CUDA_LIBS := -lstdc++ -lpthread -ldl
# Its cuDNN runs the convolutions on the program's CPU backend.
LDLIBS    += -Wl,--export-dynamic-symbol=kernels_cpu
CUDA_OBJ  := $(CUDA_SRC:%.cu=$(BUILD)/%.emu.o) $(BUILD)/tests/cudaemu/cudaemu.o
CUDA_HDR  := $(wildcard kernels/cuda/*.h)
EMU_CXXFLAGS := -O2 -g -std=c++17 -fPIC -fvisibility=hidden -Wall -Wextra -Werror -Wno-unused-parameter -Wno-maybe-uninitialized -Wno-unknown-pragmas \
                -I tests/cudaemu/include -DCUDA_SYNC=$(CUDA_SYNC) -MMD -MP
# With SANITIZE=1 the backend's sources and the emulation are under ASan and UBSan too: a
# kernel's access outside its buffers (device memory is exact heap blocks here) or a misaligned
# vector access stops the run, naming the kernel and line.
ifeq ($(SANITIZE),1)
EMU_CXXFLAGS += -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
CUDA_LIBS    += -fsanitize=address,undefined
endif
else
CUDA_OBJ  := $(CUDA_SRC:%.cu=$(BUILD)/%.o)
endif
endif
LIB      := $(BUILD)/libcifar10.a
BINS     := $(BUILD)/cifar10-train $(BUILD)/cifar10-test $(BUILD)/cifar10-bench $(BUILD)/cifar10-predict
TEST_BINS := $(BUILD)/tests/test_ops $(BUILD)/tests/test_model $(BUILD)/tests/test_data $(BUILD)/tests/test_checkpoint \
             $(BUILD)/tests/test_dist $(BUILD)/tests/dump_steps $(BUILD)/tests/make_synthetic \
             $(BUILD)/tests/test_cuda $(BUILD)/tests/test_staged $(BUILD)/tests/test_whiten $(BUILD)/tests/image_dump \
             $(BUILD)/tests/allreduce_time $(BUILD)/tests/gemm_time $(BUILD)/tests/winograd_time \
             $(BUILD)/tests/tiles_time

.PHONY: all test check test-build bench clean install sanitize sanitize-build fuzz fuzz-build emu emu-build format
# The plugin's directory (kernels/cuda_load.c looks in lib/cifar10-dp beside or above the
# program) exists in CPU builds too, empty, so the Dockerfile copies it in either flavour.
all: $(BINS) $(CUDA_PLUGIN) | $(PLUGIN_DIR)
$(PLUGIN_DIR):
	@mkdir -p $@

# The build's settings, which every object depends on: the file is rewritten only when they
# change, so `make` after `make CUDA=0` (or another CUDA_ARCH, SANITIZE, CFLAGS) in the same
# BUILD compiles again instead of linking objects built for other settings.
BUILD_FLAGS := $(BUILD)/build-flags
build_flags = $(MPICC) $(OMPI_CC) $(CFLAGS) $(LDLIBS) | CUDA $(USE_CUDA) $(CUDA_EMU) $(NVCC) $(NVCCFLAGS) | $(CXX) $(EMU_CXXFLAGS)
$(BUILD_FLAGS): FORCE
	@mkdir -p $(@D)
	@echo '$(build_flags)' | cmp -s - $@ || echo '$(build_flags)' >$@
.PHONY: FORCE
FORCE:

$(BUILD)/%.o: %.c $(BUILD_FLAGS)
	@mkdir -p $(@D)
	@echo "  CC    $<"
	$(Q)$(MPICC) $(CFLAGS) -c $< -o $@

# FILE.ISA.o from FILE.c (the shorter stem wins over the rule above).
define isa_rule
$$(BUILD)/%.$(1).o: %.c $$(BUILD_FLAGS)
	@mkdir -p $$(@D)
	@echo "  CC    $$< ($(1))"
	$$(Q)$$(MPICC) $$(CFLAGS) $$(march_$(1)) -DCPU_ISA=$(1) -c $$< -o $$@
endef
$(foreach i,$(ISAS) avx512bf16 amx amxcost,$(eval $(call isa_rule,$(i))))

$(BUILD)/%.o: %.cu $(BUILD_FLAGS)
	@mkdir -p $(@D)
	@echo "  NVCC  $<"
	$(Q)$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/%.emu.cc: %.cu tests/cudaemu/rewrite.sed
	@mkdir -p $(@D)
	$(Q)sed -f tests/cudaemu/rewrite.sed $< > $@

$(CUDA_HDR:%=$(BUILD)/%): $(BUILD)/%.h: %.h tests/cudaemu/rewrite.sed
	@mkdir -p $(@D)
	$(Q)sed -f tests/cudaemu/rewrite.sed $< > $@

$(BUILD)/%.emu.o: $(BUILD)/%.emu.cc tests/cudaemu/cudaemu.h $(CUDA_HDR:%=$(BUILD)/%) $(BUILD_FLAGS)
	@echo "  CXX   $(<:$(BUILD)/%.emu.cc=%.cu) (cudaemu)"
	$(Q)$(CXX) $(EMU_CXXFLAGS) -I $(dir $(<:$(BUILD)/%=%)) -c $< -o $@

$(BUILD)/tests/cudaemu/cudaemu.o: tests/cudaemu/cudaemu.cc tests/cudaemu/cudaemu.h $(BUILD_FLAGS)
	@mkdir -p $(@D)
	@echo "  CXX   $<"
	$(Q)$(CXX) $(EMU_CXXFLAGS) -O3 -c $< -o $@

# The emulation's own test: when its streams run their work (tests/cudaemu/test_streams.cc).
$(BUILD)/tests/cudaemu/test_streams: tests/cudaemu/test_streams.cc $(BUILD)/tests/cudaemu/cudaemu.o
	@echo "  CXX   $<"
	$(Q)$(CXX) $(EMU_CXXFLAGS) -I tests/cudaemu $^ -o $@ -lpthread -ldl

$(CUDA_PLUGIN): $(CUDA_OBJ)
	@echo "  LINK  $@"
	@mkdir -p $(@D)
	$(Q)$(CC) -shared $^ -o $@ $(CUDA_LIBS)

$(LIB): $(LIB_OBJ)
	@echo "  AR    $@"
	$(Q)rm -f $@ && ar rcs $@ $^

LINK = @echo "  LINK  $@"; $(MPICC) $(CFLAGS) $^ -o $@ $(LDLIBS)
$(BUILD)/cifar10-train: $(BUILD)/app/train.o $(BUILD)/app/trainer.o $(BUILD)/app/train_options.o \
                         $(BUILD)/app/train_state.o $(BUILD)/dist/dist.o $(LIB)
	$(LINK)
$(BUILD)/cifar10-bench: $(BUILD)/app/bench.o $(BUILD)/dist/dist.o $(LIB)
	$(LINK)
$(BUILD)/cifar10-test: $(BUILD)/app/test.o $(LIB)
	$(LINK)
$(BUILD)/cifar10-predict $(BUILD)/tests/image_dump $(BUILD)/tests/fuzz/fuzz_image: LDLIBS += -lpng -ljpeg
$(BUILD)/cifar10-predict: $(BUILD)/app/predict.o $(LIB)
	$(LINK)
$(BUILD)/tests/test_dist: $(BUILD)/tests/test_dist.o $(BUILD)/tests/check.o $(BUILD)/tests/test_nets.o $(BUILD)/dist/dist.o $(LIB)
	$(LINK)
$(BUILD)/tests/allreduce_time: $(BUILD)/tests/allreduce_time.o $(BUILD)/dist/dist.o $(LIB)
	$(LINK)
$(BUILD)/tests/test_staged: $(BUILD)/tests/test_staged.o $(BUILD)/tests/check.o $(BUILD)/tests/test_nets.o $(BUILD)/dist/dist.o $(LIB)
	$(LINK)
# test_nets.o: networks defined only in the tests (tests/test_nets.h).
$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/tests/check.o $(BUILD)/tests/test_nets.o $(LIB)
	$(LINK)

# The builds below use every CPU, with or without make's own -j.
NPROC := $(shell nproc 2>/dev/null || echo 2)
# The fast inner loop, under 2 minutes on 2 cores once built: every op on every backend against
# double precision, the model's steps, the command lines, and the workshop CNN's steps against
# PyTorch in float64 (tests/run.sh --check). `make test` runs these and everything else.
check: test-build
	BUILD=$(BUILD) tests/run.sh --check

# Everything tests/run.sh runs, built (scripts/coverage.sh builds so, then runs the suites).
test-build:
	$(MAKE) --no-print-directory -j$(NPROC) $(BINS) $(CUDA_PLUGIN) $(TEST_BINS)

# The binaries, the suites, then the sanitizer run, the short fuzzing and the CUDA backend on
# its CPU emulation (each its own build directory). Their builds run beside the suites at the
# lowest priority (nice 19): the suites leave a core idle at times (waits, one-rank steps, start-ups), and nice
# 19 takes only that, so the suites' time bounds see no difference. Their output is in
# $(BUILD)/side-builds.log, printed if they fail. Each suite of tests/run.sh, and each of the
# last three runs, has a time limit (tests/limit.sh).
test: test-build
	nice -n 19 $(MAKE) --no-print-directory sanitize-build fuzz-build emu-build >$(BUILD)/side-builds.log 2>&1 & side=$$!; \
	  BUILD=$(BUILD) tests/run.sh; rc=$$?; \
	  wait $$side || { cat $(BUILD)/side-builds.log; echo "make test: the sanitizer, fuzzing or emulation build failed"; exit 1; }; \
	  exit $$rc
	$(MAKE) --no-print-directory sanitize
	$(MAKE) --no-print-directory fuzz
	$(MAKE) --no-print-directory emu

# The CUDA backend on its CPU emulation (tests/cudaemu.sh), built with CUDA=emu into build-emu.
EMU_BINS := cifar10-train cifar10-test cifar10-bench tests/make_synthetic tests/test_ops tests/test_cuda tests/test_dist \
            tests/cudaemu/test_streams lib/cifar10-dp/libcifar10-cuda.so
emu: emu-build
	BUILD=build-emu tests/limit.sh 1800 tests/cudaemu.sh
emu-build:
	$(MAKE) -j$(NPROC) BUILD=build-emu CUDA=emu $(EMU_BINS:%=build-emu/%)

# The C tests and a 2-rank training run under ASan + UBSan (tests/sanitize.sh), in their own
# build directory, with the CUDA backend on its emulation; only what tests/sanitize.sh runs is
# built.
SANITIZE_BINS := cifar10-train cifar10-test cifar10-bench tests/make_synthetic tests/test_model tests/test_data \
                 tests/test_checkpoint tests/test_whiten tests/test_ops tests/test_staged tests/test_dist \
                 lib/cifar10-dp/libcifar10-cuda.so
sanitize: sanitize-build
	BUILD=build-sanitize tests/limit.sh 1800 tests/sanitize.sh
sanitize-build:
	$(MAKE) -j$(NPROC) BUILD=build-sanitize SANITIZE=1 CUDA=emu $(SANITIZE_BINS:%=build-sanitize/%)

# libFuzzer targets (tests/fuzz/), built by clang with ASan and UBSan into build-fuzz; tests/fuzz.sh
# runs each from its seed corpus (FUZZ_SECONDS each, default 30).
FUZZ_TARGETS := fuzz_cifar fuzz_checkpoint fuzz_config fuzz_image
fuzz: fuzz-build
	BUILD=build-fuzz tests/limit.sh 1800 tests/fuzz.sh
fuzz-build:
	OMPI_CC=clang $(MAKE) -j$(NPROC) BUILD=build-fuzz FUZZ=1 $(FUZZ_TARGETS:%=build-fuzz/tests/fuzz/%)
$(BUILD)/tests/fuzz/%: $(BUILD)/tests/fuzz/%.o $(BUILD)/tests/fuzz/fuzz_io.o $(BUILD)/tests/test_nets.o $(LIB)
	@echo "  LINK  $@"; $(MPICC) $(CFLAGS) -fsanitize=fuzzer $^ -o $@ $(LDLIBS)

# Throughput benchmark: ours (1 rank x all threads, all ranks x 1 thread) and PyTorch.
bench: $(BINS)
	BUILD=$(BUILD) scripts/bench.sh

# Keep the test objects around (they are otherwise intermediate and deleted).
.SECONDARY:

install: $(BINS) $(CUDA_PLUGIN)
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(BINS) scripts/get-data.sh $(DESTDIR)$(PREFIX)/bin/
ifeq ($(USE_CUDA),1)
	install -d $(DESTDIR)$(PREFIX)/lib/cifar10-dp
	install -m 755 $(CUDA_PLUGIN) $(DESTDIR)$(PREFIX)/lib/cifar10-dp/
endif

clean:
	rm -rf $(BUILD)

# Lays out every C, header and CUDA file as .clang-format says (clang-format 14, as
# tests/test_lint.sh checks).
CLANG_FORMAT ?= $(shell command -v clang-format-14 || command -v clang-format)
format:
	git ls-files '*.c' '*.h' '*.cu' | xargs $(CLANG_FORMAT) -i

# Dependency files are only ever written by the compiler: no rule may try to remake them (make's
# built-in "%: %.o" would otherwise turn gemm.avx2.d into a target of the %.avx2.o rule).
MAKEFLAGS += --no-builtin-rules
.SUFFIXES:
%.d: ;
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
