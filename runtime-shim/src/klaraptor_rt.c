/* klaraptor runtime shim: the registry of instrumented kernels, the memo of launch decisions,
 * the KLARAPTOR_* controls and the device limits. See runtime-shim/README.md for the design;
 * the short version:
 *
 * - Registry: a fixed array of hash buckets (FNV-1a of the id) holding singly linked lists of
 *   immutable entries. Insertions take the global lock and publish the new head with a
 *   release store; lookups walk the lists with acquire loads and take no lock. Entries are
 *   never removed. A small cache maps the id *pointer* a call site passes to its entry, so
 *   the launch path does not hash or compare the id string.
 * - Memo: an open-addressing table of pointers to immutable decision nodes, keyed by
 *   (kernel entry, device ordinal, data values). Readers load the table pointer (acquire) and
 *   probe without a lock; a miss takes the global lock, checks again, decides, inserts the
 *   node with a release store, and logs. The table grows by doubling at half load: the new
 *   table is filled, then published; old tables are kept (never freed) because a reader may
 *   still be probing them. Their sizes sum to less than the current one.
 * - Environment: KLARAPTOR_DISABLE, KLARAPTOR_FORCE, KLARAPTOR_LOG, KLARAPTOR_REFINE and
 *   KLARAPTOR_CHOICES are read once, at the first launch (not at registration: constructors
 *   run before main, and a program may set them in main). The first registration only warms
 *   that read and the first decision's code up, silently (warm_up).
 * - Refinement (klaraptor_refine.inc): a memo node whose model choice is not yet confirmed is
 *   *unsettled*; its launches take the lock, and some of them are timed, launch by launch,
 *   in paired comparisons of the program's own shape with the model's best, the profile's
 *   fastest and neighbours of the winner; when the comparisons are over the decision is
 *   stored, the node published as settled (release store) and the decision written, with
 *   its evidence, to the choices cache (klaraptor_choices.inc). A settled node costs the hit
 *   path one acquire load more.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "klaraptor.h"
#include "klaraptor_internal.h"

#ifndef KLARAPTOR_NO_CUDART
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#endif

/* ---------------------------------------------------------------------------------------- */
/* Small helpers                                                                            */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_inited; /* 1 once the environment is read (the first launch) */
/* Built with -DKLARAPTOR_PROBE (a measurement, never shipped), the first launches' steps are
 * timed and printed to stderr at exit, "probe <step> <us since the step before>": where the
 * first launch of a key spends its time (bench/firstlaunch). */
#ifdef KLARAPTOR_PROBE
#include <time.h>
static struct timespec pr_t[32];
static const char *pr_n[32];
static int pr_k;
#define PROBE(n)                                                                             \
  do {                                                                                       \
    if (pr_k < 32) {                                                                         \
      clock_gettime(CLOCK_MONOTONIC, &pr_t[pr_k]);                                           \
      pr_n[pr_k++] = n;                                                                      \
    }                                                                                        \
  } while (0)
__attribute__((destructor)) static void pr_dump(void) {
  for (int i = 1; i < pr_k; i++)
    fprintf(stderr, "probe %s %.2f\n", pr_n[i],
            (double)(pr_t[i].tv_sec - pr_t[i - 1].tv_sec) * 1e6 +
                (double)(pr_t[i].tv_nsec - pr_t[i - 1].tv_nsec) / 1e3);
}
#else
#define PROBE(n)
#endif


#define INFINITY_US 1e300

/* Appends to a fixed buffer; truncates silently. */
typedef struct sbuf {
  char *p;
  size_t cap, len;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) {
  if (b->len + 1 >= b->cap) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  b->len += (size_t)n;
  if (b->len >= b->cap) b->len = b->cap - 1;
}

static void write_all(int fd, const char *s, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    s += w;
    n -= (size_t)w;
  }
}

/* Warnings go to stderr whether or not logging is on: one write per line. */
static void warn(const char *fmt, ...) {
  char buf[1024];
  int n = snprintf(buf, sizeof buf, "klaraptor: warning: ");
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > sizeof buf - 2) len = sizeof buf - 2;
  buf[len++] = '\n';
  write_all(2, buf, len);
}

static uint64_t fnv1a(const char *s) {
  uint64_t h = 14695981039346656037ull;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ull;
  }
  return h;
}

static inline uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

static const char *kname(const klaraptor_kernel *k) { return k->name ? k->name : k->id; }

/* The kernel's shared-memory formula; NULL without one (and for descriptors of version 1,
 * which end before the field). */
static int64_t (*kshmem(const klaraptor_kernel *k))(const int64_t *, const uint32_t[3]) {
  return k->abi_version >= 2 ? k->shmem : NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Registry                                                                                 */

typedef struct kentry {
  const klaraptor_kernel *k;
  struct kentry *_Atomic next;
  int mismatch_logged; /* under g_lock */
  /* Another object registered this kernel with another annotation: its launches keep the
   * program's own dims. */
  _Atomic int conflict;
} kentry;

#define REG_BUCKETS 256
static kentry *_Atomic g_reg[REG_BUCKETS];

static kentry *registry_find(const char *id) {
  uint64_t h = fnv1a(id);
  kentry *e = atomic_load_explicit(&g_reg[h % REG_BUCKETS], memory_order_acquire);
  for (; e; e = atomic_load_explicit(&e->next, memory_order_acquire))
    if (strcmp(e->k->id, id) == 0) return e;
  return NULL;
}

/* Whether two descriptors of one kernel (from two translation units) describe different
 * annotations: other data parameters or dimensions, or grid formulas, block constraints or
 * shared-memory formulas that give other answers at some probe (data sizes from 1 to 2^30,
 * block shapes of 1 to 1024 threads). Descriptors made from the same annotation are made of
 * the same code and answer alike. Writes what differs into why. */
static int descriptors_differ(const klaraptor_kernel *a, const klaraptor_kernel *b, char *why,
                              size_t whylen) {
  if (a->n_data != b->n_data || a->dim != b->dim) {
    snprintf(why, whylen, "%d data parameter(s) and dim %d in one, %d and dim %d in the other",
             a->n_data, a->dim, b->n_data, b->dim);
    return 1;
  }
  for (int i = 0; i < a->n_data; i++) {
    const char *x = a->data_names[i] ? a->data_names[i] : "";
    const char *y = b->data_names[i] ? b->data_names[i] : "";
    if (strcmp(x, y) != 0) {
      snprintf(why, whylen, "data parameter %d is %s in one, %s in the other", i + 1, x, y);
      return 1;
    }
  }
  static const int64_t sizes[] = {1, 7, 64, 1000, 4096, 1 << 20, 1 << 30};
  static const uint32_t shapes[][3] = {{1, 1, 1},   {32, 1, 1},  {96, 1, 1}, {256, 1, 1},
                                       {1024, 1, 1}, {16, 16, 1}, {8, 8, 4},  {32, 4, 2}};
  int64_t data[64];
  int nd = a->n_data < 64 ? a->n_data : 64;
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    for (int i = 0; i < nd; i++) data[i] = sizes[(s + (size_t)i) % (sizeof sizes / sizeof sizes[0])];
    for (size_t h = 0; h < sizeof shapes / sizeof shapes[0]; h++) {
      uint32_t block[3] = {shapes[h][0], shapes[h][1], shapes[h][2]};
      uint32_t ga[3] = {0, 0, 0}, gb[3] = {0, 0, 0};
      int ra = a->grid(data, block, ga), rb = b->grid(data, block, gb);
      if (ra != rb || (ra == 0 && memcmp(ga, gb, sizeof ga) != 0)) {
        snprintf(why, whylen, "their grid formulas differ (block %ux%ux%u)", block[0], block[1],
                 block[2]);
        return 1;
      }
      int aa = a->allowed ? a->allowed(data, block) : 1;
      int ab = b->allowed ? b->allowed(data, block) : 1;
      if (aa != ab) {
        snprintf(why, whylen, "their block constraints differ (block %ux%ux%u)", block[0],
                 block[1], block[2]);
        return 1;
      }
      int64_t (*sa)(const int64_t *, const uint32_t[3]) = kshmem(a);
      int64_t (*sb)(const int64_t *, const uint32_t[3]) = kshmem(b);
      if (!sa != !sb || (sa && sa(data, block) != sb(data, block))) {
        snprintf(why, whylen, "their shared-memory formulas differ (block %ux%ux%u)", block[0],
                 block[1], block[2]);
        return 1;
      }
    }
  }
  return 0;
}

static void warm_up(const kentry *e);
static atomic_int g_warmed_up; /* for tests: the warm-up ran */

