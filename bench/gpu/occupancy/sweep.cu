// Occupancy sweep: what cudaOccupancyMaxActiveBlocksPerMultiprocessor answers for kernels of
// many register counts and static shared-memory sizes, over block sizes, dynamic shared
// memory and carveout preferences. klaraptor's occupancy (model/src/occupancy.rs) must equal
// every row (model/tests/occupancy_replay.rs reads the CSV this writes).
//
//   sweep [OUT.csv]      (default: stdout)
//
// The CSV starts with comment lines: GPU name, UUID, driver and runtime versions, date, and
// the device attributes ("# attr Name value") from which the replay test builds the device.
// Columns: kernel,num_regs,static_smem,max_dyn_smem,carveout,block_size,dyn_smem,rc,blocks
//   num_regs, static_smem, max_dyn_smem: cudaFuncGetAttributes after the opt-in
//   carveout: cudaFuncAttributePreferredSharedMemoryCarveout (-1 = default)
//   rc: the cudaError_t of the occupancy call (0 = success); blocks: its answer.
//
// Kernels are never launched: only their attributes and the occupancy API are used.

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        cudaError_t err_ = (call);                                                         \
        if (err_ != cudaSuccess) {                                                         \
            fprintf(stderr, "sweep: %s failed: %s (%s:%d)\n", #call, cudaGetErrorString(err_), \
                    __FILE__, __LINE__);                                                   \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

// 256 accumulators stay live across the loop: the kernel wants more than 255 registers, so
// __maxnreg__(R) decides its register count (ptxas raises caps below 24 to 24).
constexpr int kAcc = 256;

template <int R>
__global__ void __maxnreg__(R) regs_kernel(const float *__restrict__ in, float *__restrict__ out,
                                           int iters)
{
    float acc[kAcc];
#pragma unroll
    for (int j = 0; j < kAcc; ++j) acc[j] = in[threadIdx.x * kAcc + j];
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < kAcc; ++j) acc[j] = fmaf(acc[j], acc[(j + 1) % kAcc], 1.0f);
    }
    float s = 0.f;
#pragma unroll
    for (int j = 0; j < kAcc; ++j) s += acc[j];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// Few registers, no shared memory.
