# Rules shared by the idioms sample Makefiles. A program's Makefile sets NVCC ?= nvcc, PROG
# (the executable) and SRCS, then includes this file. The programs use the PolyBench samples'
# harness (samples/polybench/common/harness.h: command line, inputs, timing, check) and this
# directory's idioms.h.
#   make                        build with $(NVCC)
#   make NVCC=klaraptor-cc      the same build through klaraptor
#   make check                  build and run at the default sizes (prints PASS or FAIL)
#   make clean
NVCCFLAGS ?= -O3 -std=c++17
ARCH ?= -arch=sm_90
COMMON := $(dir $(lastword $(MAKEFILE_LIST)))
HARNESS := $(COMMON)../../polybench/common

$(PROG): $(SRCS) $(HARNESS)/harness.h $(COMMON)idioms.h
	$(NVCC) $(NVCCFLAGS) $(ARCH) -I$(HARNESS) -I$(COMMON) $(SRCS) -o $@

check: $(PROG)
	./$(PROG)

clean:
	rm -rf $(PROG) $(PROG).klaraptor

.PHONY: check clean