void klaraptor_register(const klaraptor_kernel *k) {
  if (!k) return;
  if (k->abi_version < 1 || k->abi_version > KLARAPTOR_ABI_VERSION) {
    warn("ignoring the descriptor of kernel %s: ABI version %d, this runtime has %d",
         k->id ? k->id : "(null)", k->abi_version, KLARAPTOR_ABI_VERSION);
    return;
  }
  if (!k->id || !k->grid || k->n_data < 0 || (k->n_data > 0 && !k->data_names) ||
      k->dim < 1 || k->dim > 3) {
    warn("ignoring a malformed descriptor of kernel %s", k->id ? k->id : "(null)");
    return;
  }
  pthread_mutex_lock(&g_lock);
  /* The first registration warms the first launch's paths (warm_up), unless a launch has
   * been made already (a library loaded later). */
  static int warmed;
  kentry *warm = NULL;
  kentry *prev = registry_find(k->id);
  if (prev) {
    /* Another object's descriptor of the kernel (a template instance or a kernel in a header,
     * annotated in several translation units): a link through klaraptor-cc refuses different
     * annotations, any other link reaches here. Neither is chosen over the other. */
    char why[160];
    if (prev->k != k && !atomic_load(&prev->conflict) && descriptors_differ(prev->k, k, why, sizeof why)) {
      atomic_store(&prev->conflict, 1);
      warn("kernel %s is annotated differently in two objects of this program (%s): it keeps "
           "the program's own launch; annotate it alike in every translation unit, or in one",
           kname(k), why);
    }
  } else {
    kentry *e = calloc(1, sizeof *e);
    if (e) {
      uint64_t h = fnv1a(k->id);
      e->k = k;
      atomic_store_explicit(&e->next,
                            atomic_load_explicit(&g_reg[h % REG_BUCKETS], memory_order_relaxed),
                            memory_order_relaxed);
      atomic_store_explicit(&g_reg[h % REG_BUCKETS], e, memory_order_release);
      if (!warmed && !atomic_load_explicit(&g_inited, memory_order_relaxed)) warm = e;
      warmed = 1;
    }
  }
  pthread_mutex_unlock(&g_lock);
#ifdef KLARAPTOR_NO_WARMUP /* a measurement's baseline (bench/firstlaunch), never shipped */
  warm = NULL;
#endif
  if (warm) {
    warm_up(warm);
    atomic_store(&g_warmed_up, 1);
  }
}

int klaraptor__warmed_up(void) { return atomic_load(&g_warmed_up); }

/* Models: a list, newest first, published like the registry buckets. There are a handful
 * per program and the list is walked once per decision (a memo miss), never on a hit. */
typedef struct mentry {
  const klaraptor_model *m;
  struct mentry *_Atomic next;
} mentry;
static mentry *_Atomic g_models;

/* The first registered model's code, run once before main on a made-up device of its GPU's
 * kind, results dropped: the first decision then finds its code and the C library's log()
 * (the profiled best's distance between sizes) resolved and in the caches. On an H200 the
 * first key's first launch spent 21.5 us in the model's choice and 16.5 us in refinement's
 * candidates, the profiled best's first log() among them (bench/firstlaunch, probe build,
 * 2026-11-29). The rational program
 * is pure arithmetic on the data values and the device's limits; no CUDA call, nothing
 * written outside this process's memory. */
static void warm_model(const klaraptor_model *m) {
  const char *off = getenv("KLARAPTOR_DISABLE");
  if (off && *off && strcmp(off, "0") != 0) return;
  klaraptor_device dev;
  memset(&dev, 0, sizeof dev);
  snprintf(dev.name, sizeof dev.name, "%s", m->device);
  dev.sm_count = m->abi_version >= 3 && m->sm_count > 0 ? m->sm_count : 132;
  dev.warp_size = 32;
  dev.max_threads_per_block = 1024;
  dev.max_block_dim[0] = dev.max_block_dim[1] = 1024;
  dev.max_block_dim[2] = 64;
  dev.max_grid_dim[0] = 2147483647;
  dev.max_grid_dim[1] = dev.max_grid_dim[2] = 65535;
  dev.max_threads_per_sm = 2048;
  dev.max_blocks_per_sm = 32;
  dev.regs_per_sm = dev.regs_per_block = 65536;
  dev.smem_per_block = 48 * 1024;
  dev.smem_per_block_optin = 227 * 1024;
  dev.smem_per_sm = 228 * 1024;
  dev.cc_major = 9;
  int64_t data[64];
  for (int i = 0; i < 64; i++) data[i] = 1024;
  uint32_t b[3] = {1, 1, 1};
  double us = 0;
  (void)m->select(data, &dev, b, &us);
  if (m->abi_version >= 2 && m->profiled_best) (void)m->profiled_best(data, &dev, b);
}

void klaraptor_register_model(const klaraptor_model *m) {
  if (!m) return;
  if (m->abi_version > KLARAPTOR_MODEL_ABI_VERSION) {
    /* The program was linked by a newer klaraptor-cc than the one that compiled the objects
     * (they carry this runtime). */
    warn("ignoring the rational program of kernel %s for %s: model ABI version %d, this "
         "runtime has %d (the objects were compiled by an older klaraptor-cc than the one "
         "that linked them: compile them again)",
         m->id ? m->id : "(null)", m->device ? m->device : "(null)", m->abi_version,
         KLARAPTOR_MODEL_ABI_VERSION);
    return;
  }
  if (m->abi_version < 1 || !m->id ||
      !m->device || !m->select) {
    warn("ignoring a malformed rational program for kernel %s", m->id ? m->id : "(null)");
    return;
  }
  pthread_mutex_lock(&g_lock);
  int dup = 0;
  for (mentry *e = atomic_load_explicit(&g_models, memory_order_relaxed); e;
       e = atomic_load_explicit(&e->next, memory_order_relaxed))
    if (strcmp(e->m->id, m->id) == 0 && strcmp(e->m->device, m->device) == 0) dup = 1;
  static int warmed;
  int warm = 0;
  if (!dup) {
    mentry *e = calloc(1, sizeof *e);
    if (e) {
      e->m = m;
      atomic_store_explicit(&e->next, atomic_load_explicit(&g_models, memory_order_relaxed),
                            memory_order_relaxed);
      atomic_store_explicit(&g_models, e, memory_order_release);
      warm = !warmed && !atomic_load_explicit(&g_inited, memory_order_relaxed);
      warmed = 1;
    }
  }
  pthread_mutex_unlock(&g_lock);
#ifdef KLARAPTOR_NO_WARMUP /* a measurement's baseline (bench/firstlaunch), never shipped */
  warm = 0;
#endif
  if (warm) warm_model(m);
}

/* The model of kernel `id` for device `dev`, by identity: the device's whole name (never a
 * part of it: a model for "NVIDIA H100" is not one for "NVIDIA H100 80GB HBM3") and, for
 * programs of version 3 that say it, its SM count. *others counts the models of that kernel
 * made for other devices, and *other describes one of them. */
static const klaraptor_model *model_for(const char *id, const klaraptor_device *dev,
                                        int *others, char *other, size_t otherlen) {
  *others = 0;
  other[0] = 0;
  for (mentry *e = atomic_load_explicit(&g_models, memory_order_acquire); e;
       e = atomic_load_explicit(&e->next, memory_order_acquire)) {
    if (strcmp(e->m->id, id) != 0) continue;
    int sms = e->m->abi_version >= 3 ? e->m->sm_count : 0;
    int named = strcmp(e->m->device, dev->name) == 0;
    if (named && (sms <= 0 || sms == dev->sm_count)) return e->m;
    (*others)++;
    if (named)
      snprintf(other, otherlen, "%s with %d SMs", e->m->device, sms);
    else
      snprintf(other, otherlen, "%s", e->m->device);
  }
  return NULL;
}

/* id pointer -> entry. The pass passes a constant string per call site; the same id from
 * another translation unit is another pointer and gets its own slot. */
typedef struct idnode {
  const char *ptr;
  kentry *e;
} idnode;

#define IDCACHE_SLOTS 1024
#define IDCACHE_PROBES 16
static idnode *_Atomic g_idcache[IDCACHE_SLOTS];

static kentry *kernel_for_id(const char *id) {
  size_t h = (size_t)mix64((uint64_t)(uintptr_t)id);
  for (size_t i = 0; i < IDCACHE_PROBES; i++) {
    idnode *n =
        atomic_load_explicit(&g_idcache[(h + i) % IDCACHE_SLOTS], memory_order_acquire);
    if (!n) break;
    if (n->ptr == id) return n->e;
  }
  kentry *e = registry_find(id);
  if (!e) return NULL; /* not cached: the kernel may be registered later (dlopen) */
  idnode *nn = malloc(sizeof *nn);
  if (!nn) return e;
  nn->ptr = id;
  nn->e = e;
  for (size_t i = 0; i < IDCACHE_PROBES; i++) {
    idnode *expected = NULL;
    if (atomic_compare_exchange_strong_explicit(&g_idcache[(h + i) % IDCACHE_SLOTS],
                                                &expected, nn, memory_order_release,
                                                memory_order_acquire))
      return e;
    if (expected->ptr == id) break;
  }
  free(nn); /* already there, or the neighbourhood is full: look up by string next time */
  return e;
}