__global__ void tiny_kernel(float *out) { out[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f; }

// Static shared memory of BYTES bytes (rounded down to whole floats).
template <int BYTES>
__global__ void static_smem_kernel(const float *__restrict__ in, float *__restrict__ out)
{
    constexpr int n = BYTES / 4;
    __shared__ float buf[n];
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = in[i];
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = buf[(threadIdx.x * 7) % n];
}

struct Kernel {
    std::string name;
    const void *fn;
};

struct Attr {
    const char *name;
    cudaDeviceAttr attr;
};

static const Attr kAttrs[] = {
    {"ComputeCapabilityMajor", cudaDevAttrComputeCapabilityMajor},
    {"ComputeCapabilityMinor", cudaDevAttrComputeCapabilityMinor},
    {"MultiProcessorCount", cudaDevAttrMultiProcessorCount},
    {"ClockRate", cudaDevAttrClockRate},
    {"MemoryClockRate", cudaDevAttrMemoryClockRate},
    {"GlobalMemoryBusWidth", cudaDevAttrGlobalMemoryBusWidth},
    {"L2CacheSize", cudaDevAttrL2CacheSize},
    {"WarpSize", cudaDevAttrWarpSize},
    {"MaxThreadsPerBlock", cudaDevAttrMaxThreadsPerBlock},
    {"MaxThreadsPerMultiProcessor", cudaDevAttrMaxThreadsPerMultiProcessor},
    {"MaxBlocksPerMultiprocessor", cudaDevAttrMaxBlocksPerMultiprocessor},
    {"MaxRegistersPerMultiprocessor", cudaDevAttrMaxRegistersPerMultiprocessor},
    {"MaxRegistersPerBlock", cudaDevAttrMaxRegistersPerBlock},
    {"MaxSharedMemoryPerMultiprocessor", cudaDevAttrMaxSharedMemoryPerMultiprocessor},
    {"MaxSharedMemoryPerBlock", cudaDevAttrMaxSharedMemoryPerBlock},
    {"MaxSharedMemoryPerBlockOptin", cudaDevAttrMaxSharedMemoryPerBlockOptin},
    {"ReservedSharedMemoryPerBlock", cudaDevAttrReservedSharedMemoryPerBlock},
    {"MaxBlockDimX", cudaDevAttrMaxBlockDimX},
    {"MaxBlockDimY", cudaDevAttrMaxBlockDimY},
    {"MaxBlockDimZ", cudaDevAttrMaxBlockDimZ},
    {"MaxGridDimX", cudaDevAttrMaxGridDimX},
    {"MaxGridDimY", cudaDevAttrMaxGridDimY},
    {"MaxGridDimZ", cudaDevAttrMaxGridDimZ},
};

static std::string kernel_driver_version()
{
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    if (!f) return "unknown";
    char line[512] = {0};
    if (!fgets(line, sizeof line, f)) line[0] = 0;
    fclose(f);
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
}

static std::string uuid_string(const cudaUUID_t &u)
{
    char buf[64];
    const unsigned char *b = reinterpret_cast<const unsigned char *>(u.bytes);
    snprintf(buf, sizeof buf,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
    return buf;
}

int main(int argc, char **argv)
{
    FILE *out = stdout;
    if (argc > 1) {
        out = fopen(argv[1], "w");
        if (!out) {
            perror(argv[1]);
            return 1;
        }
    }
    int dev = 0;
    CHECK(cudaSetDevice(dev));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, dev));
    int drv = 0, rt = 0;
    CHECK(cudaDriverGetVersion(&drv));
    CHECK(cudaRuntimeGetVersion(&rt));
    char date[64];
    time_t now = time(nullptr);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));

    fprintf(out, "# klaraptor occupancy sweep (bench/gpu/occupancy/sweep.cu): answers of\n");
    fprintf(out, "# cudaOccupancyMaxActiveBlocksPerMultiprocessor\n");
    fprintf(out, "# gpu: %s\n# uuid: %s\n", prop.name, uuid_string(prop.uuid).c_str());
    fprintf(out, "# driver: %s\n", kernel_driver_version().c_str());
    fprintf(out, "# cuda driver api: %d.%d, runtime: %d.%d\n", drv / 1000, (drv % 1000) / 10,
            rt / 1000, (rt % 1000) / 10);
    fprintf(out, "# date: %s\n", date);
    int optin = 0;
    for (const Attr &a : kAttrs) {
        int v = 0;
        cudaError_t e = cudaDeviceGetAttribute(&v, a.attr, dev);
        if (e == cudaSuccess) {
            fprintf(out, "# attr %s %d\n", a.name, v);
        } else {
            fprintf(out, "# attr-missing %s %s\n", a.name, cudaGetErrorString(e));
            cudaGetLastError();
        }
        if (a.attr == cudaDevAttrMaxSharedMemoryPerBlockOptin && e == cudaSuccess) optin = v;
    }
    fprintf(out, "kernel,num_regs,static_smem,max_dyn_smem,carveout,block_size,dyn_smem,rc,blocks\n");

    std::vector<Kernel> regs = {
        {"tiny", (const void *)tiny_kernel},
        {"regs24", (const void *)regs_kernel<24>},
        {"regs32", (const void *)regs_kernel<32>},
        {"regs33", (const void *)regs_kernel<33>},
        {"regs40", (const void *)regs_kernel<40>},
        {"regs48", (const void *)regs_kernel<48>},
        {"regs56", (const void *)regs_kernel<56>},
        {"regs64", (const void *)regs_kernel<64>},
        {"regs65", (const void *)regs_kernel<65>},
        {"regs72", (const void *)regs_kernel<72>},
        {"regs80", (const void *)regs_kernel<80>},
        {"regs96", (const void *)regs_kernel<96>},
        {"regs104", (const void *)regs_kernel<104>},
        {"regs128", (const void *)regs_kernel<128>},
        {"regs136", (const void *)regs_kernel<136>},
        {"regs168", (const void *)regs_kernel<168>},
        {"regs200", (const void *)regs_kernel<200>},
        {"regs232", (const void *)regs_kernel<232>},
        {"regs255", (const void *)regs_kernel<255>},
    };
    std::vector<Kernel> statics = {
        {"smem1024", (const void *)static_smem_kernel<1024>},
        {"smem4100", (const void *)static_smem_kernel<4100>},
        {"smem16384", (const void *)static_smem_kernel<16384>},
        {"smem40000", (const void *)static_smem_kernel<40000>},
        {"smem49152", (const void *)static_smem_kernel<49152>},
    };

    std::vector<int> blocks;
    for (int b : {1, 2, 3, 4, 5, 7, 8, 12, 13, 16, 17, 24, 31}) blocks.push_back(b);
    for (int b = 32; b <= 1024; b += 32) blocks.push_back(b);
    blocks.push_back(1056);  // beyond the limit
    const std::vector<int> coarse_blocks = {32, 64, 96, 128, 256, 384, 512, 768, 1024};

    long rows = 0, failures = 0;
    auto sweep = [&](const Kernel &k, int carveout, const std::vector<int> &bs,
                     const std::vector<long> &dyns) {
        cudaFuncAttributes fa;
        CHECK(cudaFuncGetAttributes(&fa, k.fn));
        for (int b : bs) {
            for (long d : dyns) {
                if (d < 0) continue;
                int n = -1;
                cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k.fn, b, (size_t)d);
                if (e != cudaSuccess) {
                    cudaGetLastError();
                    ++failures;
                    n = 0;
                }
                fprintf(out, "%s,%d,%zu,%d,%d,%d,%ld,%d,%d\n", k.name.c_str(), fa.numRegs,
                        fa.sharedSizeBytes, fa.maxDynamicSharedSizeBytes, carveout, b, d, (int)e,
                        n);
                ++rows;
            }
        }
    };

    // Opt every kernel in to the largest dynamic shared memory it can have, as the model
    // assumes a kernel that needs it has done.
    for (auto *set : {&regs, &statics}) {
        for (const Kernel &k : *set) {
            cudaFuncAttributes fa;
            CHECK(cudaFuncGetAttributes(&fa, k.fn));
            CHECK(cudaFuncSetAttribute(k.fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       optin - (int)fa.sharedSizeBytes));
        }
    }

    const long o = optin;
    const std::vector<long> few_dyn = {0, 1, 1024, 8192, 16384, 49152, 100000, o};
    std::vector<long> all_dyn = {0,     1,     127,    128,    129,    1023,   1024,  1025,
                                 2048,  3072,  4096,   6000,   8192,   12288,  16384, 20000,
                                 24576, 32768, 40000,  49152,  49153,  57344,  65536, 81920,
                                 98304, 100000, 102400, 114688, 131072, 147456, 163840,
                                 180224, 196608, 212992, 229376, o - 1, o, o + 1};

    // Registers: every kernel, every block size, a few dynamic sizes.
    for (const Kernel &k : regs) sweep(k, -1, blocks, few_dyn);
    // Shared memory: two register counts over every dynamic size.
    for (const Kernel &k : {regs[0], regs[7]}) sweep(k, -1, blocks, all_dyn);
    // Static shared memory plus dynamic (up to the opt-in limit for that kernel).
    for (const Kernel &k : statics) {
        cudaFuncAttributes fa;
        CHECK(cudaFuncGetAttributes(&fa, k.fn));
        const long s = (long)fa.sharedSizeBytes;
        sweep(k, -1, blocks, {0, 1, 4096, 16384, 50000, 100000, o - s - 1, o - s, o - s + 1});
    }
    // Carveout preferences.
    for (const Kernel &k : {regs[0], statics[2]}) {
        for (int pct : {0, 10, 25, 50, 60, 75, 100}) {
            CHECK(cudaFuncSetAttribute(k.fn, cudaFuncAttributePreferredSharedMemoryCarveout, pct));
            sweep(k, pct, coarse_blocks, all_dyn);
        }
        CHECK(cudaFuncSetAttribute(k.fn, cudaFuncAttributePreferredSharedMemoryCarveout, -1));
    }
    if (out != stdout) fclose(out);
    fprintf(stderr, "sweep: %s: %ld rows, %ld occupancy calls returned an error\n", prop.name,
            rows, failures);
    return 0;
}
