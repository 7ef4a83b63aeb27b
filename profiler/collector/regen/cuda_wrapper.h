/* The CUDA driver API the collector binds (a small subset, see regen.sh). */
#include <cuda.h>