/* ---------------------------------------------------------------------------------------- */
/* Environment                                                                              */

typedef struct force_entry {
  char *kernel;
  unsigned block[3];
} force_entry;

typedef struct config {
  int disabled;
  int log_fd; /* -1: no logging */
  int log_fd_owned;
  force_entry *force;
  size_t n_force;
  int refine_k;      /* the model's shapes refinement tries; 0: no refinement */
  int refine_walk;   /* 1: refinement walks to the neighbours of the best shape */
  int refine_span;   /* 1: the model's candidates span its shapes (rf_new); 0: its first k */
  double refine_budget; /* the share of a key's kernel time its tries may cost; <0: no limit */
  char *choices_dir; /* the choices cache; NULL: off */
} config;

#define REFINE_DEFAULT_K 3
#define REFINE_MAX_K 8
#define REFINE_DEFAULT_BUDGET 0.01

static config g_cfg = {0, -1, 0, NULL, 0, REFINE_DEFAULT_K, 1, 1, REFINE_DEFAULT_BUDGET, NULL};

/* Parses "<bx>[x<by>[x<bz>]]"; returns 0 on success. */
static int parse_shape(const char *s, size_t n, unsigned out[3]) {
  size_t i = 0;
  int d = 0;
  out[0] = out[1] = out[2] = 1;
  for (;;) {
    if (d == 3) return -1;
    if (i >= n || s[i] < '0' || s[i] > '9') return -1;
    uint64_t v = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
      v = v * 10 + (uint64_t)(s[i] - '0');
      if (v > INT_MAX) return -1;
      i++;
    }
    if (v == 0) return -1;
    out[d++] = (unsigned)v;
    if (i == n) return 0;
    if (s[i] != 'x' && s[i] != 'X') return -1;
    i++;
  }
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Splits spec into entries at commas outside <...> and (...) (template arguments may hold
 * commas); each entry is "<kernel>:<shape>", the shape after the entry's last colon (names
 * may hold "::"). Calls `entry` for well-formed entries, `bad` for the others; empty
 * entries are skipped. */
static int parse_force_spec(const char *spec, void (*entry)(void *, const char *, size_t,
                                                            const unsigned[3]),
                            void (*bad)(void *, const char *, size_t), void *ctx) {
  int good = 0;
  const char *p = spec;
  while (*p) {
    const char *q = p;
    int depth = 0;
    while (*q && !(*q == ',' && depth == 0)) {
      if (*q == '<' || *q == '(') depth++;
      if ((*q == '>' || *q == ')') && depth > 0) depth--;
      q++;
    }
    const char *a = p, *b = q;
    while (a < b && is_space(*a)) a++;
    while (b > a && is_space(b[-1])) b--;
    if (a < b) {
      const char *colon = NULL;
      for (const char *c = a; c < b; c++)
        if (*c == ':') colon = c;
      unsigned blk[3];
      const char *ne = colon;
      while (ne && ne > a && is_space(ne[-1])) ne--;
      const char *ss = colon ? colon + 1 : NULL;
      while (ss && ss < b && is_space(*ss)) ss++;
      if (colon && ne > a && parse_shape(ss, (size_t)(b - ss), blk) == 0) {
        if (entry) entry(ctx, a, (size_t)(ne - a), blk);
        good++;
      } else if (bad) {
        bad(ctx, a, (size_t)(b - a));
      }
    } /* empty entries (",,", a trailing comma) are ignored */
    p = *q ? q + 1 : q;
  }
  return good;
}

static void cfg_add_force(void *ctx, const char *name, size_t n, const unsigned blk[3]) {
  config *c = ctx;
  force_entry *f = realloc(c->force, (c->n_force + 1) * sizeof *f);
  if (!f) return;
  c->force = f;
  char *s = malloc(n + 1);
  if (!s) return;
  memcpy(s, name, n);
  s[n] = 0;
  f[c->n_force].kernel = s;
  memcpy(f[c->n_force].block, blk, sizeof f[c->n_force].block);
  c->n_force++;
}

static void cfg_bad_force(void *ctx, const char *s, size_t n) {
  (void)ctx;
  warn("KLARAPTOR_FORCE: ignoring malformed entry \"%.*s\" (expected "
       "<kernel>:<bx>[x<by>[x<bz>]] with positive integers)",
       (int)n, s);
}

/* KLARAPTOR_CHOICES (off/0: none), else $XDG_CACHE_HOME/klaraptor/choices, else
 * $HOME/.cache/klaraptor/choices; NULL when off or there is no home. */
static char *choices_dir_from_env(void) {
  const char *c = getenv("KLARAPTOR_CHOICES");
  char buf[4096];
  if (c && *c) {
    if (strcmp(c, "off") == 0 || strcmp(c, "0") == 0) return NULL;
    snprintf(buf, sizeof buf, "%s", c);
  } else {
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (x && *x)
      snprintf(buf, sizeof buf, "%s/klaraptor/choices", x);
    else if (h && *h)
      snprintf(buf, sizeof buf, "%s/.cache/klaraptor/choices", h);
    else
      return NULL;
  }
  return strdup(buf);
}

/* Parses the environment into c. quiet (the warm-up at load, below): nothing is seen, so that
 * the real read at the first launch is the one that speaks: no warning, no log file opened
 * (nor created), nothing written; c keeps what it parsed, for the caller to free. */
static void read_env(config *c, int quiet) {
  const char *d = getenv("KLARAPTOR_DISABLE");
  c->disabled = d && *d && strcmp(d, "0") != 0;
  const char *f = getenv("KLARAPTOR_FORCE");
  if (f && *f) parse_force_spec(f, cfg_add_force, quiet ? NULL : cfg_bad_force, c);
  const char *l = getenv("KLARAPTOR_LOG");
  c->log_fd = -1;
  c->log_fd_owned = 0;
  if (l && *l && strcmp(l, "0") != 0 && !quiet) {
    if (strcmp(l, "1") == 0) {
      c->log_fd = 2;
    } else {
      int fd = open(l, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0) {
        warn("KLARAPTOR_LOG: cannot open %s (%s); logging to stderr", l, strerror(errno));
        c->log_fd = 2;
      } else {
        c->log_fd = fd;
        c->log_fd_owned = 1;
      }
    }
  }
  c->refine_k = REFINE_DEFAULT_K;
  const char *r = getenv("KLARAPTOR_REFINE");
  if (r && *r && strcmp(r, "on") != 0) {
    char *end = NULL;
    long v = strtol(r, &end, 10);
    if (strcmp(r, "off") == 0)
      c->refine_k = 0;
    else if (end && *end == 0 && end != r && v >= 0 && v <= REFINE_MAX_K)
      c->refine_k = (int)v;
    else if (!quiet)
      warn("KLARAPTOR_REFINE=%s: expected off, on or a number of shapes from 0 to %d; "
           "using %d",
           r, REFINE_MAX_K, REFINE_DEFAULT_K);
  }
  const char *w = getenv("KLARAPTOR_REFINE_WALK");
  c->refine_walk = !(w && (strcmp(w, "off") == 0 || strcmp(w, "0") == 0));
  const char *sp = getenv("KLARAPTOR_REFINE_SPAN");
  c->refine_span = !(sp && (strcmp(sp, "off") == 0 || strcmp(sp, "0") == 0));
  c->refine_budget = REFINE_DEFAULT_BUDGET;
  const char *bu = getenv("KLARAPTOR_REFINE_BUDGET");
  if (bu && *bu) {
    char *end = NULL;
    double v = strtod(bu, &end);
    if (strcmp(bu, "off") == 0)
      c->refine_budget = -1;
    else if (end && end != bu && (*end == 0 || strcmp(end, "%") == 0) && v > 0 && v <= 100)
      c->refine_budget = v / 100;
    else if (!quiet)
      warn("KLARAPTOR_REFINE_BUDGET=%s: expected a percentage above 0 and at most 100, or off; "
           "using %g",
           bu, REFINE_DEFAULT_BUDGET * 100);
  }
  free(c->choices_dir);
  c->choices_dir = choices_dir_from_env();
  if (c->disabled && c->log_fd >= 0) {
    static const char msg[] =
        "klaraptor: KLARAPTOR_DISABLE is set: every launch keeps the program's dims\n";
    write_all(c->log_fd, msg, sizeof msg - 1);
  }
}

