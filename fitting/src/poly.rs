//! Multivariate polynomials with per-variable degree bounds (tensor-product monomial sets),
//! stored densely in the scaled variables `t`, evaluated in Horner form.

use serde::{Deserialize, Serialize};

use crate::FitError;

/// Per-variable maximum degrees `(d_0, …, d_{n−1})`. The monomial set it stands for is the
/// tensor product `{ t^α : α_i ≤ d_i }`, with `∏(d_i + 1)` elements.
///
/// Tensor-product sets (rather than total-degree sets) are what "a degree bound per variable"
/// means in the KLARAPTOR paper, they contain the mixed terms that products such as `bx·by`
/// need, and they make the whole degree-selection lattice a product of chains.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DegreeBounds(pub Vec<u32>);

impl DegreeBounds {
    pub fn zeros(nvars: usize) -> Self {
        DegreeBounds(vec![0; nvars])
    }

    pub fn uniform(nvars: usize, degree: u32) -> Self {
        DegreeBounds(vec![degree; nvars])
    }

    pub fn nvars(&self) -> usize {
        self.0.len()
    }

    /// Sum of the per-variable degrees.
    pub fn total(&self) -> u32 {
        self.0.iter().sum()
    }

    /// Number of monomials `∏(d_i + 1)`, or `None` on overflow.
    pub fn monomial_count(&self) -> Option<usize> {
        self.0
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d as usize + 1))
    }

    /// Whether every degree is at most the corresponding one of `other`.
    pub fn le(&self, other: &DegreeBounds) -> bool {
        self.0.len() == other.0.len() && self.0.iter().zip(&other.0).all(|(a, b)| a <= b)
    }

    pub fn contains(&self, m: &Monomial) -> bool {
        m.0.len() == self.0.len() && m.0.iter().zip(&self.0).all(|(a, b)| a <= b)
    }

    /// The monomials of the set, in the dense storage order of [`Poly`] (variable 0 varies
    /// slowest).
    pub fn monomials(&self) -> impl Iterator<Item = Monomial> + '_ {
        let count = self.monomial_count().unwrap_or(0);
        (0..count).map(move |i| Monomial(multi_index(i, &self.0)))
    }

    /// Every tuple `≤ self` componentwise, variable 0 slowest.
    pub fn sub_bounds(&self) -> Vec<DegreeBounds> {
        self.monomials().map(|m| DegreeBounds(m.0)).collect()
    }
}

/// A monomial `t_0^{α_0} ⋯ t_{n−1}^{α_{n−1}}`, given by its exponents.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Monomial(pub Vec<u32>);

impl Monomial {
    pub fn degree(&self) -> u32 {
        self.0.iter().sum()
    }

    pub fn is_constant(&self) -> bool {
        self.0.iter().all(|&a| a == 0)
    }
}

/// Exponents of the `index`-th monomial of the tensor set `degs` (variable 0 slowest).
pub(crate) fn multi_index(mut index: usize, degs: &[u32]) -> Vec<u32> {
    let mut out = vec![0u32; degs.len()];
    for (slot, &d) in out.iter_mut().zip(degs).rev() {
        let base = d as usize + 1;
        *slot = (index % base) as u32;
        index /= base;
    }
    out
}

/// Dense position of the monomial `alpha` in the tensor set `degs`.
pub(crate) fn dense_index(alpha: &[u32], degs: &[u32]) -> usize {
    alpha
        .iter()
        .zip(degs)
        .fold(0usize, |acc, (&a, &d)| acc * (d as usize + 1) + a as usize)
}

/// A polynomial in the scaled variables `t` with a tensor-product monomial set: the
/// coefficient of `t^α` is `coeffs[dense_index(α)]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "PolyRepr", into = "PolyRepr")]
pub struct Poly {
    degrees: DegreeBounds,
    coeffs: Vec<f64>,
}

#[derive(Serialize, Deserialize)]
struct PolyRepr {
    degrees: Vec<u32>,
    coeffs: Vec<f64>,
}

