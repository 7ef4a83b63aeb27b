/*
 * klaraptor: occupancy and the MWP-CWP performance model, C99.
 *
 * The one implementation of both: klaraptor-model compiles this file into the Rust crate
 * (model/c/ffi.c, model/src/ffi.rs), so the link ranks shapes with it, and every rational
 * program includes it (model/src/c_emit.rs). model/src/occupancy.rs and
 * model/src/mwp_cwp.rs document every equation and its source (Hong & Kim 2009, Sim et al.
 * 2012, and our own corrections). Everything is static and prefixed kl_: each rational
 * program carries its own copy.
 */
#ifndef KL_MODEL_C_INCLUDED
#define KL_MODEL_C_INCLUDED

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define KL_MAX_CARVEOUTS 16

/* A program may use only some of these functions and devices: no unused warnings. */
#if defined(__GNUC__) || defined(__clang__)
#define KL_UNUSED __attribute__((unused))
#else
#define KL_UNUSED
#endif

/* Occupancy limiters (kl_occupancy_result.limiter). */
#define KL_OCC_WARPS 1
#define KL_OCC_BLOCKS 2
#define KL_OCC_REGISTERS 3
#define KL_OCC_SHARED_MEMORY 4

/* What bounds a prediction (kl_prediction.limiter). 9..11: the launch cannot run. */
#define KL_LIMIT_MEMORY_LATENCY 1
#define KL_LIMIT_MEMORY_BANDWIDTH 2
#define KL_LIMIT_COMPUTE 3
#define KL_LIMIT_OCCUPANCY_WARPS 4
#define KL_LIMIT_OCCUPANCY_BLOCKS 5
#define KL_LIMIT_OCCUPANCY_REGISTERS 6
#define KL_LIMIT_OCCUPANCY_SHARED_MEMORY 7
#define KL_LIMIT_TOO_FEW_BLOCKS 8
#define KL_LIMIT_EXCEEDS_LIMITS 9
#define KL_LIMIT_EXCEEDS_REGISTERS 10
#define KL_LIMIT_EXCEEDS_SHARED_MEMORY 11
#define KL_LIMIT_BLOCK_DISPATCH 12

/* Carveout preference for kl_occupancy: the driver's default (largest shared memory). */
#define KL_CARVEOUT_DEFAULT (-1)

#define KL_SECTOR_BYTES 32.0
#define KL_COALESCED_SECTORS 4.0
#define KL_ELEMENT_BYTES 4.0
#define KL_LINE_SECTORS 4.0
#define KL_METRIC_CAP 1e30

/* One GPU (model/src/device.rs documents every field; device_to_c writes these). */
typedef struct kl_device {
    const char *name;
    const char *uuid;
    uint32_t cc_major, cc_minor;
    uint32_t sm_count;
    double sm_clock_mhz;
    uint32_t warp_size;
    uint32_t sub_partitions;
    uint32_t max_threads_per_block;
    uint32_t max_threads_per_sm;
    uint32_t max_blocks_per_sm;
    uint32_t max_block_dim[3];
    uint32_t max_grid_dim[3];
    uint32_t regs_per_sm, regs_per_block, max_regs_per_thread, reg_alloc_unit;
    uint32_t smem_per_sm, smem_per_block, smem_per_block_optin;
    uint32_t smem_reserved_per_block, smem_alloc_unit;
    uint32_t n_carveouts;
    uint32_t carveout_bytes[KL_MAX_CARVEOUTS]; /* ascending */
    uint32_t l1_unified_per_sm; /* L1 and shared memory together; 0: unknown */
    double mem_latency_cycles;
    double l2_latency_cycles;
    double l1_latency_cycles;
    double departure_delay_coalesced_cycles;
    double departure_delay_coalesced_dram_cycles; /* lines from DRAM; 0: as coalesced */
    double departure_delay_uncoalesced_cycles; /* per 32-byte transaction */
    double dram_bandwidth_gbs;
    double issue_cycles;        /* per warp instruction, per warp scheduler */
    double shared_issue_cycles; /* per shared-memory warp instruction, per scheduler */
    double block_dispatch_cycles; /* between two blocks one SM starts */
    double warp_drain_cycles;     /* a wave's extra cycles per warp of a block beyond the first */
    double dram_queue_exponent;   /* q of DRAM under load; 0: the hard minimum */
} kl_device;

