// Prints what the driver reports about GPU 0 as TOML: a [device] table (name, UUID, compute
// capability, driver and runtime versions, date) and an [attributes] table keyed by the
// cudaDeviceAttr names without the cudaDevAttr prefix. The device_toml example of
// klaraptor-model turns it into a device description:
//
//   cargo run -p klaraptor-model --example device_toml -- device-query.toml \
//       > model/devices/nvidia-h200.toml

#include <cuda_runtime.h>

#include <cstdio>
#include <ctime>
#include <string>

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

// The kernel module's version line ("NVRM version: ... 580.xx ..."), or "unknown".
static std::string kernel_driver_version()
{
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    if (!f) return "unknown";
    char line[512] = {0};
    if (!fgets(line, sizeof line, f)) line[0] = 0;
    fclose(f);
    std::string s;
    for (const char *p = line; *p && *p != '\n'; ++p) {
        if (*p == '"' || *p == '\\') s.push_back('\\');
        s.push_back(*p);
    }
    return s;
}

int main()
{
    int dev = 0;
    cudaError_t e = cudaSetDevice(dev);
    if (e != cudaSuccess) {
        fprintf(stderr, "device_query: no usable GPU: %s\n", cudaGetErrorString(e));
        return 1;
    }
    cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, dev);
    if (e != cudaSuccess) {
        fprintf(stderr, "device_query: cudaGetDeviceProperties: %s\n", cudaGetErrorString(e));
        return 1;
    }
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    char date[64];
    time_t now = time(nullptr);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    const unsigned char *u = reinterpret_cast<const unsigned char *>(prop.uuid.bytes);

    printf("# klaraptor device query (bench/gpu/occupancy/device_query.cu)\n");
    printf("[device]\n");
    printf("name = \"%s\"\n", prop.name);
    printf("uuid = \"GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\"\n",
           u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
           u[14], u[15]);
    printf("cc = \"%d.%d\"\n", prop.major, prop.minor);
    printf("driver_version = \"%s\"\n", kernel_driver_version().c_str());
    printf("cuda_driver_api = \"%d.%d\"\n", drv / 1000, (drv % 1000) / 10);
    printf("runtime_version = \"%d.%d\"\n", rt / 1000, (rt % 1000) / 10);
    printf("date = \"%s\"\n", date);
    printf("\n[attributes]\n");
    int missing = 0;
    for (const Attr &a : kAttrs) {
        int v = 0;
        e = cudaDeviceGetAttribute(&v, a.attr, dev);
        if (e == cudaSuccess) {
            printf("%s = %d\n", a.name, v);
        } else {
            printf("# %s: not available (%s)\n", a.name, cudaGetErrorString(e));
            cudaGetLastError();
            ++missing;
        }
    }
    fprintf(stderr, "device_query: %s, %d attributes not available\n", prop.name, missing);
    return 0;
}
