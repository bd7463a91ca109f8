# apf: one non-recursive Makefile (docs/design.md section 1).
#
#   make            build/apf and build/libapf.a
#   make deps       install the Debian packages apf needs (apt-get, when missing)
#   make demo       deps + build + the main job on the built-in default
#   make test       deps + build + the whole suite; last line "N passed, N failed"
#   make check      the suite under AddressSanitizer + UBSan + LeakSanitizer
#   make bench      benchmarks; each figure also as "RESULT <bench> <metric> <value>"
#   make fuzz       libFuzzer targets for every parser (clang)
#   make install    binary, libapf.a, public headers, pkg-config file, workloads,
#                   man pages and bash completion
#   make man        $(BUILD)/man/apf*.1; make completion: $(BUILD)/completion/apf
#   make layout-report  what an auditor must read (verify/README), in lines
#   make manifests  signed example entries of the baselines
#
# Sources are found by wildcard, so a new file under pkg/<concept>/ or
# cmd/apf/ needs no edit here. pkg/nn/cuda/ is the CUDA plugin (see below),
# built when nvcc is found.

BUILD   ?= build
PREFIX  ?= /usr/local
CC      ?= cc
PYTHON  ?= /usr/bin/python3
OPT     ?= -O2
SAN     ?=

CPPFLAGS_APF := -D_GNU_SOURCE -Ipkg -Iinclude -I. -DAPF_SOURCE_DIR='"$(CURDIR)"'
CFLAGS_APF   := -std=c17 $(OPT) -g -fPIC -pthread -Wall -Wextra -Werror -MMD -MP
LDFLAGS_APF  := -pthread
# No -lopenblas: apf computes nothing with OpenBLAS and opens it only to
# describe it (pkg/sysinfo/env.c); the benches that time it against apf
# link it (below).
LIBS         := -larchive -lzstd -lcrypto -lgit2 -linih -ljansson \
                -lseccomp -lelf -lz -lm -ldl

ifeq ($(SAN),1)
CFLAGS_APF  += -fsanitize=address,undefined -fno-omit-frame-pointer \
               -fno-sanitize-recover=all
LDFLAGS_APF += -fsanitize=address,undefined
endif

