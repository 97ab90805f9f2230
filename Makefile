# ds: one build for the libcommon library, the four tools, the data generators and the tests.
#   make            build everything into build/ and bin/
#   make demo       install what is missing, then Fashion-MNIST -> trained, evaluated network
#   make test       install what is missing, then the quick tier of the suite (the normal build;
#                   long tests left out and counted)
#   make check      install what is missing, then every test: both builds, the long tests, the
#                   sanitizer pass, the CUDA tests on the emulated device (CI runs this)
#   make test-san   the sanitizer pass alone (quick tier)
#   make compare RUNS="a b"  runs side by side: a table and compare.png
#   make bench      build the benchmarks (make bench-build) and run bench/run.sh (BENCH="ops ...")
#   make bench-peers  ds against PyTorch 2.x, DALI, FFCV, Pillow-SIMD side by side (bench/PEERS.md)
#   make SAN=1      AddressSanitizer + UndefinedBehaviorSanitizer build (objects in build-san/)
#   make CUDA=0     never look for nvcc
#   make emu        the tools and the CUDA tests on the emulated CUDA device (tests/emu): the
#                   CUDA backend's own code compiled for the host against the toolkit's
#                   headers, the runtime, cuDNN, cuBLAS and NCCL emulated (bin-emu/, build-emu/;
#                   EMU_SAN=address or thread: bin-emu-asan/, bin-emu-tsan/)
#   make check-emu  every CUDA test on the emulated device (make check includes it)
# Probes are deferred variables, expanded only by the make that compiles, so `make deps`
# can install the libraries before anything looks for them.

CC       ?= cc
comma    := ,
NPROC    := $(shell nproc 2>/dev/null || echo 2)
SAN      ?= 0
BUILD    := $(if $(filter 1,$(SAN)),build-san,build)
BIN      := $(if $(filter 1,$(SAN)),bin-san,bin)
VERSION  := 0.1.0

PKGS_C   = hdf5 libturbojpeg libpng libxxhash
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS_C) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS_C) 2>/dev/null)

# MPI: the tools link it when mpicc is there; without it they are a world of one.
MPICC    := $(shell command -v mpicc 2>/dev/null)
MPI      ?= $(if $(MPICC),1,0)
MPI_CFLAGS = $(if $(filter 1,$(MPI)),$(shell mpicc --showme:compile) -DDS_HAVE_MPI=1)
MPI_LIBS   = $(if $(filter 1,$(MPI)),$(shell mpicc --showme:link))

