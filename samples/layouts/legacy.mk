# The layouts sample built the way many older CUDA Makefiles do it: the compiler is $(CC)
# and one command compiles and links.
#   make -f legacy.mk                    plain nvcc
#   make -f legacy.mk CC=klaraptor-cc    the same build through klaraptor
CC = nvcc
CFLAGS = -O2 -std=c++17 -gencode arch=compute_90,code=sm_90 -I. -Ikernels

layouts: main.cu brighten.cu kernels/blur.cuh layouts.h
	$(CC) $(CFLAGS) main.cu -o $@

clean:
	rm -rf layouts layouts.klaraptor

.PHONY: clean
