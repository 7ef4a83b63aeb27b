//! Chebyshev polynomials, the basis the least-squares systems are built in, and the
//! conversion of tensor coefficients to the monomial basis they are stored in.
//!
//! Both bases span the same tensor-product space for the same degree bounds, so the choice
//! changes the conditioning of the least-squares matrix, not the fitted function. On `[−1, 1]`
//! the columns `T_k(t)` are far closer to orthogonal than `t^k`, which keeps the normal
//! equations used for screening usable, and costs nothing afterwards: degrees are at most a
//! few, and the conversion multiplies coefficients by small integers.

/// `T_0(t), …, T_d(t)` into `out[..=d]` by the three-term recurrence.
pub(crate) fn chebyshev_values(t: f64, out: &mut [f64]) {
    if out.is_empty() {
        return;
    }
    out[0] = 1.0;
    if out.len() > 1 {
        out[1] = t;
    }
    for k in 2..out.len() {
        out[k] = 2.0 * t * out[k - 1] - out[k - 2];
    }
}

/// `m[k][j]` = coefficient of `t^j` in `T_k(t)`, for `k, j ≤ d`.
pub(crate) fn chebyshev_to_monomial(d: usize) -> Vec<Vec<f64>> {
    let mut m = vec![vec![0.0; d + 1]; d + 1];
    m[0][0] = 1.0;
    if d >= 1 {
        m[1][1] = 1.0;
    }
    for k in 2..=d {
        for j in 0..=d {
            let from_prev = if j >= 1 { 2.0 * m[k - 1][j - 1] } else { 0.0 };
            m[k][j] = from_prev - m[k - 2][j];
        }
    }
    m
}

/// Apply `f` to every fiber of the dense tensor `coeffs` (shape `dims`, axis 0 slowest) along
/// `axis`; `f` maps a fiber of length `dims[axis]` to one of length `new_len`.
pub(crate) fn map_fibers(
    coeffs: &[f64],
    dims: &[usize],
    axis: usize,
    new_len: usize,
    mut f: impl FnMut(&[f64]) -> Vec<f64>,
) -> Vec<f64> {
    let inner: usize = dims[axis + 1..].iter().product();
    let outer: usize = dims[..axis].iter().product();
    let len = dims[axis];
    let mut out = vec![0.0; outer * new_len * inner];
    let mut fiber = vec![0.0; len];
    for o in 0..outer {
        for r in 0..inner {
            for (k, slot) in fiber.iter_mut().enumerate() {
                *slot = coeffs[(o * len + k) * inner + r];
            }
            let mapped = f(&fiber);
            for (k, v) in mapped.into_iter().enumerate() {
                out[(o * new_len + k) * inner + r] = v;
            }
        }
    }
    out
}

/// Dense tensor coefficients in the Chebyshev basis `∏ T_{α_i}(t_i)` to the monomial basis
/// `∏ t_i^{α_i}`, same degree bounds.
pub(crate) fn tensor_chebyshev_to_monomial(coeffs: &[f64], degs: &[u32]) -> Vec<f64> {
    let dims: Vec<usize> = degs.iter().map(|&d| d as usize + 1).collect();
    let mut out = coeffs.to_vec();
    for (axis, &d) in degs.iter().enumerate() {
        if d == 0 {
            continue;
        }
        let m = chebyshev_to_monomial(d as usize);
        out = map_fibers(&out, &dims, axis, dims[axis], |fiber| {
            (0..=d as usize)
                .map(|j| fiber.iter().zip(&m).map(|(c, row)| c * row[j]).sum())
                .collect()
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::poly::{DegreeBounds, Poly};

    #[test]
    fn recurrence_matches_closed_form() {
        let mut v = [0.0; 5];
        let t = 0.37_f64;
        chebyshev_values(t, &mut v);
        for (k, vk) in v.iter().enumerate() {
            assert!((vk - (k as f64 * t.acos()).cos()).abs() < 1e-14);
        }
    }

    #[test]
    fn conversion_preserves_values() {
        let degs = [3u32, 2];
        let coeffs: Vec<f64> = (0..12).map(|i| (i as f64 * 0.7).sin()).collect();
        let mono = tensor_chebyshev_to_monomial(&coeffs, &degs);
        let p = Poly::new(DegreeBounds(degs.to_vec()), mono).unwrap();
        let (t0, t1) = (0.4, -0.9);
        let (mut a, mut b) = ([0.0; 4], [0.0; 3]);
        chebyshev_values(t0, &mut a);
        chebyshev_values(t1, &mut b);
        let mut direct = 0.0;
        for i in 0..4 {
            for j in 0..3 {
                direct += coeffs[i * 3 + j] * a[i] * b[j];
            }
        }
        assert!((p.eval_scaled(&[t0, t1]) - direct).abs() < 1e-13);
    }
}
