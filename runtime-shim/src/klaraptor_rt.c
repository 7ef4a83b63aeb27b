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
 *   run before main, and a program may set them in main).
 * - Refinement: a memo node whose model choice is not yet confirmed is *unsettled*; its
 *   launches take the lock and time a few candidate shapes (the model's best k, the
 *   profile's fastest, the program's own) with CUDA events on the launch's own stream (one
 *   key's try in flight per stream, the keys there taking turns), read later without
 *   waiting; when every candidate has its samples the fastest is stored, the node is
 *   published as settled (release store) and written to the choices cache. A settled node
 *   costs the hit path one acquire load more.
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
#endif

/* ---------------------------------------------------------------------------------------- */
/* Small helpers                                                                            */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

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
    }
  }
  pthread_mutex_unlock(&g_lock);
}

/* Models: a list, newest first, published like the registry buckets. There are a handful
 * per program and the list is walked once per decision (a memo miss), never on a hit. */
typedef struct mentry {
  const klaraptor_model *m;
  struct mentry *_Atomic next;
} mentry;
static mentry *_Atomic g_models;

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
  if (!dup) {
    mentry *e = calloc(1, sizeof *e);
    if (e) {
      e->m = m;
      atomic_store_explicit(&e->next, atomic_load_explicit(&g_models, memory_order_relaxed),
                            memory_order_relaxed);
      atomic_store_explicit(&g_models, e, memory_order_release);
    }
  }
  pthread_mutex_unlock(&g_lock);
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
static atomic_int g_inited;

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

static void read_env_locked(void) {
  const char *d = getenv("KLARAPTOR_DISABLE");
  g_cfg.disabled = d && *d && strcmp(d, "0") != 0;
  const char *f = getenv("KLARAPTOR_FORCE");
  if (f && *f) parse_force_spec(f, cfg_add_force, cfg_bad_force, &g_cfg);
  const char *l = getenv("KLARAPTOR_LOG");
  g_cfg.log_fd = -1;
  g_cfg.log_fd_owned = 0;
  if (l && *l && strcmp(l, "0") != 0) {
    if (strcmp(l, "1") == 0) {
      g_cfg.log_fd = 2;
    } else {
      int fd = open(l, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0) {
        warn("KLARAPTOR_LOG: cannot open %s (%s); logging to stderr", l, strerror(errno));
        g_cfg.log_fd = 2;
      } else {
        g_cfg.log_fd = fd;
        g_cfg.log_fd_owned = 1;
      }
    }
  }
  g_cfg.refine_k = REFINE_DEFAULT_K;
  const char *r = getenv("KLARAPTOR_REFINE");
  if (r && *r && strcmp(r, "on") != 0) {
    char *end = NULL;
    long v = strtol(r, &end, 10);
    if (strcmp(r, "off") == 0)
      g_cfg.refine_k = 0;
    else if (end && *end == 0 && end != r && v >= 0 && v <= REFINE_MAX_K)
      g_cfg.refine_k = (int)v;
    else
      warn("KLARAPTOR_REFINE=%s: expected off, on or a number of shapes from 0 to %d; "
           "using %d",
           r, REFINE_MAX_K, REFINE_DEFAULT_K);
  }
  const char *w = getenv("KLARAPTOR_REFINE_WALK");
  g_cfg.refine_walk = !(w && (strcmp(w, "off") == 0 || strcmp(w, "0") == 0));
  const char *sp = getenv("KLARAPTOR_REFINE_SPAN");
  g_cfg.refine_span = !(sp && (strcmp(sp, "off") == 0 || strcmp(sp, "0") == 0));
  g_cfg.refine_budget = REFINE_DEFAULT_BUDGET;
  const char *bu = getenv("KLARAPTOR_REFINE_BUDGET");
  if (bu && *bu) {
    char *end = NULL;
    double v = strtod(bu, &end);
    if (strcmp(bu, "off") == 0)
      g_cfg.refine_budget = -1;
    else if (end && end != bu && (*end == 0 || strcmp(end, "%") == 0) && v > 0 && v <= 100)
      g_cfg.refine_budget = v / 100;
    else
      warn("KLARAPTOR_REFINE_BUDGET=%s: expected a percentage above 0 and at most 100, or off; "
           "using %g",
           bu, REFINE_DEFAULT_BUDGET * 100);
  }
  free(g_cfg.choices_dir);
  g_cfg.choices_dir = choices_dir_from_env();
  if (g_cfg.disabled && g_cfg.log_fd >= 0) {
    static const char msg[] =
        "klaraptor: KLARAPTOR_DISABLE is set: every launch keeps the program's dims\n";
    write_all(g_cfg.log_fd, msg, sizeof msg - 1);
  }
}