static inline void ensure_init(void) {
  if (atomic_load_explicit(&g_inited, memory_order_acquire)) return;
  pthread_mutex_lock(&g_lock);
  if (!atomic_load_explicit(&g_inited, memory_order_relaxed)) {
    read_env(&g_cfg, 0);
    atomic_store_explicit(&g_inited, 1, memory_order_release);
  }
  pthread_mutex_unlock(&g_lock);
}

static const force_entry *forced_for(const klaraptor_kernel *k) {
  for (size_t i = g_cfg.n_force; i-- > 0;) {
    const char *n = g_cfg.force[i].kernel;
    if ((k->name && strcmp(n, k->name) == 0) || strcmp(n, k->id) == 0) return &g_cfg.force[i];
  }
  return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Devices                                                                                  */

#ifndef KLARAPTOR_NO_CUDART
/* What cudaGetDeviceProperties fills (cudart_query); under g_lock. */
static union {
  struct cudaDeviceProp p;
  char pad[16384];
} g_props;

static int cudart_current(int *ordinal) {
  cudaError_t e = cudaGetDevice(ordinal);
  if (e != cudaSuccess) {
    (void)cudaGetLastError(); /* do not leave our error for the program's check to find */
    return (int)e;
  }
  return 0;
}

static int cudart_query(int ordinal, klaraptor_device *dev, char *err, size_t errlen) {
  static const struct {
    enum cudaDeviceAttr attr;
    size_t off;
  } attrs[] = {
      {cudaDevAttrMultiProcessorCount, offsetof(klaraptor_device, sm_count)},
      {cudaDevAttrWarpSize, offsetof(klaraptor_device, warp_size)},
      {cudaDevAttrMaxThreadsPerBlock, offsetof(klaraptor_device, max_threads_per_block)},
      {cudaDevAttrMaxBlockDimX, offsetof(klaraptor_device, max_block_dim[0])},
      {cudaDevAttrMaxBlockDimY, offsetof(klaraptor_device, max_block_dim[1])},
      {cudaDevAttrMaxBlockDimZ, offsetof(klaraptor_device, max_block_dim[2])},
      {cudaDevAttrMaxGridDimX, offsetof(klaraptor_device, max_grid_dim[0])},
      {cudaDevAttrMaxGridDimY, offsetof(klaraptor_device, max_grid_dim[1])},
      {cudaDevAttrMaxGridDimZ, offsetof(klaraptor_device, max_grid_dim[2])},
      {cudaDevAttrMaxThreadsPerMultiProcessor, offsetof(klaraptor_device, max_threads_per_sm)},
      {cudaDevAttrMaxBlocksPerMultiprocessor, offsetof(klaraptor_device, max_blocks_per_sm)},
      {cudaDevAttrMaxRegistersPerMultiprocessor, offsetof(klaraptor_device, regs_per_sm)},
      {cudaDevAttrMaxRegistersPerBlock, offsetof(klaraptor_device, regs_per_block)},
      {cudaDevAttrMaxSharedMemoryPerBlock, offsetof(klaraptor_device, smem_per_block)},
      {cudaDevAttrMaxSharedMemoryPerBlockOptin, offsetof(klaraptor_device, smem_per_block_optin)},
      {cudaDevAttrMaxSharedMemoryPerMultiprocessor, offsetof(klaraptor_device, smem_per_sm)},
      {cudaDevAttrComputeCapabilityMajor, offsetof(klaraptor_device, cc_major)},
      {cudaDevAttrComputeCapabilityMinor, offsetof(klaraptor_device, cc_minor)},
  };
  memset(dev, 0, sizeof *dev);
  dev->ordinal = ordinal;
  for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
    int v = 0;
    cudaError_t e = cudaDeviceGetAttribute(&v, attrs[i].attr, ordinal);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      snprintf(err, errlen, "cudaDeviceGetAttribute(%d) on device %d: %s", (int)attrs[i].attr,
               ordinal, cudaGetErrorString(e));
      return -1;
    }
    memcpy((char *)dev + attrs[i].off, &v, sizeof v);
  }
  /* Identity only: a device that does not say leaves 0. The SM and memory clocks are not
   * asked for: the CUDA runtime takes about half a millisecond for each (H200, driver 580,
   * 2026-11-28), at the first launch of every instrumented program. */
  int bus = 0;
  if (cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    bus = 0;
  }
  dev->mem_bus_bits = bus;
  /* Only the name is read from cudaDeviceProp. It is the first member in every CUDA
   * version, but the struct's size is not: the cudart this is linked with may be older or
   * newer than the headers it was compiled with, so the buffer is far larger than needed.
   * It is not cleared first: cudaGetDeviceProperties fills what it has, and only the name,
   * which it always fills, is read (clearing it touched four pages, four page faults at
   * the first launch; warm_up touches the part these headers know). */
  cudaError_t e = cudaGetDeviceProperties(&g_props.p, ordinal);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(err, errlen, "cudaGetDeviceProperties on device %d: %s", ordinal,
             cudaGetErrorString(e));
    return -1;
  }
  memcpy(dev->name, g_props.p.name, sizeof dev->name);
  dev->name[sizeof dev->name - 1] = 0;
  return 0;
}
#define DEFAULT_CURRENT cudart_current
#define DEFAULT_QUERY cudart_query
#else
static int nocudart_current(int *ordinal) {
  *ordinal = -1;
  return 35; /* cudaErrorInsufficientDriver: there is no runtime to ask */
}
static int nocudart_query(int ordinal, klaraptor_device *dev, char *err, size_t errlen) {
  (void)ordinal;
  (void)dev;
  snprintf(err, errlen, "built without the CUDA runtime");
  return -1;
}
#define DEFAULT_CURRENT nocudart_current
#define DEFAULT_QUERY nocudart_query
#endif

static klaraptor_current_device_fn g_current = DEFAULT_CURRENT;
static klaraptor_query_device_fn g_query = DEFAULT_QUERY;

#define MAX_DEVICES 64
static klaraptor_device *g_devices[MAX_DEVICES]; /* under g_lock */

/* Under g_lock. Returns NULL (reason in err) when the device cannot be described. */
static const klaraptor_device *device_locked(int ordinal, char *err, size_t errlen) {
  static klaraptor_device scratch;
  if (ordinal >= 0 && ordinal < MAX_DEVICES && g_devices[ordinal]) return g_devices[ordinal];
  klaraptor_device d;
  memset(&d, 0, sizeof d);
  if (g_query(ordinal, &d, err, errlen) != 0) return NULL;
  d.ordinal = ordinal;
  d.name[sizeof d.name - 1] = 0;
  if (ordinal >= 0 && ordinal < MAX_DEVICES) {
    klaraptor_device *p = malloc(sizeof *p);
    if (p) {
      *p = d;
      g_devices[ordinal] = p;
      return p;
    }
  }
  scratch = d;
  return &scratch;
}

void klaraptor__set_device_query(klaraptor_current_device_fn current,
                                 klaraptor_query_device_fn query) {
  pthread_mutex_lock(&g_lock);
  g_current = current ? current : DEFAULT_CURRENT;
  g_query = query ? query : DEFAULT_QUERY;
  for (int i = 0; i < MAX_DEVICES; i++) {
    free(g_devices[i]);
    g_devices[i] = NULL;
  }
  pthread_mutex_unlock(&g_lock);
}

/* ---------------------------------------------------------------------------------------- */
/* Shape checks                                                                             */

/* 0 when the block shape can be launched with kernel k on dev for data; else a reason in
 * sb. */