impl TryFrom<PolyRepr> for Poly {
    type Error = FitError;
    fn try_from(r: PolyRepr) -> Result<Self, FitError> {
        Poly::new(DegreeBounds(r.degrees), r.coeffs)
    }
}

impl From<Poly> for PolyRepr {
    fn from(p: Poly) -> Self {
        PolyRepr {
            degrees: p.degrees.0,
            coeffs: p.coeffs,
        }
    }
}

impl Poly {
    /// A polynomial from its dense coefficients; their number must be `∏(d_i + 1)` and every
    /// one finite.
    pub fn new(degrees: DegreeBounds, coeffs: Vec<f64>) -> Result<Self, FitError> {
        let expected = degrees
            .monomial_count()
            .ok_or_else(|| FitError::Options("degree bounds overflow".into()))?;
        if coeffs.len() != expected {
            return Err(FitError::Dimension {
                what: format!("coefficients of a polynomial with degrees {:?}", degrees.0),
                expected,
                found: coeffs.len(),
            });
        }
        if let Some(c) = coeffs.iter().find(|c| !c.is_finite()) {
            return Err(FitError::NotFinite(format!("polynomial coefficient {c}")));
        }
        Ok(Poly { degrees, coeffs })
    }

    pub fn constant(nvars: usize, value: f64) -> Self {
        Poly {
            degrees: DegreeBounds::zeros(nvars),
            coeffs: vec![value],
        }
    }

    pub fn degrees(&self) -> &DegreeBounds {
        &self.degrees
    }

    pub fn coeffs(&self) -> &[f64] {
        &self.coeffs
    }

    pub fn nvars(&self) -> usize {
        self.degrees.nvars()
    }

    /// Coefficient of a monomial (zero when it is outside the monomial set).
    pub fn coeff(&self, m: &Monomial) -> f64 {
        if self.degrees.contains(m) {
            self.coeffs[dense_index(&m.0, &self.degrees.0)]
        } else {
            0.0
        }
    }

    /// `(monomial, coefficient)` pairs, zero coefficients included.
    pub fn terms(&self) -> impl Iterator<Item = (Monomial, f64)> + '_ {
        self.degrees.monomials().zip(self.coeffs.iter().copied())
    }

    /// Whether every degree is zero (the polynomial is its constant term).
    pub fn is_constant(&self) -> bool {
        self.degrees.0.iter().all(|&d| d == 0)
    }

    /// The constant term `p(0)`.
    pub fn constant_term(&self) -> f64 {
        self.coeffs[0]
    }

    /// `p(t)` in the scaled variables, in Horner form (outermost in variable 0, each
    /// coefficient a polynomial in the following variables; zero coefficients skipped).
    pub fn eval_scaled(&self, t: &[f64]) -> f64 {
        let mut alg = F64Horner { t };
        horner_fold(&self.coeffs, &self.degrees.0, 0, &mut alg).unwrap_or(0.0)
    }

    /// The same polynomial with every degree bound lowered to the highest exponent that has a
    /// non-zero coefficient.
    pub(crate) fn trimmed(&self) -> Poly {
        let n = self.nvars();
        let mut used = vec![0u32; n];
        for (m, c) in self.terms() {
            if c != 0.0 {
                for (u, a) in used.iter_mut().zip(&m.0) {
                    *u = (*u).max(*a);
                }
            }
        }
        let degrees = DegreeBounds(used);
        let coeffs = degrees.monomials().map(|m| self.coeff(&m)).collect();
        Poly { degrees, coeffs }
    }
}

/// The operations a Horner evaluation needs, so that the `f64` evaluation and the C emission
/// walk the same expression tree and so round identically.
pub(crate) trait HornerAlgebra {
    type Expr;
    fn constant(&mut self, c: f64) -> Self::Expr;
    /// `t_var · a`
    fn mul_var(&mut self, var: usize, a: Self::Expr) -> Self::Expr;
    /// `c + xa`
    fn add(&mut self, c: Self::Expr, xa: Self::Expr) -> Self::Expr;
}