# The CUDA backend is a plugin, $(BUILD)/lib/apf-cuda.so, that apf dlopens
# at run time (pkg/nn/cuda_loader.c): libapf.a and apf never link CUDA, so one
# binary runs on machines with and without it. Built from pkg/nn/cuda/*.cu
# when nvcc is found and APF_NO_CUDA is not 1.
NVCC := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
ifneq ($(NVCC),)
ifneq ($(APF_NO_CUDA),1)
CU_SRC := $(wildcard pkg/nn/cuda/*.cu)
CU_C_SRC := $(wildcard pkg/nn/cuda/*.c)
endif
endif
CUDA_PLUGIN := $(if $(CU_SRC),$(BUILD)/lib/apf-cuda.so)
GPU_LAYERS := $(BUILD)/tests/gpu/layers
CU_OBJ := $(CU_SRC:%.cu=$(BUILD)/obj/%.o) $(CU_C_SRC:%.c=$(BUILD)/obj/%.o)
NVCC_FLAGS := -O3 -std=c++17 -Ipkg -Iinclude -D_GNU_SOURCE --fmad=false \
              -Xcompiler -Wall,-Wextra,-Werror,-fPIC,-fvisibility=hidden \
              -Werror all-warnings \
              -gencode arch=compute_80,code=sm_80 \
              -gencode arch=compute_90,code=sm_90
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Xlinker -rpath=$(CUDA_HOME)/lib64 \
             -lcublas -lcudart

LIB_SRC  := $(filter-out pkg/nn/cuda/%,\
            $(wildcard pkg/*/*.c pkg/*/*/*.c workloads/*/*.c verify/*.c))
CMD_SRC  := $(wildcard cmd/apf/*.c)
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_LIB := $(wildcard tests/unit/lib/*.c)
BENCH_SRC:= $(wildcard bench/*/*.c)
HELPER_SRC := $(wildcard tests/helpers/*.c)
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/version.o
CMD_OBJ  := $(CMD_SRC:%.c=$(BUILD)/obj/%.o)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
UNIT_LIB_OBJ := $(UNIT_LIB:%.c=$(BUILD)/obj/%.o)
BENCH_BIN:= $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))
HELPER_BIN := $(HELPER_SRC:tests/helpers/%.c=$(BUILD)/tests/helpers/%)
DATAGEN     := $(BUILD)/datagen/clicks
CLICKS_DATA := datasets/clicks/test.tab
TEXTGEN     := $(BUILD)/datagen/text
TEXT_DATA   := datasets/fortunes/test.tab

.PHONY: all deps demo test check bench fuzz install manifests clean unit-tests \
        layout-tests layout-report
.DEFAULT_GOAL := all

all: $(BUILD)/apf $(BUILD)/libapf.a $(CLICKS_DATA) $(TEXT_DATA) $(CUDA_PLUGIN) \
     $(if $(CUDA_PLUGIN),$(GPU_LAYERS))

# V=1 shows the full commands.
Q := $(if $(V),,@)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CPPFLAGS_APF) $(CFLAGS_APF) $(CFLAGS) -c $< -o $@

# The CPU backend without errno for the math functions: sqrtf may then be
# the vector square root (the same correctly rounded result); with errno
# to set for a negative argument each call kept a branch to libm that left
# its loop scalar (the Adam direction, sqrt, rsqrt). GCC honours this only
# on the command line, not in a pragma. Nothing in the file reads errno.
$(BUILD)/obj/pkg/nn/cpu/cpu.o: CFLAGS_APF += -fno-math-errno

# The plugin's objects: device code and its host side, both by nvcc.
CU_HDR := $(wildcard pkg/nn/cuda/*.h) pkg/nn/nn.h pkg/nn/cuda_plugin.h \
          pkg/nn/mathf.h pkg/base/base.h pkg/rng/rng.h
$(BUILD)/obj/pkg/nn/cuda/%.o: pkg/nn/cuda/%.cu $(CU_HDR)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC    $<")
	$(Q)$(NVCC) $(NVCC_FLAGS) -c $< -o $@

$(BUILD)/obj/pkg/nn/cuda/%.o: pkg/nn/cuda/%.c $(CU_HDR)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC    $<")
	$(Q)$(NVCC) $(NVCC_FLAGS) -x cu -c $< -o $@

$(CUDA_PLUGIN): $(CU_OBJ)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(NVCC) -shared -o $@ $(CU_OBJ) $(CUDA_LIBS)

# tests/gpu/layers: the CPU-against-CUDA comparison tests/gpu/run drives.
# It loads the plugin like apf does, so it links libapf alone.
$(GPU_LAYERS): tests/gpu/layers.c $(BUILD)/libapf.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  TEST    $@")
	$(Q)$(CC) $(CPPFLAGS_APF) $(CFLAGS_APF) $(CFLAGS) $(LDFLAGS_APF) -o $@ $< \
	    $(BUILD)/libapf.a $(LIBS)

# The build id names the source revision. version.c is rewritten (at parse
# time) only when the id changes, so an unchanged tree relinks nothing.
BUILD_ID := $(shell git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
$(shell mkdir -p $(BUILD)/gen; v='const char apf_build_id[] = "$(BUILD_ID)";'; \
  [ "$$(cat $(BUILD)/gen/version.c 2>/dev/null)" = "$$v" ] || echo "$$v" > $(BUILD)/gen/version.c)
$(BUILD)/obj/version.o: $(BUILD)/gen/version.c
	$(Q)$(CC) $(CFLAGS_APF) $(CFLAGS) -c $< -o $@

# libapf.a holds one relocatable object per source folder (ld -r of the
# folder's objects: pkg/runner's are pkg.runner.o), in which the functions
# a package's internal header marks APF_INTERNAL (base/base.h) are made
# local (objcopy --localize-hidden): the package's files share them, and
# nothing outside it - another package, cmd/apf, whoever links the
# installed library - can call them. What it exports is pkg/libapf.exports,
# and tests/layout holds it to that list (scripts/exported-symbols.py).
LIB_DIRS    := $(sort $(patsubst %/,%,$(dir $(LIB_SRC))))
lib_pkg_obj  = $(BUILD)/pkgobj/$(subst /,.,$(1)).o
LIB_PKG_OBJ := $(foreach d,$(LIB_DIRS),$(call lib_pkg_obj,$(d)))

define lib_pkg_rule
$(call lib_pkg_obj,$(1)): $(foreach o,$(LIB_OBJ),$(if $(filter $(BUILD)/obj/$(1)/,$(dir $(o))),$(o)))
	@mkdir -p $$(dir $$@)
	@$$(if $$(Q),echo "  LD -r   $$@")
	$$(Q)$$(LD) -r -o $$@.tmp $$^ && objcopy --localize-hidden $$@.tmp $$@ \
	    && rm -f $$@.tmp
endef
$(foreach d,$(LIB_DIRS),$(eval $(call lib_pkg_rule,$(d))))

$(BUILD)/libapf.a: $(LIB_PKG_OBJ) $(BUILD)/obj/version.o
	@rm -f $@
	@$(if $(Q),echo "  AR      $@")
	$(Q)ar rcs $@ $^

$(BUILD)/apf: $(CMD_OBJ) $(BUILD)/libapf.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(LDFLAGS_APF) $(LDFLAGS) -o $@ $(CMD_OBJ) $(BUILD)/libapf.a $(LIBS)

$(BUILD)/tests/%: tests/unit/%.c $(UNIT_LIB_OBJ) $(BUILD)/libapf.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  TEST    $@")
	$(Q)$(CC) $(CPPFLAGS_APF) -Itests/unit/lib $(CFLAGS_APF) $(CFLAGS) \
	    $(LDFLAGS_APF) -o $@ $< $(UNIT_LIB_OBJ) $(BUILD)/libapf.a $(LIBS) -lcmocka

$(BUILD)/bench/gemm/gemm $(BUILD)/bench/train_step/train_step: LIBS += -lopenblas
$(BUILD)/bench/%: bench/%.c $(BUILD)/libapf.a
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CPPFLAGS_APF) $(CFLAGS_APF) $(CFLAGS) $(LDFLAGS_APF) -o $@ $< \
	    $(BUILD)/libapf.a $(LIBS)

# Programs the unit tests run inside the sandbox (tests/helpers/*.c). Never
# sanitized, not even by make check: inside the sandbox AddressSanitizer
# cannot reserve its shadow memory under RLIMIT_AS ("ReserveShadowMemoryRange
# failed"), and LeakSanitizer's exit-time check clones a tracer that reads
# /proc/<parent>/task and ptrace()s the threads, which the filter stops as
# faults. The code under test (libapf, the test binaries) is sanitized.
$(BUILD)/tests/helpers/%: tests/helpers/%.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  HELPER  $@")
	$(Q)$(CC) -std=c17 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Werror -pthread \
	    -o $@ $<

# The libFuzzer targets without libFuzzer (tests/fuzz/replay.c's main):
# make test runs each over its committed seeds and reproducers
# (tests/e2e/test_fuzz_corpus.py), sanitized in make check.
FUZZ_REPLAY := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/tests/fuzz/%)
$(BUILD)/tests/fuzz/%: tests/fuzz/%.c tests/fuzz/replay.c $(BUILD)/libapf.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  FUZZ    $@")
	$(Q)$(CC) $(CPPFLAGS_APF) $(CFLAGS_APF) -Wno-unused-function $(CFLAGS) \
	    $(LDFLAGS_APF) -o $@ $< tests/fuzz/replay.c $(BUILD)/libapf.a $(LIBS)

unit-tests: $(UNIT_BIN) $(HELPER_BIN) $(FUZZ_REPLAY)

# The synthetic click log of workloads/clicks_dlrm: datagen/clicks.c writes
# it (the same bytes on every machine; workload.ini pins its digest) into
# datasets/clicks/, outside the workload's directory, which a trial sees.
$(DATAGEN): datagen/clicks.c $(BUILD)/libapf.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  DATAGEN $@")
	$(Q)$(CC) $(CPPFLAGS_APF) $(CFLAGS_APF) $(CFLAGS) $(LDFLAGS_APF) -o $@ $< \
	    $(BUILD)/libapf.a $(LIBS)
$(CLICKS_DATA): datagen/clicks.c | $(DATAGEN)
	@$(if $(Q),echo "  GEN     datasets/clicks")
	@mkdir -p datasets
	$(Q)$(DATAGEN) datasets/clicks

# The byte-level corpus of workloads/text_lm: datagen/text.c cuts Debian's
# fortunes package into documents, splits them by a hash of their text and
# writes token windows into datasets/fortunes/ (workload.ini pins the digest).
$(TEXTGEN): datagen/text.c $(BUILD)/libapf.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  DATAGEN $@")
	$(Q)$(CC) $(CPPFLAGS_APF) $(CFLAGS_APF) $(CFLAGS) $(LDFLAGS_APF) -o $@ $< \
	    $(BUILD)/libapf.a $(LIBS)
$(TEXT_DATA): datagen/text.c | $(TEXTGEN)
	@$(if $(Q),echo "  GEN     datasets/fortunes")
	@mkdir -p datasets
	$(Q)$(TEXTGEN) datasets/fortunes

# The verifier's link check (tests/layout/test_layout.py, verify/README):
# libapf-verify.a holds verify/ and every package but the runner (the
# operator's supervisor) and the trial (the untrusted process), and the
# workloads; verify_only calls verify.h's API and links against it alone, so
# a verifier object that reaches pkg/runner or pkg/trial leaves a symbol
# undefined. A thin archive (ar T) keeps each member's path, so the link map
# tells the two workloads/*/model.o apart. The target is the link's outcome,
# not the link: a failure is reported by the test, with the linker's
# message, instead of stopping make test before anything has run.
#
# layout_link: links $(LAYOUT)/<name> from the rule's object against its
# archive (the first and second prerequisites), with a link map, into
# <name>.link: the linker's output and its exit status.
define layout_link
@mkdir -p $(dir $@)
@$(if $(Q),echo "  LINK    $(@:.link=)")
$(Q)rm -f $(@:.link=) $(@:.link=.map); \
  $(CC) $(LDFLAGS_APF) $(LDFLAGS) -o $(@:.link=) $< $(word 2,$^) $(LIBS) \
    -Wl,-Map,$(@:.link=.map) >$@.tmp 2>&1; \
  echo "exit status $$?" >>$@.tmp; mv $@.tmp $@
endef
VERIFY_LIB_OBJ := $(filter-out $(BUILD)/obj/pkg/runner/% $(BUILD)/obj/pkg/trial/%,$(LIB_OBJ))
LAYOUT := $(BUILD)/tests/layout

$(BUILD)/libapf-verify.a: $(VERIFY_LIB_OBJ)
	@rm -f $@
	@$(if $(Q),echo "  AR      $@")
	$(Q)ar rcsT $@ $^

$(LAYOUT)/verify_only.link: $(BUILD)/obj/tests/layout/verify_only.o $(BUILD)/libapf-verify.a
	$(layout_link)

# The runner's, the same way: libapf-runner.a holds every object but the
# trial's (pkg/trial, the untrusted process the runner starts as `apf
# __trial` and never calls), and runner_only calls the runner's API
# against it alone, so a runner object that reaches pkg/trial leaves a
# symbol undefined.
RUNNER_LIB_OBJ := $(filter-out $(BUILD)/obj/pkg/trial/%,$(LIB_OBJ))

$(BUILD)/libapf-runner.a: $(RUNNER_LIB_OBJ)
	@rm -f $@
	@$(if $(Q),echo "  AR      $@")
	$(Q)ar rcsT $@ $^

$(LAYOUT)/runner_only.link: $(BUILD)/obj/tests/layout/runner_only.o $(BUILD)/libapf-runner.a
	$(layout_link)

layout-tests: $(LAYOUT)/verify_only.link $(LAYOUT)/runner_only.link

layout-report: all layout-tests
	@scripts/layout-report.py --build $(BUILD)

deps:
	@scripts/deps.sh build test

test: deps
	@$(MAKE) --no-print-directory all unit-tests layout-tests
	@$(PYTHON) tests/run.py --build $(BUILD)

check: deps
	@$(MAKE) --no-print-directory BUILD=build/san SAN=1 all unit-tests layout-tests
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1 \
	 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	 $(PYTHON) tests/run.py --build build/san --sanitized

bench:
	@scripts/deps.sh build bench
	@$(MAKE) --no-print-directory all $(BENCH_BIN)
	@scripts/bench.sh $(BUILD)

demo: deps
	@$(MAKE) --no-print-directory all
	@scripts/demo.sh $(BUILD)

# clang (which libFuzzer needs) warns where gcc does not: libseccomp's
# SCMP_A0()/SCMP_CMP() macros leave a field to its zero default by design.
FUZZ_CFLAGS := -fsanitize=fuzzer-no-link,address -Wno-missing-field-initializers \
               -Wno-unknown-pragmas
fuzz:
	@scripts/deps.sh build
	@$(MAKE) --no-print-directory BUILD=build/fuzz CC=clang \
	    CFLAGS="$(FUZZ_CFLAGS)" build/fuzz/libapf.a
	@mkdir -p build/fuzz/bin
	@for f in $(FUZZ_SRC); do n=$$(basename $$f .c); \
	  clang $(CPPFLAGS_APF) -std=c17 -g -O1 -fsanitize=fuzzer,address \
	    -o build/fuzz/bin/$$n $$f build/fuzz/libapf.a $(LIBS) || exit 1; done
	@scripts/fuzz.sh build/fuzz/bin

manifests: all
	@scripts/manifests.sh $(BUILD)

# Man pages (apf(1), apf-<command>(1)) and the bash completion, generated
# from the built apf's --help texts (scripts/gen-man.py,
# scripts/gen-completion.py), so they describe the options the binary takes.
# They are remade on every make man / completion / install - a dozen --help
# runs - instead of being file targets of $(BUILD)/apf: that keeps install's
# one prerequisite `all`, and `make -o all install` (install what is built)
# relinking nothing.
MAN_DIR    := $(BUILD)/man
COMPLETION := $(BUILD)/completion/apf
GEN_MAN        = $(PYTHON) scripts/gen-man.py --apf $(BUILD)/apf --out $(MAN_DIR)
GEN_COMPLETION = $(PYTHON) scripts/gen-completion.py --apf $(BUILD)/apf -o $(COMPLETION)
MAN1DIR        := $(PREFIX)/share/man/man1
COMPLETIONSDIR := $(PREFIX)/share/bash-completion/completions

.PHONY: man completion
man: all
	$(Q)$(GEN_MAN)

completion: all
	$(Q)$(GEN_COMPLETION)

# Only include/apf (the submission ABI) is public: pkg/*/*.h are libapf's
# internals, free to change, and never installed.
install: all
	$(Q)$(GEN_MAN)
	$(Q)$(GEN_COMPLETION)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig \
	    $(DESTDIR)$(PREFIX)/include/apf $(DESTDIR)$(PREFIX)/share/apf \
	    $(DESTDIR)$(MAN1DIR) $(DESTDIR)$(COMPLETIONSDIR)
	install -m 644 $(MAN_DIR)/*.1 $(DESTDIR)$(MAN1DIR)/
	install -m 644 $(COMPLETION) $(DESTDIR)$(COMPLETIONSDIR)/apf
	install -m 755 $(BUILD)/apf $(DESTDIR)$(PREFIX)/bin/apf
	install -m 644 $(BUILD)/libapf.a $(DESTDIR)$(PREFIX)/lib/libapf.a
	$(if $(CUDA_PLUGIN),install -d $(DESTDIR)$(PREFIX)/lib/apf)
	$(if $(CUDA_PLUGIN),install -m 755 $(CUDA_PLUGIN) $(DESTDIR)$(PREFIX)/lib/apf/apf-cuda.so)
	install -m 644 include/apf/*.h $(DESTDIR)$(PREFIX)/include/apf/
	cp -R workloads $(DESTDIR)$(PREFIX)/share/apf/
	install -m 644 containers/seccomp.json $(DESTDIR)$(PREFIX)/share/apf/seccomp.json
	install -d $(DESTDIR)$(PREFIX)/share/apf/datasets/clicks
	install -m 644 datasets/clicks/*.tab $(DESTDIR)$(PREFIX)/share/apf/datasets/clicks/
	install -d $(DESTDIR)$(PREFIX)/share/apf/datasets/fortunes
	install -m 644 datasets/fortunes/*.tab $(DESTDIR)$(PREFIX)/share/apf/datasets/fortunes/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(shell sed -n 's/.*APF_VERSION "\(.*\)"/\1/p' pkg/base/base.h)|' \
	    -e 's|@LIBS@|$(LIBS)|' scripts/apf.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/apf.pc

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
