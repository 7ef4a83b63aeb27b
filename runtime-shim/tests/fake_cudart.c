/* A tiny fake of the CUDA runtime functions the shim calls, so that the test binary links
 * and runs without cudart or a GPU. It describes four devices: 0 is H200-like, 1 A100-like,
 * 2 an H100 80GB HBM3 (132 SMs) and 3 a device of the same name with 114 SMs (another
 * identity); fake_cudart_device selects the current one for every thread (-1: cudaGetDevice
 * fails with cudaErrorNoDevice), cudaSetDevice for the calling thread only (as CUDA's current
 * device is per thread). fake_cudart_fail_attr makes cudaDeviceGetAttribute fail for one
 * attribute. */
#include <string.h>

#include <cuda_runtime_api.h>

#define FAKE_DEVICES 4
int fake_cudart_device = 0;
static _Thread_local int fake_thread_device = -2; /* -2: not set by cudaSetDevice */
int fake_cudart_fail_attr = -1;
int fake_cudart_last_error = 0;

cudaError_t cudaGetDevice(int *device) {
  int d = fake_thread_device != -2 ? fake_thread_device : fake_cudart_device;
  if (d < 0) {
    fake_cudart_last_error = cudaErrorNoDevice;
    return cudaErrorNoDevice;
  }
  *device = d;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= FAKE_DEVICES) {
    fake_cudart_last_error = cudaErrorInvalidDevice;
    return cudaErrorInvalidDevice;
  }
  fake_thread_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = (cudaError_t)fake_cudart_last_error;
  fake_cudart_last_error = 0;
  return e;
}

const char *cudaGetErrorString(cudaError_t error) {
  return error == cudaErrorInvalidValue ? "invalid argument" : "some error";
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= FAKE_DEVICES || (int)attr == fake_cudart_fail_attr) {
    fake_cudart_last_error = cudaErrorInvalidValue;
    return cudaErrorInvalidValue;
  }
  int h200 = device != 1; /* the H100s: Hopper too */
  switch (attr) {
  case cudaDevAttrMultiProcessorCount: *value = device == 1 ? 108 : device == 3 ? 114 : 132; break;
  case cudaDevAttrWarpSize: *value = 32; break;
  case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
  case cudaDevAttrMaxBlockDimX: *value = 1024; break;
  case cudaDevAttrMaxBlockDimY: *value = 1024; break;
  case cudaDevAttrMaxBlockDimZ: *value = 64; break;
  case cudaDevAttrMaxGridDimX: *value = 2147483647; break;
  case cudaDevAttrMaxGridDimY: *value = 65535; break;
  case cudaDevAttrMaxGridDimZ: *value = 65535; break;
  case cudaDevAttrMaxThreadsPerMultiProcessor: *value = 2048; break;
  case cudaDevAttrMaxBlocksPerMultiprocessor: *value = 32; break;
  case cudaDevAttrMaxRegistersPerMultiprocessor: *value = 65536; break;
  case cudaDevAttrMaxRegistersPerBlock: *value = 65536; break;
  case cudaDevAttrMaxSharedMemoryPerBlock: *value = 49152; break;
  case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = h200 ? 232448 : 166912; break;
  case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = h200 ? 233472 : 167936; break;
  case cudaDevAttrComputeCapabilityMajor: *value = h200 ? 9 : 8; break;
  case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
  default: *value = 0; break;
  }
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  if (device < 0 || device >= FAKE_DEVICES) return cudaErrorInvalidDevice;
  memset(prop, 0x5a, sizeof *prop);
  strcpy(prop->name, device == 0   ? "NVIDIA H200"
                     : device == 1 ? "NVIDIA A100-SXM4-80GB"
                                   : "NVIDIA H100 80GB HBM3");
  return cudaSuccess;
}