/// Horner evaluation of the dense tensor `coeffs` (degrees `degs[var..]`), outermost in
/// variable `var`: `c_0 + t·(c_1 + t·(… + t·c_d))`, each `c_j` a polynomial in the following
/// variables evaluated the same way. Zero coefficients are skipped (a skipped `c_j` leaves
/// `t·(…)`); `None` means the polynomial is identically zero.
pub(crate) fn horner_fold<A: HornerAlgebra>(
    coeffs: &[f64],
    degs: &[u32],
    var: usize,
    alg: &mut A,
) -> Option<A::Expr> {
    let Some(&d) = degs.get(var) else {
        let c = coeffs[0];
        return (c != 0.0).then(|| alg.constant(c));
    };
    let stride = coeffs.len() / (d as usize + 1);
    let mut acc: Option<A::Expr> = None;
    for j in (0..=d as usize).rev() {
        let c = horner_fold(&coeffs[j * stride..(j + 1) * stride], degs, var + 1, alg);
        acc = horner_step(acc, c, var, alg);
    }
    acc
}

/// One Horner step `acc ← c + t_var · acc`, with the zero-skipping rules of [`horner_fold`].
pub(crate) fn horner_step<A: HornerAlgebra>(
    acc: Option<A::Expr>,
    c: Option<A::Expr>,
    var: usize,
    alg: &mut A,
) -> Option<A::Expr> {
    match (acc, c) {
        (None, c) => c,
        (Some(a), None) => Some(alg.mul_var(var, a)),
        (Some(a), Some(c)) => {
            let xa = alg.mul_var(var, a);
            Some(alg.add(c, xa))
        }
    }
}

struct F64Horner<'a> {
    t: &'a [f64],
}

impl HornerAlgebra for F64Horner<'_> {
    type Expr = f64;
    fn constant(&mut self, c: f64) -> f64 {
        c
    }
    fn mul_var(&mut self, var: usize, a: f64) -> f64 {
        self.t[var] * a
    }
    fn add(&mut self, c: f64, xa: f64) -> f64 {
        c + xa
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_layout_round_trips() {
        let degs = [2, 0, 3];
        for i in 0..12 {
            let a = multi_index(i, &degs);
            assert_eq!(dense_index(&a, &degs), i);
        }
        assert_eq!(multi_index(5, &degs), vec![1, 0, 1]);
    }

    #[test]
    fn horner_matches_naive_sum() {
        // p = 1 + 2 t0 + 3 t1 + 4 t0 t1 + 5 t0^2 t1
        let degs = DegreeBounds(vec![2, 1]);
        let mut coeffs = vec![0.0; 6];
        for (alpha, c) in [
            ([0, 0], 1.0),
            ([1, 0], 2.0),
            ([0, 1], 3.0),
            ([1, 1], 4.0),
            ([2, 1], 5.0),
        ] {
            coeffs[dense_index(&alpha, &degs.0)] = c;
        }
        let p = Poly::new(degs, coeffs).unwrap();
        let (t0, t1) = (0.3_f64, -1.7_f64);
        let naive = 1.0 + 2.0 * t0 + 3.0 * t1 + 4.0 * t0 * t1 + 5.0 * t0 * t0 * t1;
        assert!((p.eval_scaled(&[t0, t1]) - naive).abs() < 1e-14);
        assert_eq!(p.coeff(&Monomial(vec![2, 1])), 5.0);
        assert_eq!(p.coeff(&Monomial(vec![3, 0])), 0.0);
    }

    #[test]
    fn trimmed_drops_unused_degrees() {
        let degs = DegreeBounds(vec![2, 2]);
        let mut coeffs = vec![0.0; 9];
        coeffs[dense_index(&[1, 0], &degs.0)] = 2.0;
        coeffs[0] = 1.0;
        let p = Poly::new(degs, coeffs).unwrap().trimmed();
        assert_eq!(p.degrees().0, vec![1, 0]);
        assert_eq!(p.coeffs(), &[1.0, 2.0]);
    }

    #[test]
    fn rejects_bad_coefficients() {
        assert!(Poly::new(DegreeBounds(vec![1]), vec![1.0]).is_err());
        assert!(Poly::new(DegreeBounds(vec![1]), vec![1.0, f64::NAN]).is_err());
    }
}