# CUDA: auto-detected from nvcc; CUDA=0 forces a CPU-only build. The sanitizer build is CPU-only
# (ASan's shadow memory and the CUDA runtime's mappings collide unless ASan is told to give way).
# nvcc on PATH may be a wrapper script, so the toolkit's home is asked of nvcc itself (its
# --dryrun names the directory it really runs from); CUDA_HOME, in the environment or on the
# command line, overrides that. The GPU build also needs the headers and libraries of the CUDA
# runtime, cuBLAS (and cuBLASLt), cuDNN and NCCL. Each is looked for, header and library in the
# same place, in: CUDNN_HOME or NCCL_HOME (when set, for those two), CUDA_HOME, the
# distribution's layout (/usr/include, /usr/lib/<multiarch>: cuDNN and NCCL), and the pip
# wheels' nvidia/<part>/{include,lib} in $VIRTUAL_ENV and python3's site-packages (PYTHON_SITES). A library
# may be only its versioned file (wheels ship libcudnn.so.9 alone): it is linked by file name.
# Without all of them the build is CPU-only and the config line names what is missing; with
# them it names where each was found.
NVCC     := $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
ifeq ($(origin CUDA_HOME),undefined)
CUDA_HOME := $(if $(NVCC),$(patsubst %/bin,%,$(shell $(NVCC) --dryrun -x cu /dev/null 2>&1 | sed -n 's/^\#\$$ _HERE_=//p' | head -n1)))
endif
MULTIARCH   := $(if $(NVCC),$(shell $(CC) -print-multiarch 2>/dev/null))
PYTHON_SITES ?= $(if $(NVCC),$(shell python3 -c 'import site; print(*site.getsitepackages(), site.getusersitepackages())' 2>/dev/null))
CUDA_WHEELS := $(if $(NVCC),$(sort $(wildcard $(addsuffix /nvidia,$(if $(VIRTUAL_ENV),$(wildcard $(VIRTUAL_ENV)/lib/python3*/site-packages)) $(PYTHON_SITES)))))
CUDA_PARTS   := cudart cublas cublasLt cudnn nccl
cudart_H     := cuda_runtime_api.h
cublas_H     := cublas_v2.h
cublasLt_H   := cublasLt.h
cudnn_H      := cudnn.h
nccl_H       := nccl.h
cudart_HOMES   = $(CUDA_HOME) $(CUDA_WHEELS:%=%/cuda_runtime) $(CUDA_WHEELS:%=%/cu13) $(CUDA_WHEELS:%=%/cu12)
cublas_HOMES   = $(CUDA_HOME) $(CUDA_WHEELS:%=%/cublas) $(CUDA_WHEELS:%=%/cu13) $(CUDA_WHEELS:%=%/cu12)
cublasLt_HOMES = $(cublas_HOMES)
cudnn_HOMES    = $(CUDNN_HOME) $(CUDA_HOME) /usr $(CUDA_WHEELS:%=%/cudnn)
nccl_HOMES     = $(NCCL_HOME) $(CUDA_HOME) /usr $(CUDA_WHEELS:%=%/nccl)
# The include and library directories of a home ($(1)); /usr means the distribution's layout.
cuda_incdirs = $(if $(filter /usr,$(1)),/usr/include $(MULTIARCH:%=/usr/include/%),$(1)/include)
cuda_libdirs = $(if $(filter /usr,$(1)),$(MULTIARCH:%=/usr/lib/%) /usr/lib64 /usr/lib,$(1)/lib64 $(1)/lib $(MULTIARCH:%=$(1)/lib/%))
# Header $(1) in home $(2); library lib$(1).so, else its first versioned file, in home $(2).
cuda_inc_in  = $(firstword $(foreach d,$(call cuda_incdirs,$(2)),$(wildcard $(d)/$(1))))
cuda_lib_in  = $(firstword $(foreach d,$(call cuda_libdirs,$(2)),$(firstword $(wildcard $(d)/lib$(1).so) $(sort $(wildcard $(d)/lib$(1).so.[0-9]*)))))
# The first home of part $(1) that holds both its header and its library.
cuda_home_of = $(firstword $(foreach h,$($(1)_HOMES),$(if $(and $(call cuda_inc_in,$($(1)_H),$(h)),$(call cuda_lib_in,$(1),$(h))),$(h))))
$(foreach p,$(CUDA_PARTS),$(eval CUDA_AT_$(p) := $(if $(NVCC),$(call cuda_home_of,$(p))))\
  $(eval CUDA_INC_$(p) := $(if $(CUDA_AT_$(p)),$(call cuda_inc_in,$($(p)_H),$(CUDA_AT_$(p)))))\
  $(eval CUDA_LIB_$(p) := $(if $(CUDA_AT_$(p)),$(call cuda_lib_in,$(p),$(CUDA_AT_$(p))))))
CUDA_MISSING := $(if $(NVCC),$(strip $(foreach p,$(CUDA_PARTS),$(if $(CUDA_AT_$(p)),,$($(p)_H))) \
                                     $(foreach p,$(CUDA_PARTS),$(if $(CUDA_AT_$(p)),,lib$(p).so))))