/* ---- Events, streams and launches, for the refinement tests ----
 *
 * Every stream (any pointer; NULL is the default stream) has a clock in microseconds: the
 * time at which the work queued on it so far ends. fake_cudart_kernel(stream, us) queues a
 * kernel of that length. The host has a clock too (fake_cudart_host_us, moved on by
 * fake_cudart_host for the host's own work and by fake_cudart_host_sync for a
 * synchronisation the program makes): work queued on an idle stream starts when the host
 * queues it, a kernel fake_cudart_latency_us after its launch call begins (that long is the
 * call itself, on the host). An event recorded on a stream takes the stream's clock; it is
 * complete once the GPU's progress (fake_cudart_gpu_us) has reached it, or at once while
 * fake_cudart_gpu_follows is set. Elapsed times are read only between complete events, as
 * CUDA does. Every call that would make the host wait (cudaDeviceSynchronize,
 * cudaStreamSynchronize, cudaEventSynchronize) is counted in fake_cudart_syncs: the runtime
 * must never make one. fake_cudart_capturing names a stream being captured into a graph;
 * fake_cudart_launch_error is what cudaPeekAtLastError reports.
 *
 * The driver's cuStreamWaitValue32 (the runtime's gate) holds a stream until a word of host
 * memory reaches a value (compared cyclically): work queued behind it is placed, relative to
 * the release, back to back, without the launch latency (it is all queued when the GPU gets
 * to it); the release is seen at the next call of this fake, at the host's time then.
 * fake_cudart_gated() counts the streams still held; a synchronisation of the program on a
 * held stream would never return: fake_cudart_gate_stuck counts those, and the fake releases
 * them to go on. fake_cudart_wait_refused makes the wait fail (a driver without stream
 * memory operations); fake_cudart_gates counts the holds. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
double fake_cudart_gpu_us = 0;
int fake_cudart_gpu_follows = 1;
int fake_cudart_syncs = 0;
int fake_cudart_events_live = 0;
int fake_cudart_records = 0;
void *fake_cudart_capturing = (void *)-1;
_Thread_local int fake_cudart_launch_error = 0; /* per thread, as CUDA's last error */
int fake_cudart_capture_mode = cudaStreamCaptureModeGlobal;

#define FAKE_STREAMS 64
typedef struct fake_stream {
  void *s;
  double t;
  /* held at a gate: until *word reaches value; rel: the work queued behind it */
  int gated;
  const volatile uint32_t *word;
  uint32_t value;
  double rel;
} fake_stream;
static fake_stream fake_streams[FAKE_STREAMS];
static int fake_n_streams;

static fake_stream *fake_stream_of(void *s) {
  for (int i = 0; i < fake_n_streams; i++)
    if (fake_streams[i].s == s) return &fake_streams[i];
  if (fake_n_streams == FAKE_STREAMS) abort();
  memset(&fake_streams[fake_n_streams], 0, sizeof fake_streams[0]);
  fake_streams[fake_n_streams].s = s;
  return &fake_streams[fake_n_streams++];
}

double fake_cudart_host_us = 0;
double fake_cudart_latency_us = 0;
int fake_cudart_gate_stuck = 0;
int fake_cudart_wait_refused = 0;
int fake_cudart_gates = 0;

typedef struct fake_event {
  double t;
  int recorded;
  fake_stream *held; /* recorded behind a gate not yet released: t is rel */
} fake_event;
#define FAKE_HELD 256
static fake_event *fake_held[FAKE_HELD];
static int fake_n_held;

/* Under fake_lock: the gates whose word has reached their value open now (`force`: every
 * gate, a release the program would never see). */
static void fake_release_locked(int force) {
  for (int i = 0; i < fake_n_streams; i++) {
    fake_stream *st = &fake_streams[i];
    if (!st->gated) continue;
    if (!force && (int32_t)(*st->word - st->value) < 0) continue;
    double at = st->t > fake_cudart_host_us ? st->t : fake_cudart_host_us;
    int kept = 0;
    for (int j = 0; j < fake_n_held; j++) {
      if (fake_held[j]->held == st) {
        fake_held[j]->t += at;
        fake_held[j]->held = NULL;
      } else {
        fake_held[kept++] = fake_held[j];
      }
    }
    fake_n_held = kept;
    st->t = at + st->rel;
    st->gated = 0;
    st->rel = 0;
  }
}

int fake_cudart_gated(void) {
  pthread_mutex_lock(&fake_lock);
  fake_release_locked(0);
  int n = 0;
  for (int i = 0; i < fake_n_streams; i++) n += fake_streams[i].gated;
  pthread_mutex_unlock(&fake_lock);
  return n;
}

int cuStreamWaitValue32_v2(void *stream, unsigned long long addr, unsigned int value,
                           unsigned int flags) {
  if (fake_cudart_wait_refused || flags != 0) return 801; /* CUDA_ERROR_NOT_SUPPORTED */
  pthread_mutex_lock(&fake_lock);
  fake_release_locked(0);
  fake_stream *st = fake_stream_of(stream);
  const volatile uint32_t *w = (const volatile uint32_t *)(uintptr_t)addr;
  if (st->gated) abort(); /* one gate at a time on a stream, in this fake */
  if ((int32_t)(*w - value) < 0) {
    st->gated = 1;
    st->word = w;
    st->value = value;
    st->rel = 0;
  }
  fake_cudart_gates++;
  pthread_mutex_unlock(&fake_lock);
  return 0;
}

cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags) {
  (void)flags;
  *p = calloc(1, size);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

/* Pages pinned by cudaHostRegister (the gate's word lies on one); a range already pinned is
 * refused, as CUDA does. */
int fake_cudart_registered = 0;
static void *fake_registered[16];
cudaError_t cudaHostRegister(void *p, size_t size, unsigned int flags) {
  (void)size;
  (void)flags;
  pthread_mutex_lock(&fake_lock);
  for (int i = 0; i < fake_cudart_registered; i++)
    if (fake_registered[i] == p) {
      pthread_mutex_unlock(&fake_lock);
      return cudaErrorHostMemoryAlreadyRegistered;
    }
  if (fake_cudart_registered == 16) abort();
  fake_registered[fake_cudart_registered++] = p;
  pthread_mutex_unlock(&fake_lock);
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void **dev, void *host, unsigned int flags) {
  (void)flags;
  *dev = host;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p) {
  free(p);
  return cudaSuccess;
}

/* A launch's latency varies by up to this much more, uniformly (the fake's own generator). */
double fake_cudart_latency_jitter_us = 0;
static uint64_t fake_rng = 0x2545f4914f6cdd1dull;

/* Under fake_lock: a kernel of us queued on stream st. */
static void fake_queue_locked(fake_stream *st, double us) {
  double lat = fake_cudart_latency_us;
  if (fake_cudart_latency_jitter_us > 0) {
    fake_rng ^= fake_rng << 13;
    fake_rng ^= fake_rng >> 7;
    fake_rng ^= fake_rng << 17;
    lat += fake_cudart_latency_jitter_us * (double)(fake_rng >> 11) / 9007199254740992.0;
  }
  fake_cudart_host_us += lat;
  if (st->gated) {
    st->rel += us; /* behind the gate: it runs when the gate opens, no latency */
    return;
  }
  double start = fake_cudart_host_us;
  if (st->t > start) start = st->t;
  st->t = start + us;
}

void fake_cudart_kernel(void *stream, double us) {
  pthread_mutex_lock(&fake_lock);
  fake_release_locked(0);
  fake_queue_locked(fake_stream_of(stream), us);
  pthread_mutex_unlock(&fake_lock);
}

/* The host works for us (the GPU goes on with what is queued). */
void fake_cudart_host(double us) {
  pthread_mutex_lock(&fake_lock);
  fake_release_locked(0);
  fake_cudart_host_us += us;
  pthread_mutex_unlock(&fake_lock);
}

/* The program waits for every stream (its cudaDeviceSynchronize; not counted in
 * fake_cudart_syncs, which counts the runtime's). */
void fake_cudart_host_sync(void) {
  pthread_mutex_lock(&fake_lock);
  fake_release_locked(0);
  for (int i = 0; i < fake_n_streams; i++) fake_cudart_gate_stuck += fake_streams[i].gated;
  fake_release_locked(1);
  for (int i = 0; i < fake_n_streams; i++)
    if (fake_streams[i].t > fake_cudart_host_us) fake_cudart_host_us = fake_streams[i].t;
  if (fake_cudart_gpu_us < fake_cudart_host_us) fake_cudart_gpu_us = fake_cudart_host_us;
  pthread_mutex_unlock(&fake_lock);
}

/* The latest time work queued on any stream ends. */
double fake_cudart_busy_until(void) {
  pthread_mutex_lock(&fake_lock);
  fake_release_locked(0);
  double t = fake_cudart_host_us;
  for (int i = 0; i < fake_n_streams; i++)
    if (fake_streams[i].t > t) t = fake_streams[i].t;
  pthread_mutex_unlock(&fake_lock);
  return t;
}

/* Lazy module loading: a kernel (any pointer standing for its handle) is loaded by its first
 * launch through fake_cudart_launch, or before by cudaFuncGetAttributes. Loading takes
 * fake_cudart_load_us on the host, while the GPU idles: every stream's clock moves on by that
 * much, so an event recorded before the load and one after the kernel span the load too.
 * fake_cudart_reset_streams (a new process) unloads every kernel. */
double fake_cudart_load_us = 0;
int fake_cudart_loads = 0;
#define FAKE_KERNELS 64
static const void *fake_loaded[FAKE_KERNELS];
static int fake_n_loaded;

static void fake_load_locked(const void *kernel) {
  for (int i = 0; i < fake_n_loaded; i++)
    if (fake_loaded[i] == kernel) return;
  if (fake_n_loaded == FAKE_KERNELS) abort();
  fake_loaded[fake_n_loaded++] = kernel;
  fake_cudart_loads++;
  for (int i = 0; i < fake_n_streams; i++)
    if (!fake_streams[i].gated) fake_streams[i].t += fake_cudart_load_us;
}

/* A launch of `kernel` on `stream` taking us (loading the kernel first if it is not). */
void fake_cudart_launch(const void *kernel, void *stream, double us) {
  pthread_mutex_lock(&fake_lock);
  fake_release_locked(0);
  (void)fake_stream_of(stream);
  fake_load_locked(kernel);
  fake_queue_locked(fake_stream_of(stream), us);
  pthread_mutex_unlock(&fake_lock);
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func) {
  if (!func) return cudaErrorInvalidDeviceFunction;
  memset(attr, 0, sizeof *attr);
  pthread_mutex_lock(&fake_lock);
  fake_load_locked(func);
  pthread_mutex_unlock(&fake_lock);
  return cudaSuccess;
}

void fake_cudart_reset_streams(void) {
  pthread_mutex_lock(&fake_lock);
  fake_release_locked(1);
  fake_n_streams = 0;
  fake_n_held = 0;
  fake_cudart_gpu_us = 0;
  fake_cudart_host_us = 0;
  fake_n_loaded = 0;
  fake_cudart_loads = 0;
  pthread_mutex_unlock(&fake_lock);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
  (void)flags;
  fake_event *f = calloc(1, sizeof *f);
  if (!f) return cudaErrorMemoryAllocation;
  pthread_mutex_lock(&fake_lock);
  fake_cudart_events_live++;
  pthread_mutex_unlock(&fake_lock);
  *e = (cudaEvent_t)f;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  pthread_mutex_lock(&fake_lock);
  for (int j = 0; j < fake_n_held; j++)
    if (fake_held[j] == (fake_event *)e) fake_held[j--] = fake_held[--fake_n_held];
  fake_cudart_events_live--;
  pthread_mutex_unlock(&fake_lock);
  free(e);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  fake_event *f = (fake_event *)e;
  pthread_mutex_lock(&fake_lock);
  if ((void *)s == fake_cudart_capturing) {
    pthread_mutex_unlock(&fake_lock);
    return cudaErrorStreamCaptureUnsupported;
  }
  fake_release_locked(0);
  fake_stream *st = fake_stream_of((void *)s);
  for (int j = 0; j < fake_n_held; j++)
    if (fake_held[j] == f) fake_held[j--] = fake_held[--fake_n_held]; /* recorded again */
  f->held = NULL;
  if (st->gated) {
    if (fake_n_held == FAKE_HELD) abort();
    f->t = st->rel;
    f->held = st;
    fake_held[fake_n_held++] = f;
  } else {
    f->t = st->t > fake_cudart_host_us ? st->t : fake_cudart_host_us;
  }
  f->recorded = 1;
  fake_cudart_records++;
  pthread_mutex_unlock(&fake_lock);
  return cudaSuccess;
}

static int fake_done(const fake_event *f) {
  return !f->recorded || (!f->held && (fake_cudart_gpu_follows || f->t <= fake_cudart_gpu_us));
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  pthread_mutex_lock(&fake_lock);
  fake_release_locked(0);
  int done = fake_done((fake_event *)e);
  pthread_mutex_unlock(&fake_lock);
  return done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  fake_event *x = (fake_event *)a, *y = (fake_event *)b;
  pthread_mutex_lock(&fake_lock);
  fake_release_locked(0);
  cudaError_t r = cudaSuccess;
  if (!x->recorded || !y->recorded)
    r = cudaErrorInvalidResourceHandle;
  else if (!fake_done(x) || !fake_done(y))
    r = cudaErrorNotReady;
  else
    *ms = (float)((y->t - x->t) / 1000.0);
  pthread_mutex_unlock(&fake_lock);
  return r;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  (void)e;
  fake_cudart_syncs++;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  (void)s;
  fake_cudart_syncs++;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  fake_cudart_syncs++;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *st) {
  *st = (void *)s == fake_cudart_capturing ? cudaStreamCaptureStatusActive
                                           : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t cudaPeekAtLastError(void) { return (cudaError_t)fake_cudart_launch_error; }

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
  pthread_mutex_lock(&fake_lock);
  enum cudaStreamCaptureMode old = (enum cudaStreamCaptureMode)fake_cudart_capture_mode;
  fake_cudart_capture_mode = (int)*mode;
  *mode = old;
  pthread_mutex_unlock(&fake_lock);
  return cudaSuccess;
}