static int check_block(const klaraptor_kernel *k, const klaraptor_device *dev,
                       const int64_t *data, const uint32_t b[3], sbuf *why) {
  static const char axis[3] = {'x', 'y', 'z'};
  for (int i = 0; i < 3; i++) {
    if (b[i] == 0) {
      sb_printf(why, "block %c is 0", axis[i]);
      return -1;
    }
    if (i >= k->dim && b[i] != 1) {
      sb_printf(why, "the kernel is %d-dimensional but block %c is %u", k->dim, axis[i], b[i]);
      return -1;
    }
    if (dev->max_block_dim[i] > 0 && b[i] > (uint32_t)dev->max_block_dim[i]) {
      sb_printf(why, "block %c %u exceeds the device's limit of %d", axis[i], b[i],
                dev->max_block_dim[i]);
      return -1;
    }
  }
  uint64_t threads = (uint64_t)b[0] * b[1] * b[2];
  if (dev->max_threads_per_block > 0 && threads > (uint64_t)dev->max_threads_per_block) {
    sb_printf(why, "%" PRIu64 " threads per block exceed the device's limit of %d", threads,
              dev->max_threads_per_block);
    return -1;
  }
  if (k->regs_per_thread > 0 && dev->regs_per_block > 0) {
    /* Registers are allocated per warp, in units of 256. */
    uint64_t warp = dev->warp_size > 0 ? (uint64_t)dev->warp_size : 32;
    uint64_t per_warp = ((uint64_t)k->regs_per_thread * warp + 255) / 256 * 256;
    uint64_t need = per_warp * ((threads + warp - 1) / warp);
    if (need > (uint64_t)dev->regs_per_block) {
      sb_printf(why,
                "%d registers per thread x %" PRIu64 " threads need %" PRIu64
                " registers, the device has %d per block",
                k->regs_per_thread, threads, need, dev->regs_per_block);
      return -1;
    }
  }
  if (k->static_smem > 0 && dev->smem_per_block > 0 && k->static_smem > dev->smem_per_block) {
    sb_printf(why, "%d bytes of static shared memory exceed the device's %d per block",
              k->static_smem, dev->smem_per_block);
    return -1;
  }
  /* Dynamic shared memory that follows the block: the amount for this shape, within the
   * default limit per block (the opt-in limit needs cudaFuncSetAttribute, which a launch
   * does not tell the runtime about). */
  if (kshmem(k)) {
    int64_t dyn = kshmem(k)(data, b);
    if (dyn < 0) {
      sb_printf(why, "its shared memory cannot be evaluated (the shmem formula)");
      return -1;
    }
    int64_t total = dyn + (k->static_smem > 0 ? k->static_smem : 0);
    if (dev->smem_per_block > 0 && total > dev->smem_per_block) {
      sb_printf(why, "it needs %" PRId64 " bytes of shared memory, the device has %d per block",
                total, dev->smem_per_block);
      return -1;
    }
  }
  return 0;
}