/* One launch: shared memory is static + dynamic bytes per block. */
typedef struct kl_launch {
    uint32_t block[3];
    uint32_t grid[3];
    uint32_t regs_per_thread;
    uint32_t smem_per_block;
} kl_launch;

/* Per-warp metrics, averaged over the warps of the grid. */
typedef struct kl_metrics {
    double inst;
    double gld_inst, gst_inst;
    double shared_inst;
    double sync_inst;
    double gld_sectors_per_req, gst_sectors_per_req; /* 4 = coalesced, 32 = diverged */
    double dram_bytes;
    double gld_l1_hit_rate; /* share of global load sectors the L1 served */
    double mlp; /* global requests one warp keeps in flight together (1: one at a time) */
    double l1_reuse_loop; /* 1: the L1 hits are re-reads of a block's share in a later pass */
} kl_metrics;

typedef struct kl_occupancy_result {
    uint32_t blocks_per_sm; /* 0: the block cannot launch */
    uint32_t warps_per_sm;
    uint32_t warps_per_block;
    int limiter; /* KL_OCC_* */
    uint32_t by_warps, by_blocks, by_registers, by_shared_memory; /* UINT32_MAX: none */
} kl_occupancy_result;

typedef struct kl_prediction {
    double cycles;  /* HUGE_VAL when the launch cannot run */
    double time_us; /* HUGE_VAL when the launch cannot run */
    double mwp, cwp; /* of one warp scheduler, first wave */
    uint32_t active_warps_per_sm, active_blocks_per_sm;
    uint64_t waves;
    int limiter; /* KL_LIMIT_* */
    const char *limiter_name;
} kl_prediction;

static uint64_t kl_div_ceil(uint64_t a, uint64_t b)
{
    return a / b + (a % b != 0);
}

static uint64_t kl_round_up(uint64_t a, uint64_t unit)
{
    return kl_div_ceil(a, unit) * unit;
}