CUDA_SEARCHED = $(sort $(foreach p,$(CUDA_PARTS),$(if $(CUDA_AT_$(p)),,$(filter-out $(CUDA_HOME),$($(p)_HOMES)))))
CUDA_FOUND    = $(foreach p,$(CUDA_PARTS),$(p) $(CUDA_LIB_$(p)))
# EMU=1 (set by `make emu`): the CUDA sources compiled by the host's C++ compiler against the
# toolkit's headers, with the emulated device (tests/emu/*.cc) in libcommon.a in place of
# NVIDIA's libraries; only the headers are needed. -fno-strict-aliasing there: the vector
# bodies' device branch reads float and bf16 tensors as uint4, as device code may.
EMU      ?= 0
EMU_SAN  ?=
ifeq ($(EMU),1)
CUDA     := $(if $(and $(CUDA_INC_cudart),$(CUDA_INC_cudnn),$(CUDA_INC_cublas),$(CUDA_INC_nccl)),1,0)
endif
CUDA     ?= $(if $(filter 1,$(SAN)),0,$(if $(and $(NVCC),$(CUDA_HOME),$(if $(CUDA_MISSING),,ok)),1,0))
CUDA_SRCS := $(if $(filter 1,$(CUDA)),$(wildcard libcommon/*.cu libcommon/backend/*.cu))
# -I and -L for every directory found, but the compiler's own; run paths for the libraries.
CUDA_SYSDIRS := /usr/include/ $(MULTIARCH:%=/usr/include/%/) $(MULTIARCH:%=/usr/lib/%/) /usr/lib64/ /usr/lib/
CUDA_INCS   = $(addprefix -I,$(patsubst %/,%,$(filter-out $(CUDA_SYSDIRS),$(sort $(foreach p,$(CUDA_PARTS),$(dir $(CUDA_INC_$(p))))))))
CUDA_LIBDIRS = $(patsubst %/,%,$(filter-out $(CUDA_SYSDIRS),$(sort $(foreach p,$(CUDA_PARTS),$(dir $(CUDA_LIB_$(p)))))))
CUDA_CFLAGS = $(if $(CUDA_SRCS),-DDS_HAVE_CUDA=1 $(CUDA_INCS))
CUDA_LIBS   = $(if $(filter 1,$(EMU)),-lrt,$(CUDA_LIBS_REAL))
CUDA_LIBS_REAL = $(if $(CUDA_SRCS),$(foreach d,$(CUDA_LIBDIRS),-L$(d) -Wl$(comma)-rpath$(comma)$(d)) \
              $(foreach p,cudnn cublasLt cublas nccl cudart,-l:$(notdir $(CUDA_LIB_$(p)))))
# SASS for the GPUs built for, and PTX of the newest for any later GPU (the driver compiles it).
CUDA_ARCHS := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_86,code=sm_86 \
              -gencode arch=compute_89,code=sm_89 -gencode arch=compute_90,code=sm_90 \
              -gencode arch=compute_90,code=compute_90

SAN_FLAGS := -fsanitize=address -fsanitize=undefined -fno-sanitize-recover=undefined
# Portable code: the baseline instruction set of the architecture, so a binary runs on any
# CPU of it; the kernels that need AVX2 or AVX-512 carry target attributes and are chosen at
# run time (libcommon/cpu_isa.h). NATIVE=1 tunes everything else for this CPU; the results
# stay bitwise the same, as contraction of a * b + c into one fma is off everywhere (only an
# explicit fmaf fuses).
NATIVE   ?= 0
EMU_SAN_FLAGS := $(if $(EMU_SAN),-fsanitize=$(EMU_SAN) -fno-omit-frame-pointer)
OPT      := $(if $(filter 1,$(SAN)),-O1 -fno-omit-frame-pointer $(SAN_FLAGS),-O2) $(EMU_SAN_FLAGS) \
            $(if $(filter 1,$(NATIVE)),-march=native) -ffp-contract=off
SRC_CFLAGS = -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -fopenmp -Ilibcommon \
             -DDS_VERSION=\"$(VERSION)\" $(PKG_CFLAGS) $(MPI_CFLAGS) $(CUDA_CFLAGS)
CFLAGS   += $(SRC_CFLAGS) -g $(OPT) -MMD -MP
LDFLAGS  += -fopenmp $(if $(filter 1,$(SAN)),$(SAN_FLAGS)) $(EMU_SAN_FLAGS)
LDLIBS   += $(PKG_LIBS) $(MPI_LIBS) $(CUDA_LIBS) -lz -lm -lpthread
NVFLAGS  := -O3 -MMD -MP -std=c++17 $(CUDA_ARCHS) -Ilibcommon $(CUDA_INCS) -DDS_HAVE_CUDA=1 $(if $(MPI_CFLAGS),$(shell mpicc --showme:compile)) -Xcompiler -fPIC$(comma)-Wall$(comma)-Wextra

LIB_SRCS  := $(sort $(wildcard libcommon/*.c libcommon/backend/*.c))
EMU_SRCS  := $(if $(filter 1,$(EMU)),$(sort $(wildcard tests/emu/emu_*.cc)))
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/%.o) $(CUDA_SRCS:%.cu=$(BUILD)/%.o) $(EMU_SRCS:%.cc=$(BUILD)/%.o)
EMU_TEST_SRCS := $(if $(filter 1,$(EMU)),$(sort $(wildcard tests/emu/test_*.cc)))
EMU_TEST_BINS := $(EMU_TEST_SRCS:tests/emu/%.cc=$(BUILD)/emu-tests/%)
EMU_CXXFLAGS = -std=c++17 -D_GNU_SOURCE -g $(if $(EMU_SAN),-O1,-O2) $(EMU_SAN_FLAGS) -ffp-contract=off -fno-strict-aliasing -Wall -Wextra \
               -Wno-unused-parameter -Wno-deprecated-declarations -fopenmp -Ilibcommon -Itests/emu $(CUDA_INCS) \
               -DDS_HAVE_CUDA=1 -DDS_CUDA_EMULATED=1 $(MPI_CFLAGS) -MMD -MP
LIB       := $(BUILD)/libcommon.a
TOOL_SRCS := $(sort $(wildcard tools/*/ds*.c))
TOOLS     := $(foreach s,$(TOOL_SRCS),$(BIN)/$(basename $(notdir $(s))))
DATA_SRCS := $(sort $(wildcard data/*.c))
DATA_BINS := $(DATA_SRCS:data/%.c=$(BUILD)/data/%)
TEST_SRCS := $(sort $(wildcard tests/unit/*.c))
TEST_BINS := $(TEST_SRCS:tests/unit/%.c=$(BUILD)/tests/%)
DRV_SRCS  := $(sort $(wildcard tests/drivers/*.c))
DRV_BINS  := $(DRV_SRCS:tests/drivers/%.c=$(BUILD)/drivers/%)
FUZZ_SRCS := $(sort $(wildcard tests/fuzz/fuzz_*.c))
BENCH_SRCS := $(sort $(wildcard bench/*.c))
BENCH_BINS := $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)

DEPS_DEB := libhdf5-dev hdf5-tools libturbojpeg0-dev libpng-dev libxxhash-dev libopenmpi-dev \
            openmpi-bin gnuplot-nox libjpeg-turbo-progs dataset-fashion-mnist zlib1g-dev pkg-config \
            python3-torch python3-torchvision python3-h5py python3-pil python3-numpy time

FORCE:
.PHONY: all deps config test check test-san check-march demo pipeline plot compare bench bench-build fuzz clean
# The objects of tests, drivers, data generators and benchmarks are intermediate files (a
# pattern rule makes them on the way to a program); without this make deletes them after
# every build. Named one by one: a bare .SECONDARY: would make FORCE secondary too, and the
# .flags stamp below would never be remade.
.SECONDARY: $(patsubst %.c,$(BUILD)/%.o,$(TEST_SRCS) $(DRV_SRCS) $(DATA_SRCS) $(BENCH_SRCS))
.DEFAULT_GOAL := all

all: config $(LIB) $(TOOLS) $(DATA_BINS) $(TEST_BINS) $(DRV_BINS)

config:
	@echo "ds $(VERSION): MPI=$(MPI)$(if $(filter 1,$(MPI)), ($(MPICC)))  CUDA=$(CUDA)$(if $(filter 1,$(CUDA)), ($(CUDA_HOME), $(words $(CUDA_SRCS)) .cu files; $(CUDA_FOUND)),$(if $(CUDA_MISSING), (not in $(or $(CUDA_HOME),the toolkit)$(if $(CUDA_SEARCHED), nor $(CUDA_SEARCHED)): $(CUDA_MISSING))))  SAN=$(SAN)"
	@pkg-config --exists $(PKGS_C) || { echo "missing libraries ($(PKGS_C)): run 'make deps'"; exit 1; }

# Installs the Debian packages that are missing; does nothing when all are there.
deps:
	@missing=""; for p in $(DEPS_DEB); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# Objects depend on the flags they were compiled with: this file changes when the flags do
# (NATIVE=1, CUDA=0, a new library), so such a change rebuilds everything.
$(BUILD)/.flags: FORCE
	@mkdir -p $(@D); f='$(CC) $(CFLAGS) $(NVCC) $(NVFLAGS) $(EMU) $(EMU_CXXFLAGS)'; \
	[ "$$(cat $@ 2>/dev/null)" = "$$f" ] || printf '%s\n' "$$f" >$@

$(BUILD)/%.o: %.c $(BUILD)/.flags
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

ifeq ($(EMU),1)
$(BUILD)/%.o: %.cu $(BUILD)/.flags
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -x c++ -include tests/emu/emu_device.h -c $< -o $@
else
$(BUILD)/%.o: %.cu $(BUILD)/.flags
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@
endif

$(BUILD)/tests/emu/%.o: tests/emu/%.cc $(BUILD)/.flags
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -c $< -o $@

$(BUILD)/emu-tests/%: $(BUILD)/tests/emu/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(LINK)

$(LIB): $(LIB_OBJS)
	@rm -f $@
	ar rcs $@ $^

# Links one program ($<, its object) against the library; the CUDA objects need libstdc++.
LINK = $(CC) $(LDFLAGS) $< $(LIB) $(LDLIBS) $(if $(CUDA_SRCS),-lstdc++) $(EMU_SAN_FLAGS) -o $@

$(BUILD)/data/%: $(BUILD)/data/%.o $(LIB)
	$(LINK)

# Drivers: helper programs the shell and reference tests call (not tests themselves).
$(BUILD)/drivers/%: $(BUILD)/tests/drivers/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(LINK)

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(LIB)
	$(LINK)

# Benchmark drivers (bench/*.c), built only by bench-build, never by all.
$(BUILD)/bench/%: $(BUILD)/bench/%.o $(LIB)
	$(LINK)

# A tool's object lives under build/tools/<dir>/, so each tool gets its own rule.
define tool_rule
$(BIN)/$(basename $(notdir $(1))): $(BUILD)/$(1:.c=.o) $(LIB)
	@mkdir -p $(BIN)
	$$(LINK)
endef
$(foreach s,$(TOOL_SRCS),$(eval $(call tool_rule,$(s))))

# The quick tier: every test on the normal build but those marked long (tests/run.sh; its last
# line counts what it left to make check).
test: deps
	@$(MAKE) --no-print-directory -j$(NPROC) all
	@BIN=$(BIN) BUILD=$(BUILD) tests/run.sh

# Everything: the whole suite with its long tests on the normal build, then the unit and
# pipeline tests again on the sanitizer build (ASan + UBSan + LeakSanitizer), then the CUDA
# tests on the emulated device, plain and under ASan and TSan (tests/run.sh --long --san
# --emu); the last line counts every pass.
check: deps
	@$(MAKE) --no-print-directory -j$(NPROC) all
	@$(MAKE) --no-print-directory -j$(NPROC) SAN=1 all
	@$(MAKE) --no-print-directory emu
	@$(MAKE) --no-print-directory emu EMU_SAN=address
	@$(MAKE) --no-print-directory emu EMU_SAN=thread
	@BIN=$(BIN) BUILD=$(BUILD) tests/run.sh --long --san --emu

# Every C source compiled, not linked (-O0: seconds), for the x86-64 levels the CPU kernels
# come in: an intrinsic outside a function whose target attribute allows it fails on each
# level that lacks it, whatever CPU runs the build (tests/shell/test_build.sh runs this).
MARCH_LEVELS ?= x86-64 x86-64-v3 x86-64-v4
check-march:
	@for m in $(MARCH_LEVELS); do \
	  printf '%s\n' $(LIB_SRCS) $(TOOL_SRCS) $(DATA_SRCS) $(TEST_SRCS) $(DRV_SRCS) $(FUZZ_SRCS) $(BENCH_SRCS) | \
	    xargs -P$(NPROC) -I{} $(CC) $(SRC_CFLAGS) -O0 -march=$$m -c {} -o /dev/null || \
	    { echo "check-march: a source does not compile for -march=$$m"; exit 1; }; \
	  echo "check-march: every source compiles for -march=$$m"; \
	done

# The emulated CUDA device (tests/emu; docs/DESIGN.md §4): the tools, the unit tests and the
# emulator's own tests built for it (EMU=1) in build-emu/ and bin-emu/; EMU_SAN=address or
# thread the same under AddressSanitizer or ThreadSanitizer (build-emu-asan/, build-emu-tsan/).
# check-emu runs every CUDA test on it (tests/run.sh --emu-only).
EMU_DIR = build-emu$(if $(EMU_SAN),-$(if $(filter thread,$(EMU_SAN)),tsan,asan))
EMU_BIN_DIR = bin-emu$(if $(EMU_SAN),-$(if $(filter thread,$(EMU_SAN)),tsan,asan))
.PHONY: emu check-emu emu-all
emu:
	@$(MAKE) --no-print-directory -j$(NPROC) EMU=1 BUILD=$(EMU_DIR) BIN=$(EMU_BIN_DIR) emu-all
emu-all: config
	@test "$(CUDA)" = 1 || { echo "emu: needs the headers of the CUDA toolkit, cuDNN, cuBLAS and NCCL"; exit 1; }
	@$(MAKE) --no-print-directory EMU=1 $(LIB) $(TOOLS) $(DATA_BINS) $(BUILD)/tests/test_cuda_ops \
	    $(DRV_BINS) $(EMU_TEST_BINS)
	@$(MAKE) --no-print-directory EMU=1 $(BUILD)/bench/engine_bench   # bench/gpu.sh --emulated's

check-emu: deps
	@$(MAKE) --no-print-directory emu
	@$(MAKE) --no-print-directory emu EMU_SAN=address
	@$(MAKE) --no-print-directory emu EMU_SAN=thread
	@tests/run.sh --long --emu-only

# The sanitizer pass alone.
test-san: deps
	@$(MAKE) --no-print-directory -j$(NPROC) SAN=1 all
	@tests/run.sh --san-only

demo: deps
	@$(MAKE) --no-print-directory -j$(NPROC) all
	@scripts/demo.sh

pipeline: deps
	@$(MAKE) --no-print-directory -j$(NPROC) all
	@scripts/pipeline.sh

plot:
	@test -n "$(RUN)" || { echo "usage: make plot RUN=RUN_DIR"; exit 2; }
	@scripts/plot.sh "$(RUN)"

# Runs side by side: a table on stdout and the curves overlaid in $(PNG) (scripts/compare.py,
# with Debian's Python for h5py; COMPARE_ARGS=--json for the table as JSON).
PYTHON ?= /usr/bin/python3
PNG    ?= compare.png
compare:
	@test -n "$(RUNS)" || { echo 'usage: make compare RUNS="RUN_DIR RUN_DIR ..." [PNG=compare.png] [COMPARE_ARGS=--json]'; exit 2; }
	@$(PYTHON) scripts/compare.py --png "$(PNG)" $(COMPARE_ARGS) $(RUNS)

# Benchmarks build apart from the product, so none can break `make all`: bench-build makes
# what bench/run.sh runs (the tools, the data generators, the bench/*.c drivers).
bench-build: config $(LIB) $(TOOLS) $(DATA_BINS) $(BENCH_BINS)

bench:
	@$(MAKE) --no-print-directory -j$(NPROC) bench-build
	@bench/run.sh --no-build $(BENCH)

# ds against its peers side by side (bench/PEERS.md): bench/peers_run.sh sets up their
# virtual environments under build/peers/ (pinned, from PyPI; bench/peers.sh --all) and prints
# every table; PEERS_QUICK=1 for the smallest setting. No other target depends on it.
.PHONY: bench-peers
bench-peers:
	@$(MAKE) --no-print-directory -j$(NPROC) bench-build
	@bench/peers_run.sh

fuzz:
	@scripts/fuzz.sh $(FUZZ_SRCS)

clean:
	rm -rf build build-san bin bin-san build-emu* bin-emu*

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# ---- GPU bundle: a folder that runs on a GPU machine without building anything there ----
# The tools, the data generator, the GPU op test, the engine benchmark and the cuDNN fusion
# probe built for the
# bundle's GPUs (sm_89, sm_90 and PTX for later ones) in their own build directory, then
# copied with every library they load except the C/C++ runtime and CUDA's, which the
# bundle's env.sh finds on the machine (scripts/gpu-bundle.sh; bench/gpu.sh runs from it;
# tests/shell/test_bundle.sh checks it needs nothing of Debian's packages).
GPU_BUNDLE       ?= build/gpu-bundle
GPU_BUNDLE_BUILD ?= build/gpu-bundle-obj
GPU_BUNDLE_ARCHS ?= -gencode arch=compute_89,code=sm_89 -gencode arch=compute_90,code=sm_90 \
                    -gencode arch=compute_90,code=compute_90
GPU_BUNDLE_PROGS := $(addprefix bin/,$(notdir $(TOOLS))) data/synth tests/test_cuda_ops bench/engine_bench \
                    bench/cudnn_fusion_probe
DEPS_DEB += patchelf
.PHONY: gpu-bundle
gpu-bundle:
	@test "$(CUDA)" = 1 && test "$(MPI)" = 1 || { echo "gpu-bundle: needs the CUDA and MPI build (CUDA=$(CUDA) MPI=$(MPI)$(if $(CUDA_MISSING),; missing: $(CUDA_MISSING)))"; exit 1; }
	@$(MAKE) --no-print-directory -j$(NPROC) BUILD=$(GPU_BUNDLE_BUILD) BIN=$(GPU_BUNDLE_BUILD)/bin \
	    CUDA_ARCHS='$(GPU_BUNDLE_ARCHS)' config $(addprefix $(GPU_BUNDLE_BUILD)/,$(GPU_BUNDLE_PROGS))
	@if [ -f $(GPU_BUNDLE)/env.sh ] && [ -z "$$(find $(addprefix $(GPU_BUNDLE_BUILD)/,$(GPU_BUNDLE_PROGS)) \
	    scripts/gpu-bundle.sh scripts/gpu-bundle-env.sh -newer $(GPU_BUNDLE)/env.sh)" ]; then \
	  echo "gpu-bundle: $(GPU_BUNDLE) is up to date ($$(du -sm --apparent-size $(GPU_BUNDLE) | cut -f1) MiB)"; \
	else scripts/gpu-bundle.sh $(GPU_BUNDLE_BUILD) $(GPU_BUNDLE); fi