static int compute_grid(const klaraptor_kernel *k, const klaraptor_device *dev,
                        const int64_t *data, const uint32_t b[3], uint32_t g[3], sbuf *why) {
  static const char axis[3] = {'x', 'y', 'z'};
  g[0] = g[1] = g[2] = 1;
  if (k->grid(data, b, g) != 0) {
    sb_printf(why, "the grid formula cannot be evaluated");
    return -1;
  }
  for (int i = 0; i < 3; i++) {
    if (g[i] == 0) {
      sb_printf(why, "grid %c is 0", axis[i]);
      return -1;
    }
    if (dev->max_grid_dim[i] > 0 && g[i] > (uint32_t)dev->max_grid_dim[i]) {
      sb_printf(why, "grid %c %u exceeds the device's limit of %d", axis[i], g[i],
                dev->max_grid_dim[i]);
      return -1;
    }
  }
  return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Memo                                                                                     */

typedef struct decision {
  int keep; /* 1: the launch keeps the program's dims */
  uint32_t block[3], grid[3];
} decision;

struct refine;

/* The model's shapes for a new key, best first (klaraptor_model.rank): ranked by the key's
 * decision when the key may refine (rank's first is what select picks, so the one evaluation
 * of the shapes serves the decision and the candidates), kept for refinement's setup (rf_new)
 * instead of evaluating them again. */
#define MODEL_RANK_MAX 32
typedef struct model_rank {
  int ask;   /* the k asked for */
  int total; /* what rank returned */
  uint32_t blocks[MODEL_RANK_MAX][3];
} model_rank;

typedef struct memo_node {
  const kentry *e;
  int ordinal;
  int32_t n;
  uint64_t hash;
  _Atomic int settled; /* 0 while refinement tries shapes: the launch takes the slow path */
  decision d;          /* final once settled; while unsettled, the model's first choice */
  struct refine *r;    /* under g_lock; NULL when the node never refined */
  /* under g_lock: 1 while refinement's setup waits (rf_setup_locked), with what it needs */
  int setup;
  model_rank *ranked; /* under g_lock: while the setup waits, the decision's ranking (or NULL) */
  const klaraptor_model *model;
  const klaraptor_device *dev;
  uint32_t pb[3], pg[3]; /* the program's own block and grid */
  int64_t data[];
} memo_node;

typedef struct memo_table {
  size_t mask;
  size_t count;
  struct memo_table *retired; /* older tables, kept for readers still probing them */
  memo_node *_Atomic slots[];
} memo_table;

#define MEMO_MIN_SLOTS 64
#define MEMO_MAX_ENTRIES ((size_t)1 << 20)

static memo_table *_Atomic g_memo;
static int g_memo_full_logged; /* under g_lock */

static inline uint64_t memo_hash(const kentry *e, int ordinal, int32_t n, const int64_t *data) {
  uint64_t h = mix64((uint64_t)(uintptr_t)e ^ ((uint64_t)(uint32_t)ordinal << 40));
  for (int32_t i = 0; i < n; i++) h = mix64(h ^ (uint64_t)data[i]) + (uint64_t)i;
  return h;
}

static inline const memo_node *memo_find(const memo_table *t, uint64_t h, const kentry *e,
                                         int ordinal, int32_t n, const int64_t *data) {
  if (!t) return NULL;
  for (size_t i = (size_t)h & t->mask;; i = (i + 1) & t->mask) {
    const memo_node *m = atomic_load_explicit(&t->slots[i], memory_order_acquire);
    if (!m) return NULL;
    if (m->hash == h && m->e == e && m->ordinal == ordinal &&
        (n == 0 || memcmp(m->data, data, (size_t)n * sizeof *data) == 0))
      return m;
  }
}

static void memo_place(memo_table *t, memo_node *m) {
  size_t i = (size_t)m->hash & t->mask;
  while (atomic_load_explicit(&t->slots[i], memory_order_relaxed)) i = (i + 1) & t->mask;
  atomic_store_explicit(&t->slots[i], m, memory_order_release);
  t->count++;
}

/* Under g_lock. Returns 0 when inserted. */
static int memo_insert_locked(memo_node *m) {
  memo_table *t = atomic_load_explicit(&g_memo, memory_order_relaxed);
  size_t count = t ? t->count : 0;
  if (count >= MEMO_MAX_ENTRIES) return -1;
  if (!t || (count + 1) * 2 > t->mask + 1) {
    size_t slots = t ? (t->mask + 1) * 2 : MEMO_MIN_SLOTS;
    memo_table *nt = calloc(1, sizeof *nt + slots * sizeof nt->slots[0]);
    if (!nt) return -1;
    nt->mask = slots - 1;
    if (t) {
      for (size_t i = 0; i <= t->mask; i++) {
        memo_node *o = atomic_load_explicit(&t->slots[i], memory_order_relaxed);
        if (o) memo_place(nt, o);
      }
    }
    nt->retired = t;
    atomic_store_explicit(&g_memo, nt, memory_order_release);
    t = nt;
  }
  memo_place(t, m);
  return 0;
}

size_t klaraptor__memo_size(void) {
  pthread_mutex_lock(&g_lock);
  memo_table *t = atomic_load_explicit(&g_memo, memory_order_relaxed);
  size_t n = t ? t->count : 0;
  pthread_mutex_unlock(&g_lock);
  return n;
}

/* ---------------------------------------------------------------------------------------- */
/* Decisions                                                                                */

typedef struct logged_id {
  struct logged_id *next;
  char id[];
} logged_id;
static logged_id *g_unknown_logged; /* under g_lock */
static size_t g_n_unknown_logged;

static void log_line(const char *s, size_t n) {
  if (g_cfg.log_fd >= 0) write_all(g_cfg.log_fd, s, n);
}

static void log_unknown(const char *id) {
  if (g_cfg.log_fd < 0) return;
  pthread_mutex_lock(&g_lock);
  int seen = 0;
  for (logged_id *l = g_unknown_logged; l; l = l->next)
    if (strcmp(l->id, id) == 0) seen = 1;
  if (!seen && g_n_unknown_logged < 1024) {
    size_t n = strlen(id);
    logged_id *l = malloc(sizeof *l + n + 1);
    if (l) {
      memcpy(l->id, id, n + 1);
      l->next = g_unknown_logged;
      g_unknown_logged = l;
      g_n_unknown_logged++;
    }
    char buf[1024];
    int len = snprintf(buf, sizeof buf,
                       "klaraptor: unknown kernel id %s: the launch keeps its dims\n", id);
    if (len > (int)sizeof buf - 1) len = (int)sizeof buf - 1;
    if (len > 0) log_line(buf, (size_t)len);
  }
  pthread_mutex_unlock(&g_lock);
}

static void log_mismatch(kentry *e, int32_t n_data) {
  if (g_cfg.log_fd < 0) return;
  pthread_mutex_lock(&g_lock);
  if (!e->mismatch_logged) {
    e->mismatch_logged = 1;
    char buf[1024];
    int len = snprintf(buf, sizeof buf,
                       "klaraptor: %s: the launch passes %d data values, the descriptor "
                       "declares %d: the launch keeps its dims\n",
                       kname(e->k), (int)n_data, e->k->n_data);
    if (len > (int)sizeof buf - 1) len = (int)sizeof buf - 1;
    if (len > 0) log_line(buf, (size_t)len);
  }
  pthread_mutex_unlock(&g_lock);
}

static int rf_rank_ask(void);

/* Under g_lock. Fills d and the source text; *devp is the device (NULL if unknown). With rk
 * (the key may refine), a model that ranks decides by its ranking for refinement, kept in
 * *rk (rk->total >= 1 when it is made); otherwise rk->total is left at 0. */
static void decide_locked(const kentry *e, int cur_rc, int ordinal, const int64_t *data,
                          decision *d, sbuf *src, const klaraptor_device **devp,
                          const klaraptor_model **modelp, model_rank *rk) {
  const klaraptor_kernel *k = e->k;
  char errbuf[512];
  sbuf why = {errbuf, sizeof errbuf, 0};
  errbuf[0] = 0;
  d->keep = 1;
  *devp = NULL;
  *modelp = NULL;
  if (cur_rc != 0) {
    sb_printf(src, "fallback: no current device (error %d)", cur_rc);
    return;
  }
  const klaraptor_device *dev = device_locked(ordinal, errbuf, sizeof errbuf);
  PROBE("device_query");
  if (!dev) {
    sb_printf(src, "fallback: device query failed: %s", errbuf);
    return;
  }
  *devp = dev;
  const force_entry *f = forced_for(k);
  if (f) {
    uint32_t b[3] = {f->block[0], f->block[1], f->block[2]};
    if (check_block(k, dev, data, b, &why) == 0 && compute_grid(k, dev, data, b, d->grid, &why) == 0) {
      d->keep = 0;
      memcpy(d->block, b, sizeof b);
      sb_printf(src, "forced");
    } else {
      sb_printf(src, "fallback: forced block %ux%ux%u rejected: %s", b[0], b[1], b[2], errbuf);
    }
    return;
  }
  int others = 0;
  char other[300];
  const klaraptor_model *model = model_for(k->id, dev, &others, other, sizeof other);
  int (*select)(const int64_t *, const klaraptor_device *, uint32_t[3], double *) =
      model ? model->select : NULL;
  if (!select && !k->select) {
    if (others)
      sb_printf(src, "fallback: no model for this device (the model is for %s)", other);
    else
      sb_printf(src, "program");
    return;
  }
  if (!select && (!k->model_device || strcmp(k->model_device, dev->name) != 0)) {
    sb_printf(src, "fallback: no model for this device (the model is for %s)",
              k->model_device ? k->model_device : "no device");
    return;
  }
  uint32_t b[3] = {1, 1, 1};
  double predicted = -1;
  PROBE("model_for");
  int rc;
  if (rk && select && model->abi_version >= 2 && model->rank) {
    /* The shapes refinement ranks after the launch (rf_new), ranked now instead of select's
     * one: the same evaluation of every shape, the first the one select picks. */
    double us[MODEL_RANK_MAX];
    int ask = rf_rank_ask();
    int total = model->rank(data, dev, ask, rk->blocks, us);
    rc = total >= 1 ? 0 : 1;
    if (!rc) {
      memcpy(b, rk->blocks[0], sizeof b);
      predicted = us[0];
      rk->ask = ask;
      rk->total = total;
    }
  } else {
    rc = select ? select(data, dev, b, &predicted) : k->select(data, dev, b);
  }
  PROBE("select");
  if (rc != 0) {
    sb_printf(src, "fallback: the model failed (returned %d)", rc);
    return;
  }
  int ok = check_block(k, dev, data, b, &why) == 0;
  if (ok && k->allowed && !k->allowed(data, b)) {
    sb_printf(&why, "it violates the kernel's constraints");
    ok = 0;
  }
  if (!ok || compute_grid(k, dev, data, b, d->grid, &why) != 0) {
    sb_printf(src, "fallback: model block %ux%ux%u rejected: %s", b[0], b[1], b[2], errbuf);
    return;
  }
  d->keep = 0;
  memcpy(d->block, b, sizeof b);
  *modelp = model;
  /* The prediction is for the log line only: without one, a double's formatting (the C
   * library's slowest, cold at the process's first decision) is not on the launch's way. */
  if (predicted >= 0 && g_cfg.log_fd >= 0)
    sb_printf(src, "model predicted_us=%.3g", predicted);
  else
    sb_printf(src, "model");
  if (model && model->abi_version >= 4 && model->transferred_from)
    sb_printf(src, " (transferred from %s)", model->transferred_from);
}

/* " <label>=<value>..." of a launch's data values. */
static void sb_data(sbuf *b, const klaraptor_kernel *k, const int64_t *data) {
  for (int i = 0; i < k->n_data; i++) {
    const char *label = k->data_names[i];
    if (label)
      sb_printf(b, " %s=%" PRId64, label, data[i]);
    else
      sb_printf(b, " d%d=%" PRId64, i, data[i]);
  }
}

static void log_decision(const kentry *e, const int64_t *data, const decision *d,
                         const uint32_t pb[3], const uint32_t pg[3], const char *src,
                         int ordinal, const klaraptor_device *dev) {
  char buf[4096];
  sbuf b = {buf, sizeof buf - 1, 0};
  sb_printf(&b, "klaraptor: %s", kname(e->k));
  sb_data(&b, e->k, data);
  const uint32_t *bl = d->keep ? pb : d->block, *gr = d->keep ? pg : d->grid;
  sb_printf(&b, " block=%ux%ux%u grid=%ux%ux%u source=%s device=%d:%s", bl[0], bl[1], bl[2],
            gr[0], gr[1], gr[2], src, ordinal, dev ? dev->name : "unknown");
  if (!d->keep)
    sb_printf(&b, " program_block=%ux%ux%u", pb[0], pb[1], pb[2]);
  buf[b.len++] = '\n';
  log_line(buf, b.len);
}

static inline void apply(const decision *d, uint64_t *grid_xy, uint32_t *grid_z,
                         uint64_t *block_xy, uint32_t *block_z) {
  if (d->keep) return;
  *grid_xy = (uint64_t)d->grid[0] | ((uint64_t)d->grid[1] << 32);
  *grid_z = d->grid[2];
  *block_xy = (uint64_t)d->block[0] | ((uint64_t)d->block[1] << 32);
  *block_z = d->block[2];
}

/* Set by the profiling runtime (klaraptor_prof.c) when it is linked in: told of each
 * launch of an annotated kernel, after the decision, with the dims the launch will use. */
static klaraptor_profile_note_fn _Atomic g_profile_note;

void klaraptor__set_profile_note(klaraptor_profile_note_fn fn) {
  atomic_store_explicit(&g_profile_note, fn, memory_order_release);
}

int klaraptor__shape_ok(const klaraptor_kernel *k, const int64_t *data, const uint32_t b[3],
                        uint32_t g[3], char *why, size_t whylen) {
  sbuf w = {why, whylen, 0};
  if (whylen) why[0] = 0;
  int ordinal = -1;
  int rc = g_current(&ordinal);
  if (rc != 0) {
    sb_printf(&w, "no current device (error %d)", rc);
    return -1;
  }
  pthread_mutex_lock(&g_lock);
  const klaraptor_device *dev = device_locked(ordinal, why, whylen);
  int ok = dev && check_block(k, dev, data, b, &w) == 0;
  if (ok && k->allowed && !k->allowed(data, b)) {
    sb_printf(&w, "it violates the kernel's constraints");
    ok = 0;
  }
  if (ok) ok = compute_grid(k, dev, data, b, g, &w) == 0;
  pthread_mutex_unlock(&g_lock);
  return ok ? 0 : -1;
}

static void note_profile(const kentry *e, const int64_t *data, const uint64_t *grid_xy,
                         const uint32_t *grid_z, const uint64_t *block_xy,
                         const uint32_t *block_z) {
  klaraptor_profile_note_fn fn = atomic_load_explicit(&g_profile_note, memory_order_acquire);
  if (fn) fn(e->k, data, *grid_xy, *grid_z, *block_xy, *block_z);
}

/* A shape the runtime may launch for a key: the limits, the constraints, the grid. */
static int rf_shape_ok(const klaraptor_kernel *k, const klaraptor_device *dev,
                       const int64_t *data, const uint32_t b[3], uint32_t g[3]) {
  char wb[256];
  sbuf why = {wb, sizeof wb, 0};
  if (check_block(k, dev, data, b, &why) != 0) return 0;
  if (k->allowed && !k->allowed(data, b)) return 0;
  return compute_grid(k, dev, data, b, g, &why) == 0;
}

/* ---------------------------------------------------------------------------------------- */
/* The choices cache, and refinement (timing, comparisons, decisions): parts of this         */
/* translation unit, in files of their own                                                   */

#include "klaraptor_choices.inc"
#include "klaraptor_refine.inc"

/* ---------------------------------------------------------------------------------------- */
/* The warm-up at load                                                                      */

/* The process's first launch pays, on its way to the GPU, for what a process pays the first
 * time it runs anything: page faults on code and data not touched yet, the dynamic linker
 * binding each C library function at its first call, the C library's first formatting and
 * first file-system call. On an H200 that was most of the 21 us the first launch spent
 * reading the environment (bench/results/refine-paired-h200-2026-11-28.md: read at
 * registration instead, it cost nothing). The environment must still be read at the first
 * launch, as documented (a program may set the variables in main), so the first registration
 * (a constructor, before main) runs the same paths once, with nothing kept and nothing seen:
 * the environment parsed into a scratch configuration without a warning and without opening
 * (or creating) the log file; a file-system call on the root; the pages the first decision
 * writes; the kernel's shape checks and grid formula evaluated on a made-up device, as
 * registration evaluates them for a kernel registered twice; a decision's log line formatted
 * into a scratch buffer. Never a CUDA call (a constructor must not initialise CUDA), nothing
 * written outside this process's memory, no thread. The first launch still reads the
 * environment itself, warm by then. */
static void warm_up(const kentry *e) {
  config c = {0, -1, 0, NULL, 0, REFINE_DEFAULT_K, 1, 1, REFINE_DEFAULT_BUDGET, NULL};
  read_env(&c, 1);
  /* The first decision's file-system call, the look at the choices cache's directory, made
   * on the root (always there, never mounted on demand): the directory itself is not looked
   * at before the first launch, which may find it created, or another named, by main. */
  struct stat st;
  (void)stat("/", &st);
  for (size_t i = 0; i < c.n_force; i++) free(c.force[i].kernel);
  free(c.force);
  free(c.choices_dir);
#ifndef KLARAPTOR_NO_CUDART
  /* the pages the device's description is written into */
  pthread_mutex_lock(&g_lock);
  memset(&g_props.p, 0, sizeof g_props.p);
  pthread_mutex_unlock(&g_lock);
#endif
  /* The id cache's pages, written at the first launch of each call site: a compare-and-swap
   * of an empty slot with an empty slot changes nothing, whoever races it. */
  for (size_t i = 0; i < IDCACHE_SLOTS; i += 4096 / sizeof g_idcache[0]) {
    idnode *none = NULL;
    (void)atomic_compare_exchange_strong(&g_idcache[i], &none, NULL);
  }
  /* The decision's code: the lookup, the shape checks, the grid (on a device without limits,
   * at made-up data values), the source and the log line (into a scratch buffer; a double's
   * first formatting is the C library's slowest). */
  const klaraptor_kernel *k = e->k;
  (void)registry_find(k->id);
  klaraptor_device dev;
  memset(&dev, 0, sizeof dev);
  int64_t data[64];
  for (int i = 0; i < 64; i++) data[i] = 1024;
  uint32_t b[3] = {32, 1, 1}, g[3] = {1, 1, 1};
  char *buf = malloc(1024);
  if (!buf) return;
  sbuf s = {buf, 1024, 0};
  if (check_block(k, &dev, data, b, &s) == 0 && (!k->allowed || k->allowed(data, b)))
    (void)compute_grid(k, &dev, data, b, g, &s);
  s.len = 0;
  sb_printf(&s, "klaraptor: %s", kname(k));
  if (k->n_data <= 64) sb_data(&s, k, data);
  sb_printf(&s, " block=%ux%ux%u grid=%ux%ux%u source=model predicted_us=%.3g device=%d:%s",
            b[0], b[1], b[2], g[0], g[1], g[2], 1.5, 0, "unknown");
  /* the launch's test for a forced shape's fallback (its result used, so that it is made) */
  if (strncmp(buf, "fallback: forced", 16) == 0) sb_printf(&s, " (forced)");
  free(buf);
}

/* ---------------------------------------------------------------------------------------- */
/* The launch path                                                                          */

/* The program's dims of a launch, unpacked. */
static void unpack(const uint64_t *grid_xy, const uint32_t *grid_z, const uint64_t *block_xy,
                   const uint32_t *block_z, uint32_t pb[3], uint32_t pg[3]) {
  pb[0] = (uint32_t)*block_xy;
  pb[1] = (uint32_t)(*block_xy >> 32);
  pb[2] = *block_z;
  pg[0] = (uint32_t)*grid_xy;
  pg[1] = (uint32_t)(*grid_xy >> 32);
  pg[2] = *grid_z;
}

/* The dynamic shared memory of a launch given the dims d (nothing when it keeps the
 * program's: the program's amount is the one for its shape). */
static inline void apply_shmem(const kentry *e, const int64_t *data, const decision *d,
                               uint64_t *shmem) {
  if (!shmem || d->keep || !kshmem(e->k)) return;
  int64_t v = kshmem(e->k)(data, d->block);
  if (v >= 0) *shmem = (uint64_t)v;
}

static uint64_t launch(const char *id, int32_t n_data, const int64_t *data, uint64_t *grid_xy,
                       uint32_t *grid_z, uint64_t *block_xy, uint32_t *block_z,
                       uint64_t *shmem, void *stream, int can_time) {
  if (!id || !grid_xy || !grid_z || !block_xy || !block_z || n_data < 0 ||
      (n_data > 0 && !data))
    return 0;
  PROBE("entry");
  ensure_init();
  PROBE("init");
  if (g_cfg.disabled) {
    /* The program's own launch, as given; the whole-run timing (KLARAPTOR_LAUNCH_TIMES) still
     * times it: the program's own shape's whole run. */
    if (atomic_load_explicit(&g_profile_note, memory_order_acquire)) {
      kentry *e = kernel_for_id(id);
      if (e && !atomic_load_explicit(&e->conflict, memory_order_relaxed) &&
          n_data == e->k->n_data)
        note_profile(e, data, grid_xy, grid_z, block_xy, block_z);
    }
    return 0;
  }
  kentry *e = kernel_for_id(id);
  if (!e) {
    log_unknown(id);
    return 0;
  }
  if (atomic_load_explicit(&e->conflict, memory_order_relaxed)) return 0;
  if (n_data != e->k->n_data) {
    log_mismatch(e, n_data);
    return 0;
  }
  int ordinal = -1;
  PROBE("kernel_for_id");
  int cur_rc = g_current(&ordinal);
  if (cur_rc != 0) ordinal = -1;
  PROBE("current");
  uint64_t h = memo_hash(e, ordinal, n_data, data);
  const memo_node *m =
      memo_find(atomic_load_explicit(&g_memo, memory_order_acquire), h, e, ordinal, n_data, data);
  if (m && atomic_load_explicit(&m->settled, memory_order_acquire)) {
    apply(&m->d, grid_xy, grid_z, block_xy, block_z);
    apply_shmem(e, data, &m->d, shmem);
    note_profile(e, data, grid_xy, grid_z, block_xy, block_z);
    return 0;
  }

  /* A miss (decide under the lock: once per key, so one log line per new decision), or a
   * key still refining. */
  decision d;
  rf_slot *ticket = NULL;
  memo_node *setup = NULL; /* a new key whose refinement is set up after its launch */
  uint32_t pb[3], pg[3];
  unpack(grid_xy, grid_z, block_xy, block_z, pb, pg);
  pthread_mutex_lock(&g_lock);
  m = memo_find(atomic_load_explicit(&g_memo, memory_order_relaxed), h, e, ordinal, n_data,
                data);
  if (!m) {
    char srcbuf[768];
    sbuf src = {srcbuf, sizeof srcbuf, 0};
    srcbuf[0] = 0;
    const klaraptor_device *dev = NULL;
    const klaraptor_model *model = NULL;
    memset(&d, 0, sizeof d);
    PROBE("lock");
    /* A key that may refine (as below: timing possible, not the profiling variant) has its
     * shapes ranked by the decision, for refinement's candidates. */
    int may_refine = g_cfg.refine_k > 0 && timing_available() &&
                     !atomic_load_explicit(&g_profile_note, memory_order_acquire);
    model_rank rk;
    rk.total = 0;
    decide_locked(e, cur_rc, ordinal, data, &d, &src, &dev, &model, may_refine ? &rk : NULL);
    PROBE("decide");
    memo_node *nm = malloc(sizeof *nm + (size_t)n_data * sizeof(int64_t));
    int stored = 0, from_cache = 0;
    choice_rec cached;
    if (nm) {
      nm->e = e;
      nm->ordinal = ordinal;
      nm->n = n_data;
      nm->hash = h;
      nm->d = d;
      nm->r = NULL;
      nm->setup = 0;
      nm->ranked = NULL;
      atomic_init(&nm->settled, 1);
      if (n_data) memcpy(nm->data, data, (size_t)n_data * sizeof(int64_t));
      /* Refinement: a model's choice, timing possible, not the profiling variant. Its setup
       * (the choices cache, the candidates, what earlier runs measured) is not on this
       * launch's way to the GPU: this launch takes the model's choice and is never timed
       * (the first of a key in a run: loading, cold caches), and the setup is made right
       * after it is queued (klaraptor_launch_end), or at the key's next launch. */
      nm->model = model;
      nm->dev = dev;
      memcpy(nm->pb, pb, sizeof pb);
      memcpy(nm->pg, pg, sizeof pg);
      if (!d.keep && model && dev && g_cfg.refine_k > 0 && timing_available() &&
          !atomic_load_explicit(&g_profile_note, memory_order_acquire)) {
        int old_rule = 0;
        if (choices_dir_exists() &&
            choices_read(e, model, dev, data, &d, &cached, &old_rule) == 0) {
          nm->d = cached.d;
          from_cache = 1;
        } else {
          nm->setup = old_rule ? 2 : 1;
          atomic_init(&nm->settled, 0);
          if (rk.total >= 1 && (nm->ranked = malloc(sizeof rk)) != NULL) *nm->ranked = rk;
        }
      }
      stored = memo_insert_locked(nm) == 0;
      PROBE("memo_insert");
      if (!stored) {
        free(nm->ranked);
        free(nm);
        nm = NULL;
      } else if (nm->setup && can_time) {
        setup = nm; /* after the launch */
      } else if (nm->setup) {
        rf_setup_locked(nm, 0);
      }
    }
    if ((stored || !g_memo_full_logged) && g_cfg.log_fd >= 0)
      log_decision(e, data, &d, pb, pg, srcbuf, ordinal, dev);
    /* A forced shape that cannot be used is worth a word even without KLARAPTOR_LOG. */
    if ((stored || !g_memo_full_logged) && g_cfg.log_fd < 0 &&
        strncmp(srcbuf, "fallback: forced", 16) == 0)
      warn("%s: KLARAPTOR_FORCE %s", kname(e->k), srcbuf + strlen("fallback: "));
    if (nm && from_cache) rf_log_cached(nm, &cached);
    PROBE("logs");
    if (!stored && !g_memo_full_logged) {
      g_memo_full_logged = 1;
      static const char msg[] = "klaraptor: the memo is full: later decisions are made at "
                                "every launch and not logged\n";
      log_line(msg, sizeof msg - 1);
    }
    m = nm;
  }
  if (m && m != setup && m->setup) rf_setup_locked((memo_node *)m, 1); /* no launch end came */
  if (m && m != setup && !atomic_load_explicit(&m->settled, memory_order_relaxed)) {
    memo_node *mm = (memo_node *)m;
    int use = -1;
    ticket = rf_step(mm, data, ordinal, stream, can_time, &use);
    t_timed = ticket;
    if (use < 0) {
      d = mm->d;
    } else {
      const rf_cand *c = &mm->r->c[use];
      memset(&d, 0, sizeof d);
      d.keep = c->program;
      memcpy(d.block, c->block, sizeof d.block);
      memcpy(d.grid, c->grid, sizeof d.grid);
    }
  } else if (m) {
    d = m->d;
  }
  PROBE("step");
  pthread_mutex_unlock(&g_lock);
  apply(&d, grid_xy, grid_z, block_xy, block_z);
  apply_shmem(e, data, &d, shmem);
  note_profile(e, data, grid_xy, grid_z, block_xy, block_z);
  PROBE("exit");
  if (setup) return (uint64_t)(uintptr_t)setup | 1; /* klaraptor_launch_end: the setup */
  return (uint64_t)(uintptr_t)ticket;
}

void klaraptor_select(const char *id, int32_t n_data, const int64_t *data, uint64_t *grid_xy,
                      uint32_t *grid_z, uint64_t *block_xy, uint32_t *block_z) {
  (void)launch(id, n_data, data, grid_xy, grid_z, block_xy, block_z, NULL, NULL, 0);
}

void klaraptor_select_shmem(const char *id, int32_t n_data, const int64_t *data,
                            uint64_t *grid_xy, uint32_t *grid_z, uint64_t *block_xy,
                            uint32_t *block_z, uint64_t *shmem) {
  (void)launch(id, n_data, data, grid_xy, grid_z, block_xy, block_z, shmem, NULL, 0);
}

uint64_t klaraptor_launch_begin_shmem(const char *id, int32_t n_data, const int64_t *data,
                                      uint64_t *grid_xy, uint32_t *grid_z, uint64_t *block_xy,
                                      uint32_t *block_z, uint64_t *shmem, void *stream) {
  return launch(id, n_data, data, grid_xy, grid_z, block_xy, block_z, shmem, stream, 1);
}

uint64_t klaraptor_launch_begin(const char *id, int32_t n_data, const int64_t *data,
                                uint64_t *grid_xy, uint32_t *grid_z, uint64_t *block_xy,
                                uint32_t *block_z, uint64_t shmem, void *stream) {
  (void)shmem;
  return launch(id, n_data, data, grid_xy, grid_z, block_xy, block_z, NULL, stream, 1);
}

/* ---------------------------------------------------------------------------------------- */
/* Test hooks                                                                               */

void klaraptor__reset_for_tests(void) {
  pthread_mutex_lock(&g_lock);
  memo_table *t = atomic_load_explicit(&g_memo, memory_order_relaxed);
  if (t) {
    for (size_t i = 0; i <= t->mask; i++) {
      memo_node *m = atomic_load_explicit(&t->slots[i], memory_order_relaxed);
      if (m) {
        rf_free(m->r);
        free(m->ranked);
      }
      free(m);
    }
  }
  while (t) {
    memo_table *r = t->retired;
    free(t);
    t = r;
  }
  atomic_store_explicit(&g_memo, NULL, memory_order_release);
  g_memo_full_logged = 0;
  for (int i = 0; i < MAX_DEVICES; i++) {
    free(g_devices[i]);
    g_devices[i] = NULL;
  }
  while (g_unknown_logged) {
    logged_id *n = g_unknown_logged->next;
    free(g_unknown_logged);
    g_unknown_logged = n;
  }
  g_n_unknown_logged = 0;
  for (size_t b = 0; b < REG_BUCKETS; b++)
    for (kentry *e = atomic_load_explicit(&g_reg[b], memory_order_relaxed); e;
         e = atomic_load_explicit(&e->next, memory_order_relaxed))
      e->mismatch_logged = 0;
  if (g_cfg.log_fd_owned) close(g_cfg.log_fd);
  g_choices_dir_state = 0;
  g_choices_writable = 0;
  for (size_t i = 0; i < g_cfg.n_force; i++) free(g_cfg.force[i].kernel);
  free(g_cfg.force);
  g_cfg.force = NULL;
  g_cfg.n_force = 0;
  g_cfg.log_fd = -1;
  g_cfg.log_fd_owned = 0;
  g_cfg.disabled = 0;
  g_cfg.refine_k = REFINE_DEFAULT_K;
  g_cfg.refine_walk = 1;
  g_cfg.refine_span = 1;
  g_cfg.refine_budget = REFINE_DEFAULT_BUDGET;
  g_refining = 0;
  g_refining_full = 0;
  free(g_cfg.choices_dir);
  g_cfg.choices_dir = NULL;
  g_choices_warned = 0;
  t_timed = NULL;
  t_started = NULL;
  atomic_store_explicit(&g_inited, 0, memory_order_release);
  pthread_mutex_unlock(&g_lock);
  gate_reset_for_tests();
}

typedef struct force_query {
  const char *kernel;
  unsigned *block;
  int *found;
  int bad;
} force_query;

static void fq_entry(void *ctx, const char *name, size_t n, const unsigned blk[3]) {
  force_query *q = ctx;
  if (q->kernel && strlen(q->kernel) == n && memcmp(q->kernel, name, n) == 0) {
    *q->found = 1;
    memcpy(q->block, blk, 3 * sizeof *blk);
  }
}

static void fq_bad(void *ctx, const char *s, size_t n) {
  (void)s;
  (void)n;
  ((force_query *)ctx)->bad++;
}

int klaraptor__parse_force(const char *spec, const char *kernel, unsigned block[3], int *found,
                           int *n_bad) {
  force_query q = {kernel, block, found, 0};
  *found = 0;
  int good = parse_force_spec(spec, fq_entry, fq_bad, &q);
  *n_bad = q.bad;
  return good;
}