static uint32_t kl_clamp_u32(uint64_t v)
{
    return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

static double kl_min(double a, double b)
{
    return a < b ? a : b;
}

static double kl_max(double a, double b)
{
    return a > b ? a : b;
}

/* The chance that all of g requests hit, each with probability h (mwp_cwp.rs: all_hit) */
static double kl_all_hit(double h, double g)
{
    uint64_t n;
    double frac, acc = 1.0, base = h;
    g = kl_min(kl_max(g, 0.0), 4294967296.0);
    n = (uint64_t)g;
    frac = g - (double)n;
    while (n > 0) {
        if (n & 1u) {
            acc *= base;
        }
        base *= base;
        n >>= 1;
    }
    return acc * (1.0 - frac * (1.0 - h));
}

/* Metrics from fitted functions may leave their range: clamp to [0, 1e30], NaN -> 0. */
/* x^y for x > 0 without libm (a rational program links without -lm): the natural
 * logarithm from x = m 2^e, m in [1, 2), and 2 atanh((m - 1) / (m + 1)) as a series; the
 * exponential from r = t - k ln 2, |r| <= ln 2 / 2, as a series, times 2^k. Relative error
 * near 1e-15 for the arguments the model takes (x up to 1e30, |y log x| below 700). */
static double kl_ln(double x)
{
    const double ln2 = 0.69314718055994530942;
    double e = 0.0, z, z2, term, sum = 0.0;
    int i;
    while (x >= 2.0) {
        x *= 0.5;
        e += 1.0;
    }
    while (x < 1.0) {
        x *= 2.0;
        e -= 1.0;
    }
    z = (x - 1.0) / (x + 1.0);
    z2 = z * z;
    term = z;
    for (i = 1; i < 60; i += 2) {
        sum += term / (double)i;
        term *= z2;
    }
    return e * ln2 + 2.0 * sum;
}

static double kl_exp(double t)
{
    const double ln2 = 0.69314718055994530942;
    double k, r, term = 1.0, sum = 1.0;
    int i;
    if (t > 700.0)
        return HUGE_VAL;
    if (t < -700.0)
        return 0.0;
    k = (double)(long)(t / ln2 + (t >= 0.0 ? 0.5 : -0.5));
    r = t - k * ln2;
    for (i = 1; i < 30; i++) {
        term *= r / (double)i;
        sum += term;
    }
    while (k > 0.0) {
        sum *= 2.0;
        k -= 1.0;
    }
    while (k < 0.0) {
        sum *= 0.5;
        k += 1.0;
    }
    return sum;
}

static double kl_pow_pos(double x, double y)
{
    return x > 0.0 ? kl_exp(y * kl_ln(x)) : 0.0;
}

static double kl_clean(double x)
{
    if (x > 0.0) {
        return x < KL_METRIC_CAP ? x : KL_METRIC_CAP;
    }
    return 0.0;
}

/* The smallest carveout holding `bytes`; `fallback` when none does. */
static uint64_t kl_snap_carveout(const kl_device *d, uint64_t bytes, uint64_t fallback)
{
    uint32_t i;
    for (i = 0; i < d->n_carveouts && i < KL_MAX_CARVEOUTS; i++) {
        if ((uint64_t)d->carveout_bytes[i] >= bytes) {
            return d->carveout_bytes[i];
        }
    }
    return fallback;
}

/* Resident blocks per SM, as cudaOccupancyMaxActiveBlocksPerMultiprocessor computes them
 * (model/src/occupancy.rs). carveout_pct: KL_CARVEOUT_DEFAULT or 0..100. */
KL_UNUSED static void kl_occupancy(const kl_device *d, uint32_t threads_per_block,
                                   uint32_t regs_per_thread, uint32_t smem_per_block,
                                   int carveout_pct, kl_occupancy_result *out)
{
    uint64_t warp = d->warp_size;
    uint64_t threads = threads_per_block;
    uint64_t wpb = kl_div_ceil(threads, warp);
    uint64_t by_warps, by_blocks, by_registers, by_smem, blocks;
    uint64_t parts = d->sub_partitions;
    uint64_t regs_per_warp;
    uint64_t block_bytes;
    uint64_t limits[4];
    int codes[4];
    int i;

    /* 1. warp slots */
    if (threads == 0 || threads > d->max_threads_per_block) {
        by_warps = 0;
    } else {
        by_warps = ((uint64_t)d->max_threads_per_sm / warp) / wpb;
    }

    /* 2. resident-block slots */
    by_blocks = d->max_blocks_per_sm;

    /* 3. registers: per warp, within one sub-partition's share of the file */
    regs_per_warp = kl_round_up((uint64_t)regs_per_thread * warp, d->reg_alloc_unit);
    if (regs_per_thread > d->max_regs_per_thread
        || regs_per_warp * wpb > d->regs_per_block
        || regs_per_warp * kl_round_up(wpb, parts) > d->regs_per_block) {
        by_registers = 0;
    } else if (regs_per_warp == 0) {
        by_registers = UINT32_MAX;
    } else if (wpb == 0) {
        by_registers = 0;
    } else {
        uint64_t warps_per_part = ((uint64_t)d->regs_per_sm / parts) / regs_per_warp;
        by_registers = (warps_per_part * parts) / wpb;
    }

    /* 4. shared memory, within the carveout the driver picks */
    block_bytes = kl_round_up((uint64_t)smem_per_block + d->smem_reserved_per_block,
                              d->smem_alloc_unit);
    if (block_bytes > (uint64_t)d->smem_per_block_optin + d->smem_reserved_per_block) {
        by_smem = 0;
    } else if (block_bytes == 0) {
        by_smem = UINT32_MAX;
    } else {
        uint64_t preferred, capacity;
        if (carveout_pct < 0) {
            preferred = d->smem_per_sm;
        } else {
            uint64_t pct = carveout_pct > 100 ? 100 : (uint64_t)carveout_pct;
            preferred = pct * d->smem_per_sm / 100;
        }
        preferred = kl_snap_carveout(d, preferred, d->smem_per_sm);
        if (preferred >= block_bytes) {
            capacity = preferred;
        } else {
            capacity = kl_snap_carveout(d, block_bytes, d->smem_per_sm);
        }
        by_smem = capacity / block_bytes;
    }

    limits[0] = by_warps;
    codes[0] = KL_OCC_WARPS;
    limits[1] = by_registers;
    codes[1] = KL_OCC_REGISTERS;
    limits[2] = by_smem;
    codes[2] = KL_OCC_SHARED_MEMORY;
    limits[3] = by_blocks;
    codes[3] = KL_OCC_BLOCKS;
    blocks = limits[0];
    for (i = 1; i < 4; i++) {
        if (limits[i] < blocks) {
            blocks = limits[i];
        }
    }
    out->limiter = KL_OCC_WARPS;
    for (i = 0; i < 4; i++) {
        if (limits[i] == blocks) {
            out->limiter = codes[i];
            break;
        }
    }
    out->blocks_per_sm = kl_clamp_u32(blocks);
    out->warps_per_sm = kl_clamp_u32(blocks * wpb);
    out->warps_per_block = kl_clamp_u32(wpb);
    out->by_warps = kl_clamp_u32(by_warps);
    out->by_blocks = kl_clamp_u32(by_blocks);
    out->by_registers = kl_clamp_u32(by_registers);
    out->by_shared_memory = kl_clamp_u32(by_smem);
}

static const char *kl_limiter_name(int code)
{
    switch (code) {
    case KL_LIMIT_MEMORY_LATENCY: return "memory latency";
    case KL_LIMIT_MEMORY_BANDWIDTH: return "memory bandwidth";
    case KL_LIMIT_COMPUTE: return "compute";
    case KL_LIMIT_OCCUPANCY_WARPS: return "occupancy (threads)";
    case KL_LIMIT_OCCUPANCY_BLOCKS: return "occupancy (blocks)";
    case KL_LIMIT_OCCUPANCY_REGISTERS: return "occupancy (registers)";
    case KL_LIMIT_OCCUPANCY_SHARED_MEMORY: return "occupancy (shared memory)";
    case KL_LIMIT_TOO_FEW_BLOCKS: return "too few blocks";
    case KL_LIMIT_EXCEEDS_LIMITS: return "launch exceeds device limits";
    case KL_LIMIT_EXCEEDS_REGISTERS: return "block exceeds register limit";
    case KL_LIMIT_EXCEEDS_SHARED_MEMORY: return "block exceeds shared memory limit";
    case KL_LIMIT_BLOCK_DISPATCH: return "block dispatch";
    default: return "unknown";
    }
}

/* Per-warp quantities of the kernel (mwp_cwp.rs: per_warp). */
typedef struct kl_per_warp {
    double mem_insts, sync_inst, comp_cycles, mem_l, departure, mem_cycles, bytes_per_req;
} kl_per_warp;

#define KL_REGIME_COMPUTE 0
#define KL_REGIME_LATENCY 1
#define KL_REGIME_BANDWIDTH 2
#define KL_REGIME_FEW_WARPS 3

typedef struct kl_wave {
    double cycles, mwp, cwp;
    int regime;
} kl_wave;

/* How a warp's requests meet the cache lines (mwp_cwp.rs: WarpRows): the rows of its
 * footprint and the sectors one row takes in its line. */
typedef struct kl_warp_rows {
    double rows, row_sectors;
} kl_warp_rows;

static kl_warp_rows kl_warp_rows_of(const uint32_t block[3])
{
    kl_warp_rows w;
    uint32_t wx = block[0] < 1 ? 1 : block[0] > 32 ? 32 : block[0];
    uint32_t cy = 32 / wx < 1 ? 1 : 32 / wx;
    uint32_t wy = block[1] < 1 ? 1 : block[1] > cy ? cy : block[1];
    uint32_t cz = 32 / (wx * wy) < 1 ? 1 : 32 / (wx * wy);
    uint32_t wz = block[2] < 1 ? 1 : block[2] > cz ? cz : block[2];
    w.rows = (double)(wy * wz);
    /* sectors of wx 4-byte elements, at most one line's */
    w.row_sectors = kl_min((double)((wx * 4 + 31) / 32), KL_LINE_SECTORS);
    return w;
}

/* 128-byte lines touched by one warp request of mean sectors s (mwp_cwp.rs: lines_per_request) */
static double kl_lines_per_request(double s, kl_warp_rows w)
{
    double contiguous = w.rows * w.row_sectors;
    double at;
    if (s <= contiguous) /* rows along x, or one broadcast sector per row: the mean */
        return 0.5 * (kl_max(s / w.row_sectors, 1.0) + kl_max(kl_min(s, w.rows), 1.0));
    if (s >= 2.0 * contiguous)
        return s;
    at = kl_max(w.rows, 1.0);
    return at + (s - contiguous) * (2.0 * contiguous - at) / contiguous;
}

static void kl_per_warp_costs(const kl_device *d, const kl_metrics *m, double lanes, kl_warp_rows w,
                              kl_per_warp *k)
{
    double inst = kl_max(kl_clean(m->inst), 1.0);
    double gld = kl_clean(m->gld_inst);
    double gst = kl_clean(m->gst_inst);
    double shared = kl_min(kl_clean(m->shared_inst), inst);
    double s_ld = kl_clean(m->gld_sectors_per_req);
    double s_st = kl_clean(m->gst_sectors_per_req);
    double l1 = kl_min(kl_clean(m->gld_l1_hit_rate), 1.0);
    /* DRAM moves no more than the sectors that reach L2 */
    double to_l2 = KL_SECTOR_BYTES * ((1.0 - l1) * gld * s_ld + gst * s_st);
    double dram = kl_min(kl_clean(m->dram_bytes), to_l2);
    double mem_insts = gld + gst;
    double l_ld = kl_lines_per_request(s_ld, w);
    double l_st = kl_lines_per_request(s_st, w);
    /* caches: what the L1 does not serve goes on to L2 (stores always do); the share h of
     * that reaches DRAM */
    double useful = KL_ELEMENT_BYTES * lanes;
    double needed = (1.0 - l1) * gld * kl_min(KL_SECTOR_BYTES * s_ld, useful)
                    + gst * kl_min(KL_SECTOR_BYTES * s_st, useful);
    double h = needed > 0.0 ? kl_min(dram / needed, 1.0) : 1.0;
    double mem_l2 = h * d->mem_latency_cycles + (1.0 - h) * d->l2_latency_cycles;
    /* requests in flight together: a group of g waits for its slowest request; its loads
     * wait only the L1 when all g hit (probability l1^g) */
    double g = kl_min(kl_max(kl_clean(m->mlp), 1.0), kl_max(mem_insts, 1.0));
    double l1_all = kl_all_hit(l1, g);
    double mem_ld = l1_all * d->l1_latency_cycles + (1.0 - l1_all) * mem_l2;
    double dep_coal = d->departure_delay_coalesced_cycles;
    double dep_line = d->departure_delay_uncoalesced_cycles;
    /* a load passes the L1, then (on a miss) L2 and perhaps DRAM: the slower stage sets the
     * pace; stores are absorbed by L2 */
    double dep_dram = d->departure_delay_coalesced_dram_cycles > 0.0
                          ? d->departure_delay_coalesced_dram_cycles
                          : dep_coal;
    double dep_ld = kl_max(dep_coal, (1.0 - l1) * (h * dep_dram + (1.0 - h) * dep_coal));
    double mem_l_ld = mem_ld + (l_ld - 1.0) * dep_line;
    double mem_l_st = mem_l2 + (l_st - 1.0) * dep_line;

    k->mem_cycles = gld * mem_l_ld + gst * mem_l_st;
    if (mem_insts > 0.0) {
        k->mem_l = k->mem_cycles / mem_insts;
        k->departure = (gld * (dep_ld + (l_ld - 1.0) * dep_line)
                        + gst * (dep_coal + (l_st - 1.0) * dep_line)) / mem_insts;
    } else {
        k->mem_l = mem_ld;
        k->departure = dep_coal;
    }
    k->comp_cycles = d->issue_cycles * (inst - shared) + d->shared_issue_cycles * shared;
    /* the group departs back to back and is taken as one request of g transactions */
    if (g > 1.0) {
        double mem_l_g = k->mem_l + (g - 1.0) * k->departure;
        mem_insts = mem_insts / g;
        k->mem_l = mem_l_g;
        k->departure = g * k->departure;
        k->mem_cycles = mem_insts * mem_l_g;
    }
    k->bytes_per_req = mem_insts > 0.0 ? dram / mem_insts : 0.0;
    k->mem_insts = mem_insts;
    k->sync_inst = kl_clean(m->sync_inst);
}

/* One wave: warps_on_sm warps (blocks_on_sm blocks) on each of sms SMs (mwp_cwp.rs: wave). */
static kl_wave kl_wave_cycles(const kl_device *d, const kl_per_warp *k, uint64_t warps_on_sm,
                              uint64_t blocks_on_sm, uint64_t sms)
{
    kl_wave w;
    uint64_t parts = d->sub_partitions;
    double n = (double)kl_div_ceil(warps_on_sm, parts);
    double p_act = (double)(warps_on_sm < parts ? warps_on_sm : parts);
    double mwp_no_bw, freq_ghz, bw_per_warp, mwp_bw, cwp_full, overlap, comp_per_period;
    double load = 1.0;

    if (k->mem_insts <= 0.0) {
        w.cycles = n * k->comp_cycles;
        w.mwp = 0.0;
        w.cwp = n;
        w.regime = KL_REGIME_COMPUTE;
        return w;
    }
    mwp_no_bw = k->mem_l / (k->departure * p_act);
    freq_ghz = d->sm_clock_mhz / 1000.0;
    bw_per_warp = freq_ghz * k->bytes_per_req / k->mem_l;
    if (bw_per_warp > 0.0) {
        mwp_bw = d->dram_bandwidth_gbs / (bw_per_warp * (double)sms * p_act);
    } else {
        mwp_bw = n;
    }
    /* DRAM under load: requests queue as the demand nears the bandwidth, and their latency
     * grows by load = (1 + u^q)^(1/q), u the demand at the unloaded latency over the
     * bandwidth; the memory parallelism the SM gets is the requests in flight over it (a
     * soft minimum of the two that the hard one, q -> infinity, bounds) */
    if (d->dram_queue_exponent > 0.0 && bw_per_warp > 0.0 && mwp_bw > 0.0) {
        double in_flight = kl_min(mwp_no_bw, n);
        double q = d->dram_queue_exponent;
        double u = in_flight / mwp_bw;
        /* far past saturation the soft minimum is the bandwidth's share (load = u) */
        load = u > 1e6 ? u : kl_pow_pos(1.0 + kl_pow_pos(u, q), 1.0 / q);
        w.mwp = in_flight / load;
    } else {
        w.mwp = kl_min(kl_min(mwp_no_bw, mwp_bw), n);
    }
    cwp_full = (k->mem_cycles + k->comp_cycles) / k->comp_cycles;
    w.cwp = kl_min(cwp_full, n);
    overlap = kl_max(w.mwp - 1.0, 0.0);
    comp_per_period = k->comp_cycles / kl_max(k->mem_insts, 1.0);
    if (n <= mwp_no_bw && n <= mwp_bw && n <= cwp_full) {
        w.cycles = k->mem_cycles * load + k->comp_cycles + comp_per_period * overlap;
        w.regime = KL_REGIME_FEW_WARPS;
    } else if (w.cwp >= w.mwp) {
        w.regime = mwp_bw <= mwp_no_bw ? KL_REGIME_BANDWIDTH : KL_REGIME_LATENCY;
        w.cycles = k->mem_cycles * n / w.mwp + comp_per_period * overlap;
        /* the SM issues every instruction of its warps whatever hides the memory latency */
        w.cycles = kl_max(w.cycles, k->mem_l + k->comp_cycles * n);
    } else {
        w.cycles = k->mem_l + k->comp_cycles * n;
        w.regime = KL_REGIME_COMPUTE;
    }
    /* synchronisation: MWP of the whole SM, blocks resident in this wave */
    w.cycles += k->departure * kl_max(w.mwp * p_act - 1.0, 0.0) * k->sync_inst
                * (double)blocks_on_sm;
    return w;
}

static int kl_unlaunchable(kl_prediction *out, int limiter)
{
    out->cycles = HUGE_VAL;
    out->time_us = HUGE_VAL;
    out->mwp = 0.0;
    out->cwp = 0.0;
    out->active_warps_per_sm = 0;
    out->active_blocks_per_sm = 0;
    out->waves = 0;
    out->limiter = limiter;
    out->limiter_name = kl_limiter_name(limiter);
    return limiter;
}

/* The L1's capacity (mwp_cwp.rs: module doc). A loop kernel whose L1 hits are re-reads of
 * its block's own share in a later pass of its loop keeps them only while the shares of the
 * blocks resident on an SM fit in the L1 together: the L1 is what the resident blocks'
 * shared memory leaves of the unified L1 and shared memory. A block's share is what its
 * warps load that the L1 did not serve (each sector once); past the capacity the hit rate
 * falls in proportion to the share of the blocks' data the L1 still holds. */
static void kl_l1_capacity(const kl_device *d, const kl_launch *l, const kl_occupancy_result *occ,
                           uint64_t blocks, kl_metrics *m)
{
    double hit = kl_min(kl_clean(m->gld_l1_hit_rate), 1.0);
    double resident, l1, share, held;
    uint64_t per_sm;

    if (!(m->l1_reuse_loop > 0.0) || d->l1_unified_per_sm == 0 || hit <= 0.0) {
        return;
    }
    per_sm = kl_div_ceil(blocks, d->sm_count);
    resident = (double)(occ->blocks_per_sm < per_sm ? occ->blocks_per_sm : per_sm);
    l1 = (double)d->l1_unified_per_sm - (double)l->smem_per_block * resident;
    share = (1.0 - hit) * kl_clean(m->gld_inst) * kl_clean(m->gld_sectors_per_req)
            * KL_SECTOR_BYTES * (double)occ->warps_per_block;
    held = share * resident;
    if (held > l1) {
        m->gld_l1_hit_rate = hit * kl_max(l1, 0.0) / held;
    }
}

/* Predicts one launch (mwp_cwp.rs: predict). Returns 0, or the KL_LIMIT_EXCEEDS_* code
 * when the launch cannot run (then cycles and time_us are HUGE_VAL). */
KL_UNUSED static int kl_predict(const kl_device *d, const kl_launch *l, const kl_metrics *m,
                                kl_prediction *out)
{
    kl_occupancy_result occ;
    kl_per_warp k;
    kl_wave last, first;
    uint64_t threads, blocks, a, sms, wpb, per_wave, waves, rest, last_blocks_on_sm, last_sms;
    uint64_t first_blocks_on_sm;
    double cycles, dispatch, drain;
    int i, limiter;

    for (i = 0; i < 3; i++) {
        if (l->block[i] == 0 || l->grid[i] == 0 || l->block[i] > d->max_block_dim[i]
            || l->grid[i] > d->max_grid_dim[i]) {
            return kl_unlaunchable(out, KL_LIMIT_EXCEEDS_LIMITS);
        }
    }
    threads = (uint64_t)l->block[0] * l->block[1] * l->block[2];
    if (threads > d->max_threads_per_block) {
        return kl_unlaunchable(out, KL_LIMIT_EXCEEDS_LIMITS);
    }
    kl_occupancy(d, (uint32_t)threads, l->regs_per_thread, l->smem_per_block,
                 KL_CARVEOUT_DEFAULT, &occ);
    if (occ.blocks_per_sm == 0) {
        if (occ.limiter == KL_OCC_REGISTERS) {
            return kl_unlaunchable(out, KL_LIMIT_EXCEEDS_REGISTERS);
        }
        if (occ.limiter == KL_OCC_SHARED_MEMORY) {
            return kl_unlaunchable(out, KL_LIMIT_EXCEEDS_SHARED_MEMORY);
        }
        return kl_unlaunchable(out, KL_LIMIT_EXCEEDS_LIMITS);
    }
    blocks = (uint64_t)l->grid[0] * l->grid[1] * l->grid[2];
    {
        kl_metrics held = *m;
        kl_l1_capacity(d, l, &occ, blocks, &held);
        kl_per_warp_costs(d, &held, (double)(threads < 32 ? threads : 32), kl_warp_rows_of(l->block),
                          &k);
    }
    a = occ.blocks_per_sm;
    sms = d->sm_count;
    wpb = occ.warps_per_block;
    per_wave = a * sms;
    waves = kl_div_ceil(blocks, per_wave);
    rest = blocks - (waves - 1) * per_wave;
    last_blocks_on_sm = kl_div_ceil(rest, sms);
    last_sms = rest < sms ? rest : sms;
    last = kl_wave_cycles(d, &k, last_blocks_on_sm * wpb, last_blocks_on_sm, last_sms);
    /* block drain: a wave lasts longer per warp of a block beyond the first */
    drain = d->warp_drain_cycles * ((double)wpb - 1.0);
    if (waves > 1) {
        first = kl_wave_cycles(d, &k, a * wpb, a, sms);
        cycles = (double)(waves - 1) * (first.cycles + drain) + last.cycles + drain;
        first_blocks_on_sm = a;
    } else {
        first = last;
        cycles = last.cycles + drain;
        first_blocks_on_sm = last_blocks_on_sm;
    }
    /* block ramp: an SM starts its first wave's blocks one block_dispatch_cycles apart */
    cycles += d->block_dispatch_cycles * ((double)first_blocks_on_sm - 1.0);
    if (blocks < sms) {
        limiter = KL_LIMIT_TOO_FEW_BLOCKS;
    } else if (first.regime == KL_REGIME_COMPUTE) {
        limiter = KL_LIMIT_COMPUTE;
    } else if (first.regime == KL_REGIME_BANDWIDTH) {
        limiter = KL_LIMIT_MEMORY_BANDWIDTH;
    } else if (first.regime == KL_REGIME_LATENCY) {
        limiter = KL_LIMIT_MEMORY_LATENCY;
    } else if (first_blocks_on_sm < a) {
        limiter = KL_LIMIT_TOO_FEW_BLOCKS;
    } else {
        limiter = KL_LIMIT_OCCUPANCY_WARPS + (occ.limiter - KL_OCC_WARPS);
    }
    dispatch = (double)kl_div_ceil(blocks, sms) * d->block_dispatch_cycles;
    if (dispatch > cycles) {
        cycles = dispatch;
        limiter = KL_LIMIT_BLOCK_DISPATCH;
    }
    out->cycles = cycles;
    out->time_us = cycles / d->sm_clock_mhz;
    out->mwp = first.mwp;
    out->cwp = first.cwp;
    out->active_warps_per_sm = (uint32_t)(first_blocks_on_sm * wpb);
    out->active_blocks_per_sm = (uint32_t)first_blocks_on_sm;
    out->waves = waves;
    out->limiter = limiter;
    out->limiter_name = kl_limiter_name(limiter);
    return 0;
}

/* The selection rule: of the n shapes blocks[i] with predicted times ts[i] (those with
 * ok[i] set; every one when ok is NULL), scanned in order, a shape faster than the best by
 * more than a relative 1e-9 replaces it; one within that replaces it when it has more
 * threads, then a larger bx, then a larger by, lowering the best time only when faster.
 * Returns the chosen index (-1 when none) and, in *best_us when not NULL, the best time. */
KL_UNUSED static int kl_choose(const double *ts, const unsigned char *ok,
                               const uint32_t (*blocks)[3], size_t n, double *best_us)
{
    double best = HUGE_VAL;
    int best_i = -1;
    size_t i;
    for (i = 0; i < n; i++) {
        const uint32_t *b = blocks[i];
        double t;
        if (ok && !ok[i]) {
            continue;
        }
        t = ts[i];
        if (best_i < 0 || t < best * (1.0 - 1e-9)) {
            best = t;
            best_i = (int)i;
        } else if (t <= best * (1.0 + 1e-9)) {
            const uint32_t *o = blocks[best_i];
            uint64_t threads = (uint64_t)b[0] * b[1] * b[2];
            uint64_t ot = (uint64_t)o[0] * o[1] * o[2];
            if (threads > ot || (threads == ot && (b[0] > o[0] || (b[0] == o[0] && b[1] > o[1])))) {
                if (t < best) {
                    best = t;
                }
                best_i = (int)i;
            }
        }
    }
    if (best_us) {
        *best_us = best;
    }
    return best_i;
}

#endif /* KL_MODEL_C_INCLUDED */
