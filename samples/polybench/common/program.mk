# Rules shared by the PolyBench sample Makefiles. A program's Makefile sets NVCC ?= nvcc,
# PROG (the executable) and SRCS, then includes this file.
#   make                        build with $(NVCC)
#   make NVCC=klaraptor-cc      the same build through klaraptor
#   make check                  build and run at the default sizes (prints PASS or FAIL)
#   make clean
NVCCFLAGS ?= -O3 -std=c++17
ARCH ?= -arch=sm_90
COMMON := $(dir $(lastword $(MAKEFILE_LIST)))

$(PROG): $(SRCS) $(COMMON)harness.h
	$(NVCC) $(NVCCFLAGS) $(ARCH) -I$(COMMON) $(SRCS) -o $@

check: $(PROG)
	./$(PROG)

clean:
	rm -rf $(PROG) $(PROG).klaraptor

.PHONY: check clean
