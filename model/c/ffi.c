/*
 * The model of kl_model.c with external linkage, for the Rust crate (model/src/ffi.rs):
 * kl_model.c keeps everything static so that each rational program carries its own copy;
 * these functions are what Rust calls.
 */
#include "kl_model.c"

void klaraptor_model_predict(const kl_device *d, const kl_launch *l, const kl_metrics *m,
                             kl_prediction *out)
{
    (void)kl_predict(d, l, m, out);
}

void klaraptor_model_occupancy(const kl_device *d, uint32_t threads_per_block,
                               uint32_t regs_per_thread, uint32_t smem_per_block,
                               int carveout_pct, kl_occupancy_result *out)
{
    kl_occupancy(d, threads_per_block, regs_per_thread, smem_per_block, carveout_pct, out);
}

int klaraptor_model_choose(const double *ts, const uint32_t (*blocks)[3], size_t n)
{
    return kl_choose(ts, NULL, blocks, n, NULL);
}

/* The pieces of the prediction the Rust unit tests check one by one. */
double klaraptor_model_all_hit(double h, double g)
{
    return kl_all_hit(h, g);
}

void klaraptor_model_warp_rows_of(const uint32_t block[3], kl_warp_rows *out)
{
    *out = kl_warp_rows_of(block);
}

double klaraptor_model_lines_per_request(double s, const kl_warp_rows *w)
{
    return kl_lines_per_request(s, *w);
}

void klaraptor_model_per_warp(const kl_device *d, const kl_metrics *m, double lanes,
                              const kl_warp_rows *w, kl_per_warp *out)
{
    kl_per_warp_costs(d, m, lanes, *w, out);
}