static inline void ensure_init(void) {
  if (atomic_load_explicit(&g_inited, memory_order_acquire)) return;
  pthread_mutex_lock(&g_lock);
  if (!atomic_load_explicit(&g_inited, memory_order_relaxed)) {
    read_env_locked();
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
  /* Identity only: a device that does not say leaves 0. */
  static const struct {
    enum cudaDeviceAttr attr;
    size_t off;
  } ident[] = {
      {cudaDevAttrClockRate, offsetof(klaraptor_device, clock_khz)},
      {cudaDevAttrMemoryClockRate, offsetof(klaraptor_device, mem_clock_khz)},
      {cudaDevAttrGlobalMemoryBusWidth, offsetof(klaraptor_device, mem_bus_bits)},
  };
  for (size_t i = 0; i < sizeof ident / sizeof ident[0]; i++) {
    int v = 0;
    if (cudaDeviceGetAttribute(&v, ident[i].attr, ordinal) != cudaSuccess) {
      (void)cudaGetLastError();
      v = 0;
    }
    memcpy((char *)dev + ident[i].off, &v, sizeof v);
  }
  /* Only the name is read from cudaDeviceProp. It is the first member in every CUDA
   * version, but the struct's size is not: the cudart this is linked with may be older or
   * newer than the headers it was compiled with, so the buffer is far larger than needed. */
  static union {
    struct cudaDeviceProp p;
    char pad[16384];
  } props; /* under g_lock */
  memset(&props, 0, sizeof props);
  cudaError_t e = cudaGetDeviceProperties(&props.p, ordinal);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(err, errlen, "cudaGetDeviceProperties on device %d: %s", ordinal,
             cudaGetErrorString(e));
    return -1;
  }
  memcpy(dev->name, props.p.name, sizeof dev->name);
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

typedef struct memo_node {
  const kentry *e;
  int ordinal;
  int32_t n;
  uint64_t hash;
  _Atomic int settled; /* 0 while refinement tries shapes: the launch takes the slow path */
  decision d;          /* final once settled; while unsettled, the model's first choice */
  struct refine *r;    /* under g_lock; NULL when the node never refined */
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

/* Under g_lock. Fills d and the source text; *devp is the device (NULL if unknown). */
static void decide_locked(const kentry *e, int cur_rc, int ordinal, const int64_t *data,
                          decision *d, sbuf *src, const klaraptor_device **devp,
                          const klaraptor_model **modelp) {
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
  int rc = select ? select(data, dev, b, &predicted) : k->select(data, dev, b);
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
  if (predicted >= 0)
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

/* ---------------------------------------------------------------------------------------- */
/* Timing primitives (CUDA events on the launch's stream; never a synchronisation)          */

typedef void *kl_event;

#ifndef KLARAPTOR_NO_CUDART
static int timing_available(void) { return 1; }
static int ev_create(kl_event *e) {
  cudaEvent_t ev;
  if (cudaEventCreateWithFlags(&ev, cudaEventDefault) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  *e = (kl_event)ev;
  return 0;
}
static int ev_record(kl_event e, void *stream) {
  if (cudaEventRecord((cudaEvent_t)e, (cudaStream_t)stream) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return 0;
}
/* 0: complete; 1: not yet; -1: an error (left for the program to see). */
static int ev_query(kl_event e) {
  cudaError_t r = cudaEventQuery((cudaEvent_t)e);
  if (r == cudaSuccess) return 0;
  return r == cudaErrorNotReady ? 1 : -1;
}
static int ev_elapsed_us(kl_event a, kl_event b, double *us) {
  float ms = 0;
  if (cudaEventElapsedTime(&ms, (cudaEvent_t)a, (cudaEvent_t)b) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  *us = (double)ms * 1e3;
  return 0;
}
static void ev_destroy(kl_event e) {
  if (e && cudaEventDestroy((cudaEvent_t)e) != cudaSuccess) (void)cudaGetLastError();
}
/* 1 when work on the stream is being captured into a graph (or that cannot be told). */
static int stream_capturing(void *stream) {
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing((cudaStream_t)stream, &st) != cudaSuccess) {
    (void)cudaGetLastError();
    return 1;
  }
  return st != cudaStreamCaptureStatusNone;
}
/* A launch error the program has not read yet (not cleared: it is the program's). */
static int launch_error_pending(void) { return cudaPeekAtLastError() != cudaSuccess; }
/* Event calls in this thread must not be refused (and invalidate a capture) because another
 * thread captures in global mode: relaxed for the duration of a refinement step. */
static int capture_mode_relaxed(void) {
  enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
  if (cudaThreadExchangeStreamCaptureMode(&m) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return (int)m;
}
static void capture_mode_restore(int old) {
  if (old < 0) return;
  enum cudaStreamCaptureMode m = (enum cudaStreamCaptureMode)old;
  if (cudaThreadExchangeStreamCaptureMode(&m) != cudaSuccess) (void)cudaGetLastError();
}
/* Loads a kernel into the current context: asking for its attributes does, under lazy module
 * loading (CUDA_MODULE_LOADING=LAZY, the default) too. `kernel` is what the launch entry point
 * is given (nvcc's stubs: the cudaKernel_t handle, which cudaFuncGetAttributes takes as is). */
static void func_load(const void *kernel) {
  struct cudaFuncAttributes a;
  if (kernel && cudaFuncGetAttributes(&a, kernel) != cudaSuccess) (void)cudaGetLastError();
}
#else
static int timing_available(void) { return 0; }
static int ev_create(kl_event *e) {
  *e = NULL;
  return -1;
}
static int ev_record(kl_event e, void *stream) {
  (void)e;
  (void)stream;
  return -1;
}
static int ev_query(kl_event e) {
  (void)e;
  return -1;
}
static int ev_elapsed_us(kl_event a, kl_event b, double *us) {
  (void)a;
  (void)b;
  *us = 0;
  return -1;
}
static void ev_destroy(kl_event e) { (void)e; }
static int stream_capturing(void *stream) {
  (void)stream;
  return 1;
}
static int launch_error_pending(void) { return 0; }
static int capture_mode_relaxed(void) { return -1; }
static void capture_mode_restore(int old) { (void)old; }
static void func_load(const void *kernel) { (void)kernel; }
#endif

/* ---------------------------------------------------------------------------------------- */
/* Refinement                                                                               */

#define RF_MAX_CANDS 24
#define RF_MAX_SAMPLES 5
#define RF_MAX_TRIES 192
#define RF_PRUNE 1.5       /* a candidate whose fastest sample is this much slower is out */
#define RF_SHORT_US 20.0   /* kernels shorter than this are timed over batches of launches */
#define RF_BATCH_US 20.0   /* ... of about this long */
#define RF_MAX_BATCH 16
#define RF_STALE 64        /* a try idle for this many launches of its key is dropped */
#define RF_WALK_STEPS 4    /* steps of the neighbour walk along one direction */
#define RF_WALK_PLATEAU 1.03 /* a step at most this much slower than the best walks on, */
#define RF_WALK_FLAT 1       /* ... for this many steps in a row that do not gain */
#define RF_WALK_GAIN 0.99    /* a step gains when it is this much faster than the best */
#define RF_WALK_STOP 1.10  /* a walked shape one sample shows this much slower is out */
#define RF_WALK_MAX_SHAPES 4096
#define RF_INCUMBENT 1.03  /* the program's own shape is left only for one this much faster */
#define RF_MID_US 100.0    /* kernels at least this long get two samples (else three) */
#define RF_MAX_REFINING 256 /* keys refining at once; later ones take the model's choice */
#define RF_SPAN_ASK 32     /* the model's shapes the spanning rule picks its candidates from */
#define RF_SPAN_APART 4    /* ... each this many times apart from the others in threads or
                              in some block axis */

static int g_refining;      /* under g_lock: unsettled keys */
static int g_refining_full; /* under g_lock: the cap was logged */

typedef struct rf_cand {
  char label[24];  /* model#<i>, profiled, program, nearby#<i> */
  int program;     /* 1: the program's own dims (the launch keeps what it brings) */
  int walked;      /* 1: a neighbour of the best, added by the walk */
  uint32_t block[3], grid[3];
  int issued;      /* timed tries begun */
  int n;           /* samples read (per-launch microseconds) */
  int batch;       /* launches a sample spans; 0 until the first sample sized it */
  int out;         /* 1: slower than the best by RF_PRUNE; 2: its launch failed */
  double us[RF_MAX_SAMPLES];
  double spent_us; /* kernel time of every timed launch of it, sizing ones too */
  int spent_n;
} rf_cand;

enum { TRY_FREE, TRY_BEGUN, TRY_ENDED, TRY_ABANDONED, TRY_DONE };

typedef struct rf_try {
  int cand;
  int state;     /* under g_lock */
  int failed;    /* the launch reported an error */
  int last_at;   /* the key's launch count at its last launch */
  int launches;  /* launches the try spans (a batch for short kernels) */
  int done;      /* of which begun */
  int cold;      /* the first launch of its key in the run, timed (see refine.cold) */
  void *stream;
  kl_event ev0, ev1;
} rf_try;

typedef struct refine {
  const klaraptor_model *model;
  const klaraptor_device *dev;
  int nc;
  rf_cand c[RF_MAX_CANDS];
  int n_shapes;   /* shapes the model may choose from (-1: unknown) */
  int warmed;     /* 1 + the candidate of the untimed first launch; 0 before it, -1 unknown */
  int launches;   /* launches of the key so far in this run */
  int prior;      /* launches of earlier runs (the progress the choices cache kept) */
  int cold;       /* 1: the last run launched the key once (its one launch was the untimed
                     warm-up): this run's first launch is a try, one sample a candidate, see
                     rf_step */
  int batch;      /* launches a sample of every candidate spans; 0 until the first is sized */
  int ntries;
  int capture_logged;
  int walk_started, walk_dir, walk_from, walk_steps, walk_flat, n_walked;
  uint32_t (*shapes)[3]; /* every shape the model may choose (the walk stays among them) */
  int nshapes;
  uint64_t turn; /* when it last began a try on a stream (g_turns); 0: never */
  rf_try t[RF_MAX_TRIES];
} refine;

/* One key tries on a stream at a time (under g_lock). A batch of a short kernel's launches
 * times whatever else the program launches between them on that stream; while one key has a
 * try in flight there (from the launch that records its start event to the one that records
 * its end), the other keys launch the shape they launch anyway, untimed, and read none of
 * their results meanwhile, so that shape stays the same through the batch. The stream is
 * held only that long: a key paced by its budget, or waiting for its results to be read,
 * holds nothing. Turns: a key launched while another's try is in flight there is *next*;
 * when that try ends, only the next key may begin one, at its next launch (it loses the turn
 * if it does not take it then). Of several keys waiting, the one whose last turn is oldest is
 * next, so every key that wants to try gets its turn. A key waited for (the holder or the
 * next) and not launched during RF_TOKEN_IDLE launches of the others (its data values are not
 * used again) is passed over, and a batch it left open is dropped. */
#define RF_MAX_TOKENS 512
#define RF_TOKEN_IDLE 16
typedef struct rf_token {
  void *stream;
  struct refine *owner; /* the key that began the last try there (in flight or not) */
  struct refine *next;  /* the key whose turn comes when the owner's try ends; NULL: any */
  int idle; /* launches of other keys since the last of the key waited for */
} rf_token;
static rf_token g_tokens[RF_MAX_TOKENS];
static int g_ntokens;
static uint64_t g_turns; /* tries begun under a token, for the order of turns */

static rf_token *token_of(void *stream) {
  for (int i = 0; i < g_ntokens; i++)
    if (g_tokens[i].stream == stream) return &g_tokens[i];
  return NULL;
}

/* 1 when key r has a try in flight on the stream (its end not recorded yet). */
static int rf_in_flight(const refine *r, void *stream) {
  for (int i = 0; i < r->ntries; i++)
    if (r->t[i].state == TRY_BEGUN && r->t[i].stream == stream) return 1;
  return 0;
}

/* r begins a try on the stream: it holds it until the try's end is recorded. */
static void token_take(void *stream, struct refine *r) {
  rf_token *t = token_of(stream);
  if (!t && g_ntokens < RF_MAX_TOKENS) {
    t = &g_tokens[g_ntokens++];
    *t = (rf_token){stream, NULL, NULL, 0};
  }
  if (!t) return; /* too many streams: this one is not shared out */
  t->owner = r;
  t->idle = 0;
  if (t->next == r) t->next = NULL;
  r->turn = ++g_turns;
}

/* r settles or is freed: it neither holds nor waits for any stream. */
static void token_release(const struct refine *r) {
  for (int i = 0; i < g_ntokens;) {
    rf_token *t = &g_tokens[i];
    if (t->owner == r) t->owner = NULL;
    if (t->next == r) t->next = NULL;
    if (!t->owner && !t->next)
      *t = g_tokens[--g_ntokens];
    else
      i++;
  }
}

/* Frees a key's refinement state, the events of tries still in flight too (a try whose
 * launch has not ended yet must not be freed: only the test reset calls this with one). */
static void rf_free(refine *r) {
  if (!r) return;
  token_release(r);
  for (int i = 0; i < r->ntries; i++) {
    rf_try *t = &r->t[i];
    if (t->state != TRY_DONE && t->state != TRY_FREE) {
      ev_destroy(t->ev0);
      ev_destroy(t->ev1);
    }
  }
  free(r->shapes);
  free(r);
}

static void sb_block(sbuf *b, const uint32_t x[3]) { sb_printf(b, "%ux%ux%u", x[0], x[1], x[2]); }

/* A candidate's time: the median of its samples; of two, the faster (a long kernel's noise
 * only adds: the clocks still ramping up at the first launches, other work on the GPU). */
static double cand_median(const rf_cand *c) {
  double v[RF_MAX_SAMPLES];
  int n = c->n;
  memcpy(v, c->us, (size_t)n * sizeof v[0]);
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
      double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  if (n == 0) return INFINITY_US;
  if (n == 2) return v[0];
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double cand_min(const rf_cand *c) {
  double m = INFINITY_US;
  for (int i = 0; i < c->n; i++)
    if (c->us[i] < m) m = c->us[i];
  return m;
}

/* Samples a candidate needs: three (batched for short kernels, whose single launches the
 * events cannot resolve), two for kernels of 100 us or more; one for a key launched once a
 * run (r->cold: a sample costs a run, and every sample is of one condition, a cold first
 * launch). */
static int cand_needed(const refine *r, const rf_cand *c) {
  if (r->cold) return 1;
  if (c->n == 0 || c->batch > 1) return 3;
  double m = cand_median(c);
  return m >= RF_MID_US ? 2 : 3;
}

/* Adds a candidate unless an equal one is there (same block and grid; the program's shape
 * merges into an equal model shape, which then also stands for the program's). Returns its
 * index or -1. */
static int rf_add(refine *r, const char *label, int program, const uint32_t b[3],
                  const uint32_t g[3]) {
  for (int i = 0; i < r->nc; i++)
    if (memcmp(r->c[i].block, b, 3 * sizeof b[0]) == 0 &&
        memcmp(r->c[i].grid, g, 3 * sizeof g[0]) == 0) {
      /* The program's own shape among the model's: that candidate is the program's too
       * (tried first, left only for a shape measured faster: the incumbent rule). */
      if (program) r->c[i].program = 1;
      return -1;
    }
  if (r->nc >= RF_MAX_CANDS) return -1;
  rf_cand *c = &r->c[r->nc];
  memset(c, 0, sizeof *c);
  snprintf(c->label, sizeof c->label, "%s", label);
  c->program = program;
  memcpy(c->block, b, 3 * sizeof b[0]);
  memcpy(c->grid, g, 3 * sizeof g[0]);
  return r->nc++;
}

/* A model shape the runtime may launch: the limits, the constraints, the grid. */
static int rf_shape_ok(const klaraptor_kernel *k, const klaraptor_device *dev,
                       const int64_t *data, const uint32_t b[3], uint32_t g[3]) {
  char wb[256];
  sbuf why = {wb, sizeof wb, 0};
  if (check_block(k, dev, data, b, &why) != 0) return 0;
  if (k->allowed && !k->allowed(data, b)) return 0;
  return compute_grid(k, dev, data, b, g, &why) == 0;
}

/* 1 when shape b is RF_SPAN_APART times apart, in threads or in some block axis, from every
 * candidate the model gave so far (all of r's candidates while rf_new builds them). */
static int rf_apart(const refine *r, const uint32_t b[3]) {
  for (int i = 0; i < r->nc; i++) {
    const uint32_t *c = r->c[i].block;
    uint64_t tb = (uint64_t)b[0] * b[1] * b[2], tc = (uint64_t)c[0] * c[1] * c[2];
    int apart = tb >= RF_SPAN_APART * tc || tc >= RF_SPAN_APART * tb;
    for (int a = 0; a < 3 && !apart; a++)
      apart = (uint64_t)b[a] >= (uint64_t)RF_SPAN_APART * c[a] ||
              (uint64_t)c[a] >= (uint64_t)RF_SPAN_APART * b[a];
    if (!apart) return 0;
  }
  return 1;
}

/* Under g_lock: the candidates of a key whose model chose d. NULL when there is nothing to
 * refine (one candidate). */
static refine *rf_new(const kentry *e, const klaraptor_model *m, const klaraptor_device *dev,
                      const int64_t *data, const decision *d, const uint32_t pb[3],
                      const uint32_t pg[3]) {
  refine *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->model = m;
  r->dev = dev;
  r->n_shapes = -1;
  rf_add(r, "model#1", 0, d->block, d->grid);
  if (m->abi_version >= 2 && m->rank) {
    /* The spanning rule: of the model's first RF_SPAN_ASK shapes, in its order, those
     * RF_SPAN_APART times apart from every model shape taken (in threads or in some block
     * axis), until k are taken. Shapes the model predicts within a few per cent of each
     * other (1024, 992 and 960 threads) are one try's worth of information for three tries'
     * cost; shapes far apart are what the walk (2x a step, stopping on a slope) cannot reach
     * from one another. Without it (KLARAPTOR_REFINE_SPAN=off): the first k. */
    int ask = g_cfg.refine_span ? RF_SPAN_ASK : g_cfg.refine_k;
    uint32_t blocks[RF_SPAN_ASK][3];
    int total = m->rank(data, dev, ask, blocks, NULL);
    r->n_shapes = total;
    int filled = total < ask ? total : ask;
    int taken = 1; /* model#1: the model's choice, blocks[0] */
    for (int i = 1; i < filled && taken < g_cfg.refine_k; i++) {
      uint32_t g[3];
      char label[24];
      if (g_cfg.refine_span && !rf_apart(r, blocks[i])) continue;
      snprintf(label, sizeof label, "model#%d", (i + 1) % 100);
      if (rf_shape_ok(e->k, dev, data, blocks[i], g) && rf_add(r, label, 0, blocks[i], g) >= 0)
        taken++;
    }
  }
  if (m->abi_version >= 2 && m->profiled_best) {
    uint32_t b[3] = {1, 1, 1}, g[3];
    if (m->profiled_best(data, dev, b) == 0 && rf_shape_ok(e->k, dev, data, b, g))
      rf_add(r, "profiled", 0, b, g);
  }
  rf_add(r, "program", 1, pb, pg);
  if (r->nc < 2) {
    rf_free(r);
    return NULL;
  }
  return r;
}

/* ---- the choices cache ---- */

static int g_choices_warned; /* under g_lock */

static void sb_device_id(sbuf *b, const klaraptor_device *dev) {
  sb_printf(b, "%s|sm=%d|cc=%d.%d|clock_khz=%d|mem_clock_khz=%d|bus_bits=%d", dev->name,
            dev->sm_count, dev->cc_major, dev->cc_minor, dev->clock_khz, dev->mem_clock_khz,
            dev->mem_bus_bits);
}

static void sb_data_values(sbuf *b, const klaraptor_kernel *k, const int64_t *data) {
  sbuf t = *b;
  sb_data(&t, k, data);
  /* without the leading space */
  if (t.len > b->len && b->p[b->len] == ' ') {
    memmove(b->p + b->len, b->p + b->len + 1, t.len - b->len);
    t.len--;
  }
  b->len = t.len;
}

/* The file of a key: <dir>/<name>-<hash of the key>.<ext> (choice: settled; progress: what
 * was measured while it was not). */
static int choices_path(const kentry *e, const klaraptor_model *m, const klaraptor_device *dev,
                        const int64_t *data, const char *ext, char *path, size_t pathlen) {
  if (!g_cfg.choices_dir || !m || m->abi_version < 2 || !m->code_hash) return -1;
  char kb[2048];
  sbuf key = {kb, sizeof kb, 0};
  kb[0] = 0;
  sb_printf(&key, "%s\n%s\n", e->k->id, m->code_hash);
  sb_device_id(&key, dev);
  sb_printf(&key, "\n");
  sb_data_values(&key, e->k, data);
  char name[65];
  const char *n = kname(e->k);
  size_t i = 0;
  for (; n[i] && i < 64; i++) {
    char ch = n[i];
    int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
    name[i] = ok ? ch : '_';
  }
  name[i] = 0;
  int w = snprintf(path, pathlen, "%s/%s-%016" PRIx64 ".%s", g_cfg.choices_dir, name,
                   fnv1a(kb), ext);
  return w > 0 && (size_t)w < pathlen ? 0 : -1;
}

static void choices_warn_once(const char *fmt, const char *path, const char *why) {
  if (g_choices_warned) return;
  g_choices_warned = 1;
  warn(fmt, path, why);
}

static int parse_block3(const char *s, uint32_t b[3]) {
  unsigned v[3];
  if (parse_shape(s, strlen(s), v) != 0) return -1;
  b[0] = v[0];
  b[1] = v[1];
  b[2] = v[2];
  return 0;
}

/* The value of "key = value" in text (NUL-terminated lines), or NULL. */
static const char *kv_get(char *const *lines, int n, const char *key) {
  size_t kl = strlen(key);
  for (int i = 0; i < n; i++)
    if (strncmp(lines[i], key, kl) == 0 && strncmp(lines[i] + kl, " = ", 3) == 0)
      return lines[i] + kl + 3;
  return NULL;
}

/* Reads a file of the choices cache into text (cap bytes) and its lines that are neither
 * empty nor comments (at most maxl); the number of lines, -1 when it cannot be opened. */
static int read_lines(const char *path, char *text, size_t cap, char **lines, int maxl) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t len = 0;
  for (;;) {
    ssize_t r = read(fd, text + len, cap - 1 - len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    len += (size_t)r;
    if (len == cap - 1) break;
  }
  close(fd);
  text[len] = 0;
  int n = 0;
  for (char *p = text; *p && n < maxl;) {
    char *q = strchr(p, '\n');
    if (q) *q = 0;
    size_t l = strlen(p);
    while (l > 0 && (p[l - 1] == ' ' || p[l - 1] == '\r')) p[--l] = 0;
    if (*p && *p != '#') lines[n++] = p;
    if (!q) break;
    p = q + 1;
  }
  return n;
}

/* 1 when a cache file's key fields are this key's (another key may share the file name). */
static int key_matches(char *const *lines, int n, const kentry *e, const klaraptor_model *m,
                       const klaraptor_device *dev, const int64_t *data) {
  const char *kernel = kv_get(lines, n, "kernel"), *hash = kv_get(lines, n, "code_hash"),
             *devid = kv_get(lines, n, "device_id"), *vals = kv_get(lines, n, "data");
  if (!kernel || !hash || !devid || !vals) return 0;
  char kb[2048];
  sbuf want = {kb, sizeof kb, 0};
  kb[0] = 0;
  sb_device_id(&want, dev);
  char vb[1024];
  sbuf wv = {vb, sizeof vb, 0};
  vb[0] = 0;
  sb_data_values(&wv, e->k, data);
  return strcmp(kernel, e->k->id) == 0 && strcmp(hash, m->code_hash) == 0 &&
         strcmp(devid, kb) == 0 && strcmp(vals, vb) == 0;
}

/* Under g_lock. 0 and the settled decision (and candidate label) when the cache has the
 * key; -1 otherwise (a damaged file: one warning per process). */
static int choices_read(const kentry *e, const klaraptor_model *m, const klaraptor_device *dev,
                        const int64_t *data, decision *d, char *label, size_t labellen) {
  char path[4352];
  if (choices_path(e, m, dev, data, "choice", path, sizeof path) != 0) return -1;
  char text[8192];
  char *lines[64];
  int n = read_lines(path, text, sizeof text, lines, 64);
  if (n < 0) return -1;
  const char *version = kv_get(lines, n, "version"), *kernel = kv_get(lines, n, "kernel"),
             *hash = kv_get(lines, n, "code_hash"), *devid = kv_get(lines, n, "device_id"),
             *vals = kv_get(lines, n, "data"), *block = kv_get(lines, n, "block"),
             *cand = kv_get(lines, n, "candidate");
  if (!version || strcmp(version, "1") != 0 || !kernel || !hash || !devid || !vals || !block ||
      !cand) {
    choices_warn_once("ignoring the damaged choices cache file %s (%s); it is rewritten when "
                      "the launch settles again",
                      path, "a field is missing or has another version");
    return -1;
  }
  /* Another key with the same file name: not ours, not damaged. */
  if (!key_matches(lines, n, e, m, dev, data)) return -1;
  memset(d, 0, sizeof *d);
  if (strcmp(block, "program") == 0) {
    d->keep = 1;
  } else {
    uint32_t b[3], g[3];
    if (parse_block3(block, b) != 0 || !rf_shape_ok(e->k, dev, data, b, g)) {
      choices_warn_once("ignoring the damaged choices cache file %s (%s); it is rewritten when "
                        "the launch settles again",
                        path, "its block cannot be launched");
      return -1;
    }
    d->keep = 0;
    memcpy(d->block, b, sizeof b);
    memcpy(d->grid, g, sizeof g);
  }
  snprintf(label, labellen, "%s", cand);
  return 0;
}

static int mkdir_p(const char *dir) {
  char p[4096];
  if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return -1;
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = 0;
    if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
    *s = '/';
  }
  if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
  return 0;
}

static void write_atomic(const char *path, const char *text, size_t len);

/* Under g_lock: writes the settled choice (and removes what the key's progress file kept). */
static void choices_write(const kentry *e, const refine *r, const int64_t *data, int best,
                          int launches) {
  char path[4352];
  if (choices_path(e, r->model, r->dev, data, "choice", path, sizeof path) != 0) return;
  char text[8192];
  sbuf b = {text, sizeof text, 0};
  text[0] = 0;
  const rf_cand *c = &r->c[best];
  sb_printf(&b,
            "# klaraptor: a settled launch choice, written by the program's runtime (safe to "
            "delete)\nversion = 1\nkernel = %s\nname = %s\ncode_hash = %s\ndevice = %s\n"
            "device_id = ",
            e->k->id, kname(e->k), r->model->code_hash, r->dev->name);
  sb_device_id(&b, r->dev);
  sb_printf(&b, "\ndata = ");
  sb_data_values(&b, e->k, data);
  sb_printf(&b, "\nblock = ");
  if (c->program) {
    sb_printf(&b, "program\nprogram_block = ");
    sb_block(&b, c->block);
  } else {
    sb_block(&b, c->block);
  }
  sb_printf(&b, "\ncandidate = %s\nlaunches = %d\ntimes_us =", c->label, launches);
  for (int i = 0; i < r->nc; i++) {
    if (r->c[i].n == 0) continue;
    sb_printf(&b, " ");
    sb_block(&b, r->c[i].block);
    sb_printf(&b, ":%.2f", cand_median(&r->c[i]));
  }
  sb_printf(&b, "\n");
  if (b.len + 1 >= b.cap) return;
  write_atomic(path, text, b.len);
  char prog[4352];
  if (choices_path(e, r->model, r->dev, data, "progress", prog, sizeof prog) == 0) unlink(prog);
}

/* Writes a file of the choices cache atomically (a temporary file renamed over the old one),
 * so that concurrent runs of the program never see half a file. */
static void write_atomic(const char *path, const char *text, size_t len) {
  if (mkdir_p(g_cfg.choices_dir) != 0) {
    choices_warn_once("cannot write the choices cache in %s (%s); set KLARAPTOR_CHOICES to "
                      "another directory or to off",
                      g_cfg.choices_dir, strerror(errno));
    return;
  }
  static unsigned counter;
  char tmp[4400];
  const char *slash = strrchr(path, '/');
  snprintf(tmp, sizeof tmp, "%.*s/.%s.%ld.%u.tmp", (int)(slash - path), path, slash + 1,
           (long)getpid(), counter++);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    choices_warn_once("cannot write the choices cache in %s (%s); set KLARAPTOR_CHOICES to "
                      "another directory or to off",
                      g_cfg.choices_dir, strerror(errno));
    return;
  }
  size_t off = 0;
  int ok = 1;
  while (off < len) {
    ssize_t w = write(fd, text + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      ok = 0;
      break;
    }
    off += (size_t)w;
  }
  if (close(fd) != 0) ok = 0;
  if (!ok || rename(tmp, path) != 0) {
    int err = errno;
    unlink(tmp);
    choices_warn_once("cannot write the choices cache in %s (%s); set KLARAPTOR_CHOICES to "
                      "another directory or to off",
                      g_cfg.choices_dir, strerror(err));
  }
}

/* Under g_lock: what a key not settled yet has measured, for the next run to go on from
 * (<name>-<hash>.progress beside the choice files; removed when the key settles). One line
 * per candidate with its samples (microseconds per launch). `launches` counts every run's,
 * `last_run_launches` this run's (1: the next run times its first launch, refine.cold; a file
 * written before that line existed reads as an unknown count, and the run after it writes
 * the line). */
static void progress_write(const kentry *e, const refine *r, const int64_t *data) {
  char path[4352];
  if (choices_path(e, r->model, r->dev, data, "progress", path, sizeof path) != 0) return;
  char text[8192];
  sbuf b = {text, sizeof text, 0};
  text[0] = 0;
  sb_printf(&b,
            "# klaraptor: what the program's runtime measured of a launch that has not settled "
            "yet; the next run goes on from here (safe to delete)\nversion = 1\nkernel = %s\n"
            "name = %s\ncode_hash = %s\ndevice = %s\ndevice_id = ",
            e->k->id, kname(e->k), r->model->code_hash, r->dev->name);
  sb_device_id(&b, r->dev);
  sb_printf(&b, "\ndata = ");
  sb_data_values(&b, e->k, data);
  sb_printf(&b, "\nlaunches = %d\nlast_run_launches = %d\n", r->prior + r->launches,
            r->launches);
  for (int i = 0; i < r->nc; i++) {
    const rf_cand *c = &r->c[i];
    if (c->n == 0 && !c->out && !c->walked) continue;
    sb_printf(&b, "cand = %s ", c->label);
    sb_block(&b, c->block);
    sb_printf(&b, " ");
    sb_block(&b, c->grid);
    sb_printf(&b, " program=%d walked=%d out=%d batch=%d us=", c->program, c->walked, c->out,
              c->batch);
    for (int j = 0; j < c->n; j++) sb_printf(&b, "%s%.3f", j ? "," : "", c->us[j]);
    if (c->n == 0) sb_printf(&b, "-");
    sb_printf(&b, "\n");
  }
  if (b.len + 1 >= b.cap) return;
  write_atomic(path, text, b.len);
}

/* Under g_lock: the samples an earlier run of the program measured for this key (its progress
 * file), merged into the candidates. A damaged file is ignored with one warning. */
static void progress_read(const kentry *e, refine *r, const int64_t *data) {
  char path[4352];
  if (choices_path(e, r->model, r->dev, data, "progress", path, sizeof path) != 0) return;
  char text[8192];
  char *lines[64];
  int n = read_lines(path, text, sizeof text, lines, 64);
  if (n < 0) return;
  const char *version = kv_get(lines, n, "version"), *launches = kv_get(lines, n, "launches");
  const char *why = NULL;
  if (!version || strcmp(version, "1") != 0 || !launches)
    why = "a field is missing or has another version";
  else if (!key_matches(lines, n, e, r->model, r->dev, data))
    return;
  rf_cand got[RF_MAX_CANDS];
  int ng = 0;
  for (int i = 0; !why && i < n; i++) {
    if (strncmp(lines[i], "cand = ", 7) != 0) continue;
    rf_cand c;
    memset(&c, 0, sizeof c);
    char blk[32], grd[32], us[256];
    int used = 0;
    if (sscanf(lines[i] + 7,
               "%23s %31s %31s program=%d walked=%d out=%d batch=%d us=%255s%n", c.label, blk,
               grd, &c.program, &c.walked, &c.out, &c.batch, us, &used) != 8 ||
        lines[i][7 + used] != 0 || parse_block3(blk, c.block) != 0 ||
        parse_block3(grd, c.grid) != 0 || c.out < 0 || c.out > 2 || c.batch < 0 ||
        c.batch > RF_MAX_BATCH || ng >= RF_MAX_CANDS) {
      why = "a candidate line cannot be read";
      break;
    }
    for (char *p = us; strcmp(us, "-") != 0 && *p && c.n < RF_MAX_SAMPLES;) {
      char *end = NULL;
      double v = strtod(p, &end);
      if (end == p || !(v > 0 && v < 1e12)) {
        why = "a sample is not a positive time";
        break;
      }
      c.us[c.n++] = v;
      p = *end == ',' ? end + 1 : end;
    }
    got[ng++] = c;
  }
  char *end = NULL;
  long prior = why ? 0 : strtol(launches, &end, 10);
  if (!why && (!end || *end || prior < 0 || prior > INT32_MAX / 2)) why = "launches is no count";
  const char *last = why ? NULL : kv_get(lines, n, "last_run_launches");
  long last_run = -1; /* not in the file (written by an older runtime): unknown */
  if (last) {
    end = NULL;
    last_run = strtol(last, &end, 10);
    if (!end || *end || last_run < 0 || last_run > prior) why = "last_run_launches is no count";
  }
  if (why) {
    choices_warn_once("ignoring the damaged choices cache file %s (%s); the launch is measured "
                      "again",
                      path, why);
    return;
  }
  r->prior = (int)prior;
  r->cold = last_run == 1;
  for (int i = 0; i < ng; i++) {
    int idx = -1;
    for (int j = 0; j < r->nc && idx < 0; j++)
      if (memcmp(r->c[j].block, got[i].block, sizeof got[i].block) == 0 &&
          memcmp(r->c[j].grid, got[i].grid, sizeof got[i].grid) == 0)
        idx = j;
    if (idx < 0) {
      /* a shape the walk reached: still one the model may choose at this launch */
      uint32_t g[3];
      if (!got[i].walked || !rf_shape_ok(e->k, r->dev, data, got[i].block, g) ||
          memcmp(g, got[i].grid, sizeof g) != 0)
        continue;
      idx = rf_add(r, got[i].label, 0, got[i].block, got[i].grid);
      if (idx < 0) continue;
      r->c[idx].walked = 1;
      r->n_walked++;
    }
    rf_cand *c = &r->c[idx];
    if (c->n > 0) continue;
    if (got[i].batch > 0 && r->batch == 0) r->batch = got[i].batch;
    memcpy(c->us, got[i].us, sizeof c->us);
    c->n = got[i].n;
    c->batch = got[i].batch;
    c->out = got[i].out;
    c->issued = c->n;
  }
}

/* ---- stepping ---- */

static void rf_log(const kentry *e, const int64_t *data, const klaraptor_device *dev,
                   int ordinal, const char *fmt, ...) {
  if (g_cfg.log_fd < 0) return;
  char buf[4096];
  sbuf b = {buf, sizeof buf - 1, 0};
  sb_printf(&b, "klaraptor: %s", kname(e->k));
  sb_data(&b, e->k, data);
  sb_printf(&b, " refine: ");
  if (b.len + 1 < b.cap) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + b.len, b.cap - b.len, fmt, ap);
    va_end(ap);
    if (n > 0) b.len += (size_t)n;
    if (b.len >= b.cap) b.len = b.cap - 1;
  }
  sb_printf(&b, " device=%d:%s", ordinal, dev ? dev->name : "unknown");
  buf[b.len++] = '\n';
  log_line(buf, b.len);
}

static void rf_log_trying(const kentry *e, const int64_t *data, const refine *r, int ordinal) {
  char list[512];
  sbuf l = {list, sizeof list, 0};
  list[0] = 0;
  const rf_cand *prog = NULL;
  int n_model = 0;
  for (int i = 0; i < r->nc; i++) {
    /* the program's own shape, unless it is one of the model's too (then listed with them) */
    if (r->c[i].program && strcmp(r->c[i].label, "program") == 0) {
      prog = &r->c[i];
      continue;
    }
    n_model++;
    sb_printf(&l, "%s%s=", l.len ? " " : "", r->c[i].label);
    sb_block(&l, r->c[i].block);
  }
  char shapes[32];
  if (r->n_shapes >= 0)
    snprintf(shapes, sizeof shapes, "%d", r->n_shapes);
  else
    snprintf(shapes, sizeof shapes, "?");
  if (prog)
    rf_log(e, data, r->dev, ordinal,
           "trying %d of %s shapes and the program's %ux%ux%u (%s)", n_model, shapes,
           prog->block[0], prog->block[1], prog->block[2], list);
  else
    rf_log(e, data, r->dev, ordinal,
           "trying %d of %s shapes (the program's is among them) (%s)", n_model, shapes, list);
}

static int rf_best(const refine *r);

/* Reads the tries whose end event has been recorded and has completed; never waits. */
static void rf_poll(refine *r) {
  for (int i = 0; i < r->ntries; i++) {
    rf_try *t = &r->t[i];
    if (t->state == TRY_BEGUN && r->launches - t->last_at > RF_STALE) {
      /* never ended (the launch was skipped, or threw): forget it */
      t->state = TRY_ABANDONED;
      continue;
    }
    if (t->state != TRY_ENDED) continue;
    int q = ev_query(t->ev1);
    if (q == 1) continue;
    double us = 0;
    rf_cand *c = &r->c[t->cand];
    if (t->failed) {
      c->out = 2;
    } else if (q == 0 && ev_elapsed_us(t->ev0, t->ev1, &us) == 0 && us > 0) {
      us /= t->launches;
      c->spent_us += us * t->launches;
      c->spent_n += t->launches;
      if (c->batch == 0) {
        /* Its first launch, alone: it sizes the batches. Every candidate of the key is timed
         * over batches of one length, the one its fastest first candidate needs (~20 us a
         * sample), so that what the program launches between a batch's launches weighs the
         * same in every candidate's samples; samples of another length are taken again. */
        int b = us < RF_SHORT_US ? (int)(RF_BATCH_US / us) + 1 : 1;
        b = us >= RF_SHORT_US ? 1 : b < 2 ? 2 : b > RF_MAX_BATCH ? RF_MAX_BATCH : b;
        if (r->cold) b = 1; /* launched once a run: no batch can ever be made */
        if (!c->walked && b > r->batch) {
          r->batch = b;
          for (int j = 0; j < r->nc; j++)
            if (r->c[j].batch && r->c[j].batch != b) {
              r->c[j].batch = b;
              r->c[j].n = 0;
            }
        }
        c->batch = r->batch > 1 && !r->cold ? r->batch : 1;
        int best = rf_best(r);
        if (c->batch == 1) {
          if (c->n < RF_MAX_SAMPLES) c->us[c->n++] = us; /* a long kernel's first sample */
        } else if (c->walked && best >= 0 && r->c[best].n > 0 &&
                   us > RF_PRUNE * cand_median(&r->c[best])) {
          /* a walked shape that one launch shows far slower goes no further (a cliff is
           * costly to batch) */
          c->out = 1;
        }
      } else if (c->batch > 1 && t->launches == 1 && !r->cold) {
        /* a single launch of a batched candidate begun before the sizing was read */
      } else if (c->n < RF_MAX_SAMPLES) {
        c->us[c->n++] = us;
      }
    }
    ev_destroy(t->ev0);
    ev_destroy(t->ev1);
    t->ev0 = t->ev1 = NULL;
    t->state = TRY_DONE;
  }
}

static int rf_pending(const refine *r, int cand) {
  int p = 0;
  for (int i = 0; i < r->ntries; i++)
    if (r->t[i].cand == cand && (r->t[i].state == TRY_BEGUN || r->t[i].state == TRY_ENDED))
      p++;
  return p;
}

/* The candidate that looks fastest so far (the model's first before any sample). */
static int rf_best(const refine *r) {
  int best = -1;
  double bt = INFINITY_US;
  for (int i = 0; i < r->nc; i++) {
    if (r->c[i].out || r->c[i].n == 0) continue;
    double m = cand_median(&r->c[i]);
    if (m < bt) {
      bt = m;
      best = i;
    }
  }
  if (best >= 0) return best;
  for (int i = 0; i < r->nc; i++)
    if (!r->c[i].out) return i;
  return -1;
}

/* The candidate the key launches: the fastest, except that the program's own shape is the
 * incumbent, left only for a shape measured clearly faster (short kernels' timings carry a
 * few per cent of noise). */
static int rf_choice(const refine *r) {
  int best = rf_best(r);
  for (int i = 0; best >= 0 && i < r->nc; i++) {
    const rf_cand *p = &r->c[i], *b = &r->c[best];
    if (!p->program || i == best || p->out == 2 || p->n == 0) continue;
    if (cand_median(b) * RF_INCUMBENT > cand_median(p)) best = i;
  }
  return best;
}

static void rf_prune(refine *r) {
  int b = rf_best(r);
  if (b < 0 || r->c[b].n == 0) return;
  double bt = cand_median(&r->c[b]);
  /* Two samples at least (one may be an outlier), or the one a long kernel needs. */
  for (int i = 0; i < r->nc; i++) {
    const rf_cand *c = &r->c[i];
    int enough = c->n >= 2 || (c->n >= 1 && cand_min(c) > 2 * bt);
    if (!c->out && enough && i != b && cand_min(c) > RF_PRUNE * bt) r->c[i].out = 1;
    /* a walked shape needs one sample to show it is no way on */
    if (!c->out && c->walked && c->n >= 1 && i != b && r->c[b].n >= 2 &&
        cand_min(c) > RF_WALK_STOP * bt)
      r->c[i].out = 1;
  }
}

/* 1 when every candidate still in has its samples. */
static int rf_complete(const refine *r) {
  int any = 0;
  for (int i = 0; i < r->nc; i++) {
    const rf_cand *c = &r->c[i];
    if (c->out) continue;
    if (c->n < cand_needed(r, c)) return 0;
    any = 1;
  }
  return any;
}

/* Under g_lock: stores the fastest candidate as the node's decision and publishes it. */
static void rf_settle(memo_node *m, const int64_t *data, int ordinal) {
  refine *r = m->r;
  int best = rf_choice(r);
  decision d;
  memset(&d, 0, sizeof d);
  if (best < 0) {
    /* every candidate failed to launch: the program's own launch */
    d.keep = 1;
  } else if (r->c[best].program) {
    d.keep = 1;
  } else {
    memcpy(d.block, r->c[best].block, sizeof d.block);
    memcpy(d.grid, r->c[best].grid, sizeof d.grid);
  }
  for (int i = 0; i < r->ntries; i++) {
    rf_try *t = &r->t[i];
    if (t->state == TRY_ENDED) {
      ev_destroy(t->ev0);
      ev_destroy(t->ev1);
      t->ev0 = t->ev1 = NULL;
      t->state = TRY_DONE;
    } else if (t->state == TRY_BEGUN) {
      t->state = TRY_ABANDONED; /* klaraptor_launch_end frees its events */
    }
  }
  m->d = d;
  free(r->shapes);
  r->shapes = NULL;
  r->nshapes = 0;
  g_refining--;
  token_release(r);
  atomic_store_explicit(&m->settled, 1, memory_order_release);
  if (best < 0) {
    rf_log(m->e, data, r->dev, ordinal,
           "no candidate could be timed: the program's own launch from now on");
    return;
  }
  double bt = cand_median(&r->c[best]);
  double extra = 0;
  for (int i = 0; i < r->nc; i++) extra += r->c[i].spent_us - bt * r->c[i].spent_n;
  if (r->warmed > 0 && r->c[r->warmed - 1].n) /* the untimed warm-up */
    extra += cand_median(&r->c[r->warmed - 1]) - bt;
  char ratio[32] = "?";
  if (r->c[0].n && cand_median(&r->c[0]) > 0)
    snprintf(ratio, sizeof ratio, "%.3f", bt / cand_median(&r->c[0]));
  rf_log(m->e, data, r->dev, ordinal,
         "settled on block=%ux%ux%u grid=%ux%ux%u after launches=%d, %s of the model's first "
         "choice's time (candidate=%s extra_us=%.1f)",
         r->c[best].block[0], r->c[best].block[1], r->c[best].block[2], r->c[best].grid[0],
         r->c[best].grid[1], r->c[best].grid[2], r->prior + r->launches, ratio, r->c[best].label,
         extra);
  choices_write(m->e, r, data, best, r->prior + r->launches);
}

/* The neighbour walk, once the candidates are measured: from the best, along each axis of the
 * block, halving and doubling it step by step while the steps are no more than
 * RF_WALK_PLATEAU slower than the best (a plateau is crossed, a slope is not), at most
 * RF_WALK_STEPS steps a direction; every step is a shape the model may choose (limits,
 * constraints, grid). The model ranks well but not always right: its best shapes are often
 * next to the fastest one. Returns 1 when it added a shape to measure, 0 when it is over.
 * Under g_lock. */
static int rf_walk(refine *r, const memo_node *m) {
  const klaraptor_kernel *k = m->e->k;
  if (!g_cfg.refine_walk) return 0;
  if (!r->walk_started) {
    r->walk_started = 1;
    r->walk_dir = 0;
    r->walk_from = rf_best(r);
    r->walk_steps = 0;
    /* every shape the model may choose, only now (most keys of a program never get here) */
    const klaraptor_model *mo = r->model;
    if (r->n_shapes > 0 && mo->abi_version >= 2 && mo->rank) {
      int all = r->n_shapes < RF_WALK_MAX_SHAPES ? r->n_shapes : RF_WALK_MAX_SHAPES;
      r->shapes = malloc((size_t)all * sizeof r->shapes[0]);
      if (r->shapes) r->nshapes = mo->rank(m->data, r->dev, all, r->shapes, NULL) >= all ? all : 0;
    }
  }
  for (;;) {
    int best = rf_best(r);
    /* directions: halve or double each axis; in 2-D and 3-D also reshape x against y
     * (twice as wide and half as tall, and the reverse), keeping the threads */
    int ndir = 2 * k->dim + (k->dim >= 2 ? 2 : 0);
    if (best < 0 || r->walk_dir >= ndir || !r->nshapes) return 0;
    const rf_cand *from = &r->c[r->walk_from];
    uint32_t b[3] = {from->block[0], from->block[1], from->block[2]}, g[3];
    int ok = r->walk_steps < RF_WALK_STEPS;
    if (r->walk_dir < 2 * k->dim) {
      int axis = r->walk_dir / 2, up = r->walk_dir % 2;
      if (ok && up) {
        ok = b[axis] <= UINT32_MAX / 2;
        b[axis] *= 2;
      } else if (ok) {
        ok = b[axis] >= 2;
        b[axis] /= 2;
      }
    } else {
      int wide = r->walk_dir == 2 * k->dim;
      uint32_t *grow = wide ? &b[0] : &b[1], *shrink = wide ? &b[1] : &b[0];
      ok = ok && *shrink >= 2 && *shrink % 2 == 0 && *grow <= UINT32_MAX / 2;
      *grow *= 2;
      *shrink /= 2;
    }
    int listed = 0;
    for (int i = 0; ok && i < r->nshapes && !listed; i++)
      listed = memcmp(r->shapes[i], b, sizeof b) == 0;
    ok = ok && listed && rf_shape_ok(k, r->dev, m->data, b, g);
    int idx = -1;
    for (int i = 0; ok && i < r->nc; i++)
      if (memcmp(r->c[i].block, b, sizeof b) == 0 && memcmp(r->c[i].grid, g, sizeof g) == 0)
        idx = i;
    if (ok && idx < 0) {
      char label[24];
      snprintf(label, sizeof label, "nearby#%d", (r->n_walked + 1) % 100);
      idx = rf_add(r, label, 0, b, g);
      if (idx >= 0) {
        r->n_walked++;
        r->c[idx].walked = 1;
        return 1;
      }
    }
    const rf_cand *c = idx >= 0 ? &r->c[idx] : NULL;
    /* the step against the best of the others */
    double others = INFINITY_US;
    for (int i = 0; c && i < r->nc; i++)
      if (i != idx && !r->c[i].out && r->c[i].n > 0 && cand_median(&r->c[i]) < others)
        others = cand_median(&r->c[i]);
    if (c && !c->out && c->n > 0 && cand_median(c) <= RF_WALK_PLATEAU * others) {
      /* walk on: over a step that gains, or over a short plateau */
      int gains = cand_median(c) < RF_WALK_GAIN * others;
      if (gains || r->walk_flat < RF_WALK_FLAT) {
        r->walk_flat = gains ? 0 : r->walk_flat + 1;
        r->walk_from = idx;
        r->walk_steps++;
        continue;
      }
    }
    r->walk_dir++; /* this direction is over: the next one, from the best */
    r->walk_from = rf_best(r);
    r->walk_steps = 0;
    r->walk_flat = 0;
  }
}

/* 1 when candidate i needs another timed try now. */
static int rf_wants(const refine *r, int i) {
  const rf_cand *c = &r->c[i];
  int pending = rf_pending(r, i);
  if (c->out || c->n + pending >= cand_needed(r, c)) return 0;
  return !(c->batch == 0 && pending); /* its first launch sizes its batches */
}

/* What a timed try of candidate i is expected to cost beyond ch's time: per launch, its
 * measured median minus ch's, or half ch's time while it has none. */
static double rf_try_cost(const refine *r, int i, int ch, int launches) {
  const rf_cand *c = &r->c[i];
  double bt = cand_median(&r->c[ch]);
  double d = c->n ? cand_median(c) - bt : 0.5 * bt;
  return d > 0 ? d * launches : 0;
}

/* 1 when a try of candidate `next` would take the key past its budget: the kernel time its
 * timed launches spent beyond what the shape it launches (ch) takes, those in flight and the
 * next one estimated, against KLARAPTOR_REFINE_BUDGET of its launches in this run at that
 * shape's time. The key then launches that shape until its launches have paid for the try: a
 * key launched a few times tries little in one run and goes on in the next (the choices
 * cache keeps what was measured), a key launched thousands of times finishes early. Before
 * anything is measured nothing is paced (the program's own shape goes first). */
static int rf_over_budget(const refine *r, int ch, int next) {
  if (g_cfg.refine_budget < 0 || ch < 0 || r->c[ch].n == 0 || next == ch) return 0;
  double bt = cand_median(&r->c[ch]), extra = 0;
  for (int i = 0; i < r->nc; i++) extra += r->c[i].spent_us - bt * r->c[i].spent_n;
  for (int i = 0; i < r->ntries; i++) {
    const rf_try *t = &r->t[i];
    if (t->cand == ch || (t->state != TRY_BEGUN && t->state != TRY_ENDED)) continue;
    extra += rf_try_cost(r, t->cand, ch, t->launches);
  }
  const rf_cand *c = &r->c[next];
  int launches = c->batch > 1 ? c->batch : 1;
  extra += rf_try_cost(r, next, ch, launches);
  return extra > g_cfg.refine_budget * bt * r->launches;
}

/* Under g_lock, with timing possible: 1 when key r may begin a try on the stream at this
 * launch (see rf_token), 0 when it launches untimed because another key's try is in flight
 * there or its turn is next. */
static int rf_turn(refine *r, void *stream) {
  rf_token *tk = token_of(stream);
  if (!tk) return 1;
  int busy = tk->owner && rf_in_flight(tk->owner, stream);
  refine *awaited = busy ? tk->owner : tk->next;
  if (awaited && awaited != r) {
    if (++tk->idle <= RF_TOKEN_IDLE) {
      if (busy && (!tk->next || r->turn < tk->next->turn)) tk->next = r;
      return 0;
    }
    /* the key waited for is no longer launched here: passed over, its open batch dropped
     * (a try whose last launch has begun is left to klaraptor_launch_end) */
    if (busy) {
      for (int i = 0; i < awaited->ntries; i++) {
        rf_try *t = &awaited->t[i];
        if (t->state != TRY_BEGUN || t->stream != stream) continue;
        if (t->done < t->launches) {
          ev_destroy(t->ev0);
          ev_destroy(t->ev1);
          t->ev0 = t->ev1 = NULL;
          t->state = TRY_DONE;
        } else {
          t->state = TRY_ABANDONED;
        }
      }
    } else {
      tk->next = NULL;
    }
  }
  tk->idle = 0;
  if (tk->next == r) tk->next = NULL; /* its turn: taken now or lost */
  return 1;
}

/* Under g_lock, for an unsettled node: which dims this launch takes (*use: a candidate, or -1
 * for the program's own) and, when it is timed, the try (NULL otherwise). */
static rf_try *rf_step(memo_node *m, const int64_t *data, int ordinal, void *stream,
                       int can_time, int *use) {
  refine *r = m->r;
  r->launches++;
  rf_try *ticket = NULL;
  /* A batch open on this stream goes on, cheaply (another stream's batch is left alone: that
   * launch takes the best guess, untimed, below). */
  int old_mode = capture_mode_relaxed();
  for (int i = 0; can_time && i < r->ntries; i++) {
    rf_try *t = &r->t[i];
    if (t->state != TRY_BEGUN || t->done >= t->launches || t->stream != stream) continue;
    if (stream_capturing(stream)) break;
    if (launch_error_pending()) t->failed = 1;
    t->done++;
    t->last_at = r->launches;
    *use = t->cand;
    if (t->done == t->launches) ticket = t;
    rf_token *tk = token_of(stream);
    if (tk && tk->owner == r) tk->idle = 0;
    goto out;
  }
  if (can_time && !rf_turn(r, stream)) {
    /* another key tries on this stream, or its turn is next: this one launches what it
     * launches now, untimed, and reads no result (its shape stays the same meanwhile) */
    *use = rf_choice(r);
    if (!r->warmed) r->warmed = *use >= 0 ? *use + 1 : -1;
    goto out;
  }
  rf_poll(r);
  *use = rf_choice(r);
  if (!can_time || stream_capturing(stream)) {
    /* A graph captured now replays whatever it captured: the best guess, untimed. */
    if (can_time && !r->capture_logged) {
      r->capture_logged = 1;
      rf_log(m->e, data, r->dev, ordinal,
             "the stream is being captured: %s, untimed", r->c[*use].label);
    }
    goto out;
  }
  int cold_first = 0;
  if (!r->warmed) {
    /* The first launch of a key in a run pays for loading the kernel and touching its data:
     * untimed, with the model's choice (or what an earlier run measured fastest). */
    if (!r->cold) {
      r->warmed = *use >= 0 ? *use + 1 : -1;
      goto out;
    }
    /* Unless the last run launched the key once (r->cold): then the warm-up was all its runs
     * ever launched, and no try would ever happen. The first launch is a try instead: every
     * candidate is measured under one condition, a cold first launch, which is what such a
     * program pays. The kernel is loaded before the try's start event is recorded again
     * (klaraptor__launch_starts), so lazy module loading is not in the sample. One try a
     * run, outside the budget: there is no launch in the run to pace it against, and the
     * tries end after one run per candidate (the choices cache goes on from run to run). */
    r->warmed = -1;
    cold_first = 1;
  }
  for (int i = 0; i < r->ntries; i++)
    if (r->t[i].state == TRY_BEGUN && r->t[i].done < r->t[i].launches) goto out;
  rf_prune(r);
  int waiting = 0;
  for (int i = 0; i < r->nc; i++) waiting += rf_pending(r, i);
  if ((rf_complete(r) && !waiting && !rf_walk(r, m)) || r->ntries >= RF_MAX_TRIES) {
    rf_settle(m, data, ordinal);
    *use = -2; /* the settled decision */
    goto out;
  }
  /* First every candidate's first launch, the program's own first (the shape no choice may
   * lose to); then the samples of the shape the key launches anyway, which cost nothing; then
   * the others' by fewest tries. All but the free ones are paced by the budget. */
  int pick = -1;
  for (int i = 0; i < r->nc; i++)
    if (r->c[i].issued == 0 && rf_wants(r, i) && (pick < 0 || r->c[i].program)) pick = i;
  if (pick >= 0 && !cold_first && rf_over_budget(r, *use, pick)) pick = -1;
  if (pick < 0 && *use >= 0 && rf_wants(r, *use)) pick = *use;
  for (int i = 0; pick < 0 && i < r->nc; i++)
    if (rf_wants(r, i) && (pick < 0 || r->c[i].issued < r->c[pick].issued)) pick = i;
  if (pick >= 0 && !cold_first && rf_over_budget(r, *use, pick)) pick = -1;
  if (pick < 0 || launch_error_pending()) goto out; /* waiting for results */
  rf_try *t = &r->t[r->ntries];
  memset(t, 0, sizeof *t);
  if (ev_create(&t->ev0) != 0) goto out;
  if (ev_create(&t->ev1) != 0) {
    ev_destroy(t->ev0);
    goto out;
  }
  if (ev_record(t->ev0, stream) != 0) {
    ev_destroy(t->ev0);
    ev_destroy(t->ev1);
    goto out;
  }
  t->cand = pick;
  t->state = TRY_BEGUN;
  t->last_at = r->launches;
  t->launches = r->c[pick].batch > 1 && !r->cold ? r->c[pick].batch : 1;
  t->done = 1;
  t->cold = cold_first;
  t->stream = stream;
  token_take(stream, r);
  r->ntries++;
  r->c[pick].issued++;
  *use = pick;
  if (t->launches == 1) ticket = t; /* else the batch's last launch ends it */
out:
  capture_mode_restore(old_mode);
  return ticket;
}

/* The cold try (refine.cold) whose launch this thread makes next, for the launch entry point
 * to load the kernel before the try's start (klaraptor__launch_starts); NULL otherwise. */
static _Thread_local rf_try *t_cold;

/* Called by the launch entry point (klaraptor_prof.c) right before every launch it passes on,
 * with the kernel handle and stream it was given. For a key launched once a run, the timed
 * launch is the run's first: its kernel may not be loaded yet (lazy loading loads it in the
 * launch call, while the start event, recorded before, is already complete on an idle stream).
 * So the kernel is loaded here, and the start event recorded again after that, right before
 * the launch. A launch that does not come here (klaraptor_select's) keeps the first record. */
void klaraptor__launch_starts(void *kernel, void *stream) {
  rf_try *t = t_cold;
  if (!t) return;
  t_cold = NULL;
  func_load(kernel); /* without the lock: loading may take milliseconds */
  pthread_mutex_lock(&g_lock);
  if (t->state == TRY_BEGUN && t->stream == stream && t->ev0) {
    int old_mode = capture_mode_relaxed();
    (void)ev_record(t->ev0, stream); /* on failure, the first record stands */
    capture_mode_restore(old_mode);
  }
  pthread_mutex_unlock(&g_lock);
}

void klaraptor_launch_end(uint64_t ticket) {
  if (!ticket) return;
  rf_try *t = (rf_try *)(uintptr_t)ticket;
  if (t_cold == t) t_cold = NULL;
  pthread_mutex_lock(&g_lock);
  int old_mode = capture_mode_relaxed();
  if (t->state == TRY_BEGUN) {
    t->failed = launch_error_pending();
    if (ev_record(t->ev1, t->stream) == 0) {
      t->state = TRY_ENDED;
    } else {
      ev_destroy(t->ev0);
      ev_destroy(t->ev1);
      t->ev0 = t->ev1 = NULL;
      t->state = TRY_DONE;
    }
  } else if (t->state == TRY_ABANDONED) {
    ev_destroy(t->ev0);
    ev_destroy(t->ev1);
    t->ev0 = t->ev1 = NULL;
    t->state = TRY_DONE;
  }
  capture_mode_restore(old_mode);
  pthread_mutex_unlock(&g_lock);
}

/* At exit: every key still refining keeps what it measured in the choices cache, and says in
 * the log which shape it launched last (the one the next run starts from). Tries still on the
 * GPU are read only if they have completed. A key whose tries are all read and complete
 * settles now (and the walk goes on in the next run when it has a shape to add): a key
 * launched once a run times its last candidate in its last launch. */
static void rf_save_all(void) {
  pthread_mutex_lock(&g_lock);
  memo_table *t = atomic_load_explicit(&g_memo, memory_order_relaxed);
  for (size_t i = 0; t && i <= t->mask; i++) {
    memo_node *m = atomic_load_explicit(&t->slots[i], memory_order_relaxed);
    if (!m || !m->r || atomic_load_explicit(&m->settled, memory_order_relaxed)) continue;
    refine *r = m->r;
    int old_mode = capture_mode_relaxed();
    rf_poll(r);
    capture_mode_restore(old_mode);
    rf_prune(r);
    int waiting = 0;
    for (int j = 0; j < r->nc; j++) waiting += rf_pending(r, j);
    if (!waiting && rf_complete(r) && !rf_walk(r, m)) {
      rf_settle(m, m->data, m->ordinal);
      continue;
    }
    progress_write(m->e, r, m->data);
    int ch = rf_choice(r);
    if (ch < 0) continue;
    double bt = r->c[ch].n ? cand_median(&r->c[ch]) : 0, extra = 0;
    for (int j = 0; bt > 0 && j < r->nc; j++) extra += r->c[j].spent_us - bt * r->c[j].spent_n;
    int timed = 0;
    for (int j = 0; j < r->nc; j++) timed += r->c[j].n > 0;
    rf_log(m->e, m->data, r->dev, m->ordinal,
           "not settled at exit after launches=%d: launching block=%ux%ux%u grid=%ux%ux%u "
           "(candidate=%s, %d of %d candidates timed, extra_us=%.1f of %.1f)",
           r->prior + r->launches, r->c[ch].block[0], r->c[ch].block[1], r->c[ch].block[2],
           r->c[ch].grid[0], r->c[ch].grid[1], r->c[ch].grid[2], r->c[ch].label, timed, r->nc,
           extra, bt * r->launches + extra);
  }
  pthread_mutex_unlock(&g_lock);
}

void klaraptor__save_progress_for_tests(void) { rf_save_all(); }

int klaraptor__refining_on(void *stream) {
  pthread_mutex_lock(&g_lock);
  rf_token *tk = token_of(stream);
  int held = tk && tk->owner && rf_in_flight(tk->owner, stream);
  pthread_mutex_unlock(&g_lock);
  return held;
}

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
  ensure_init();
  if (g_cfg.disabled) return 0;
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
  int cur_rc = g_current(&ordinal);
  if (cur_rc != 0) ordinal = -1;
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
  rf_try *ticket = NULL;
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
    decide_locked(e, cur_rc, ordinal, data, &d, &src, &dev, &model);
    memo_node *nm = malloc(sizeof *nm + (size_t)n_data * sizeof(int64_t));
    int stored = 0;
    decision cached;
    char cached_label[24] = "";
    int from_cache = 0;
    if (nm) {
      nm->e = e;
      nm->ordinal = ordinal;
      nm->n = n_data;
      nm->hash = h;
      nm->d = d;
      nm->r = NULL;
      atomic_init(&nm->settled, 1);
      if (n_data) memcpy(nm->data, data, (size_t)n_data * sizeof(int64_t));
      /* Refinement: a model's choice, timing possible, not the profiling variant. */
      if (!d.keep && model && dev && g_cfg.refine_k > 0 && timing_available() &&
          !atomic_load_explicit(&g_profile_note, memory_order_acquire)) {
        if (choices_read(e, model, dev, data, &cached, cached_label, sizeof cached_label) ==
            0) {
          nm->d = cached;
          from_cache = 1;
        } else if (g_refining < RF_MAX_REFINING) {
          nm->r = rf_new(e, model, dev, data, &d, pb, pg);
          if (nm->r) {
            atomic_init(&nm->settled, 0);
            progress_read(e, nm->r, data);
            static int registered;
            if (!registered) registered = atexit(rf_save_all) == 0;
          }
        } else if (!g_refining_full) {
          /* a program whose data values change at every launch (a loop index among them):
           * those keys are launched too few times to refine, and each would hold state */
          g_refining_full = 1;
          static const char msg[] = "klaraptor: refinement is trying 256 launch keys at once: "
                                    "later keys take the model's choice until some settle\n";
          log_line(msg, sizeof msg - 1);
        }
      }
      stored = memo_insert_locked(nm) == 0;
      if (!stored) {
        rf_free(nm->r);
        free(nm);
        nm = NULL;
      } else if (nm->r) {
        g_refining++;
      }
    }
    if (stored || !g_memo_full_logged) {
      log_decision(e, data, &d, pb, pg, srcbuf, ordinal, dev);
      /* A forced shape that cannot be used is worth a word even without KLARAPTOR_LOG. */
      if (g_cfg.log_fd < 0 && strncmp(srcbuf, "fallback: forced", 16) == 0)
        warn("%s: KLARAPTOR_FORCE %s", kname(e->k), srcbuf + strlen("fallback: "));
    }
    if (nm && from_cache) {
      const uint32_t *cb = cached.keep ? pb : cached.block, *cg = cached.keep ? pg : cached.grid;
      rf_log(e, data, dev, ordinal,
             "settled on block=%ux%ux%u grid=%ux%ux%u from the choices cache (candidate=%s)",
             cb[0], cb[1], cb[2], cg[0], cg[1], cg[2], cached_label);
    } else if (nm && nm->r) {
      rf_log_trying(e, data, nm->r, ordinal);
      if (nm->r->cold)
        rf_log(e, data, dev, ordinal,
               "the last run launched it once: its first launch is timed (cold), one candidate "
               "a run");
    }
    if (!stored && !g_memo_full_logged) {
      g_memo_full_logged = 1;
      static const char msg[] = "klaraptor: the memo is full: later decisions are made at "
                                "every launch and not logged\n";
      log_line(msg, sizeof msg - 1);
    }
    m = nm;
  }
  if (m && !atomic_load_explicit(&m->settled, memory_order_relaxed)) {
    memo_node *mm = (memo_node *)m;
    int use = -1;
    ticket = rf_step(mm, data, ordinal, stream, can_time, &use);
    t_cold = ticket && ticket->cold ? ticket : NULL;
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
  pthread_mutex_unlock(&g_lock);
  apply(&d, grid_xy, grid_z, block_xy, block_z);
  apply_shmem(e, data, &d, shmem);
  note_profile(e, data, grid_xy, grid_z, block_xy, block_z);
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
      if (m) rf_free(m->r);
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
  g_ntokens = 0;
  g_turns = 0;
  free(g_cfg.choices_dir);
  g_cfg.choices_dir = NULL;
  g_choices_warned = 0;
  atomic_store_explicit(&g_inited, 0, memory_order_release);
  pthread_mutex_unlock(&g_lock);
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
