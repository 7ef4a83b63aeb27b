//! Rational functions of data sizes and launch parameters, fitted to measurements so that they
//! extrapolate.
//!
//! klaraptor profiles each kernel at small data sizes and needs its low-level metrics
//! (instructions per warp, transactions per memory instruction, latencies, …) at large ones,
//! for every block shape. This crate turns the measurements into a [`RationalFn`]
//! `p(x)/q(x)`, chooses its degrees by how well it predicts held-back points — above all the
//! largest data sizes — and emits it as readable C for the generated rational program.
//!
//! It is **not** the performance model (MWP-CWP lives in the code generator), it does not know
//! about kernels, devices or profiles, and it depends on nothing else in the workspace: a
//! [`FitProblem`] is variables, points, values and an evaluation [`Domain`].
//!
//! ```
//! use klaraptor_fitting::{fit, Domain, FitOptions, FitProblem, Variable};
//!
//! let mut points = Vec::new();
//! for n in [32.0, 64.0, 96.0, 128.0, 192.0, 256.0, 384.0, 512.0] {
//!     for bx in [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0] {
//!         points.push(vec![n, bx]);
//!     }
//! }
//! let values = points.iter().map(|p| (p[0] * p[0] + 3.0 * p[0]) / p[1]).collect();
//! let problem = FitProblem {
//!     vars: vec![Variable::data("N"), Variable::block("bx")],
//!     points,
//!     values,
//!     domain: Domain::Grid {
//!         shapes: (0..11).map(|e| vec![f64::from(1u32 << e)]).collect(),
//!         data: vec![[1.0, 65536.0]],
//!     },
//! };
//! let f = fit(&problem, &FitOptions::uniform(2, 3, 3)).unwrap();
//! assert_eq!(f.diagnostics.num_degrees, vec![2, 0]);
//! assert_eq!(f.diagnostics.den_degrees, vec![0, 1]);
//! let x = [8192.0, 32.0];
//! assert!((f.eval(&x) / ((8192.0f64 * 8192.0 + 3.0 * 8192.0) / 32.0) - 1.0).abs() < 1e-9);
//! let c = f.to_c("insts_per_warp").unwrap();
//! assert!(c.starts_with("/*"));
//! ```
//!
//! # The function
//!
//! Each variable is scaled affinely onto `[−1, 1]` over the range the points cover
//! ([`Scaling`]: `t = (x − center)·scale`). Numerator and denominator are polynomials in `t`
//! with a **degree bound per variable** and the tensor-product monomial set `{t^α : α_i ≤ d_i}`
//! ([`DegreeBounds`], [`Poly`]): that is what "degree bound per variable" means in the
//! KLARAPTOR paper, and it holds the mixed terms block products such as `bx·by` need.
//! Coefficients are stored in the monomial basis of `t`, evaluated in Horner form
//! ([`RationalFn::eval`]), serialised with serde, and emitted as C ([`RationalFn::to_c`]).
//! A polynomial is the case `q = 1` ([`RationalFn::is_polynomial`]), a constant the case where
//! the numerator has degree 0 too.
//!
//! # Least squares
//!
//! For one candidate `(d_num, d_den)` the linearised system `p(x_k) − v_k·q(x_k) = 0` is solved
//! in least squares, in the **Chebyshev** tensor basis of `t` (same span as the monomials, far
//! better conditioned on `[−1, 1]`; converted to monomials afterwards):
//!
//! - **Normalisation of q:** its Chebyshev constant coefficient is 1. That coefficient is the
//!   Chebyshev-weighted mean of `q` over the scaled box, positive for any `q` positive on the
//!   box, so the normalisation excludes no admissible denominator (fixing `q(0) = 1` in raw
//!   variables would exclude `q = bx`). After the fit both polynomials are divided by `q(0)` in
//!   scaled variables, so the emitted denominator reads `1 + …`.
//! - **Relative-error weights:** row `k` is weighted by `1/(max(|v_k|, floor)·q_prev(x_k))`.
//!   As `p − v·q = q·(p/q − v)`, this makes the residual the relative error of `p/q`; the first
//!   solve takes `q_prev = 1`, then [`FitOptions::sk_iterations`] Sanathanan–Koerner steps
//!   reuse the previous `q`. The floor (default `1e-9·max|v|`) keeps zeros finite.
//! - **Column normalisation** to unit 2-norm, then the **truncated SVD**: singular values below
//!   `rcond·σ_max` ([`FitOptions::rcond`], default 1e-12) are dropped and the minimum-norm
//!   solution is taken. The diagnostics report the rank and `σ_max/σ_min` of the kept ones.
//!
//! ## Solver: nalgebra's SVD, checked — not LAPACK
//!
//! Both were run on the same systems (`solver-compare/`, a separate workspace that links
//! Debian's `liblapack-dev`; run it with `cargo run --release` there). On this machine
//! (2-core AMD EPYC, reference LAPACK/BLAS 3.11 from Debian 12):
//!
//! | systems | nalgebra (checked) | LAPACK `dgelsd` |
//! | --- | --- | --- |
//! | 600×256 monomial design, degree 3 in 4 variables, κ ≈ 2·10¹⁰, rows weighted over 6 decades, 20 consistent systems: worst residual / solution error | 3.7e-15 / 6.6e-8 | 1.9e-14 / 2.5e-7 |
//! | the same in the Chebyshev basis (κ ≈ 9·10⁴) | 6.4e-15 / 1.3e-12 | 5.5e-15 / 3.2e-12 |
//! | 1000 whole fits of random exact rational functions: not recovered to 1e-8 | 0 | 0 |
//! | time per solve, 240×8 / ×32 / ×64 / ×128 | 12 / 153 / 946 / 4820 µs | 24 / 263 / 1800 / 4900 µs |
//!
//! (`solver-compare/RESULTS.md` has the full output.) Accuracy ties; nalgebra was 1.0–2.6×
//! faster on these sizes over two runs; and it needs no system package,
//! so nalgebra is kept. But **not as it comes**: nalgebra 0.33's SVD sometimes stops its
//! bidiagonal QR iteration early and returns, without error, a decomposition that reconstructs
//! the matrix only to between 1e-12 and 1e-4 (captured 88×5 systems in
//! `solver-compare/fixtures`: with its default tolerance 5ε one of them gives a residual of
//! 1.1e-7 where `dgelsd` gives 2.5e-15; with ε the other fails). [`NalgebraSvd`] therefore
//! checks `‖UΣVᵀ − M‖ ≤ 1e-12‖M‖` on every decomposition and retries with the other
//! tolerance, then on the unfactored matrix: in the 1000-fit run the check rejected 192
//! decompositions in 25 715 solves, and a retry passed every time. With the check both solvers
//! agree on every fixture; LAPACK never needed one. (The selection is robust enough that the
//! unchecked SVD also recovered all 1000 functions, but a bad SVD in the final refit gave a
//! 3e-3 error in an earlier version, which is how this was found.) Any other solver can be
//! plugged in through [`LstsqSolver`] ([`fit_with_solver`]).
//!
//! # Degree selection
//!
//! ## What is enumerated
//!
//! Every numerator tuple `d_num ≤ FitOptions::num_bounds` paired with every denominator tuple
//! `d_den ≤ FitOptions::den_bounds` whose total degree `Σ d_den,i` is at most
//! [`FitOptions::den_max_total_degree`] (default 3, which covers `bx·by·bz`). With bounds 3 in
//! 4 variables that is 256 × 35 = 8960 tuples; with the cap raised to 12 it is all
//! 256 × 256 = 65536. Before screening, a tuple is dropped when the training points cannot
//! determine it: a variable with `k` distinct training values allows `d_num + d_den ≤ k − 1`
//! (the univariate rational-interpolation count), and a candidate may not have more unknowns
//! than `distinct training points / min_points_per_unknown` (default 1.5). Everything else is
//! scored — no greedy path, no nesting heuristic — and [`SearchStats`] reports the counts.
//!
//! ## How it is scored
//!
//! Points are split once: the **largest data sizes** (the sum of the scaled [`VarKind::Data`]
//! coordinates; about 20 % of the points, at most a third of the distinct sizes) and a seeded
//! random 15 % of the remaining distinct points are held back; duplicates of a point stay
//! together. A candidate's score is `0.75·mean(E) + 0.25·mean(I)`, the mean relative errors
//! (each capped at 1) on the extrapolation and interior hold-outs. Training error plays no part.
//!
//! Thousands of candidates cannot each get an SVD in 200 ms, so a **screening pass** solves
//! them by normal equations with shared factorisations: the Gram matrix of all columns is
//! formed once, one Cholesky factor per numerator tuple serves all its denominators (the
//! factor of `G_{P∪J}` is that of `G_PP` bordered by rows that do not depend on the other
//! denominator columns), so a denominator costs a Schur-complement solve of a few columns.
//! Then the best-screened candidates are refitted properly (SVD with reweighting), and, on
//! noisy data, everything is screened a second time with the rows divided by the best refit's
//! denominator (one global Sanathanan–Koerner step: the plain linearisation weights rows by
//! `q`, which varies by orders of magnitude over block shapes and blurs the ranking). On
//! near-exact data (best screening score < 1e-3: deterministic counters), where the normal
//! equations' `κ²·ε` can exceed the differences that matter, the pass is rerun with iterative
//! refinement against the design matrix, candidates whose refinement does not converge or whose
//! factorisation is refused (κ beyond ~10⁶) are marked, and the 32 simplest of those are fitted
//! by SVD instead. [`Screening::Svd`] fits every candidate by SVD instead of screening (85–95×
//! slower); the tests check both choose the same degrees on the two-variable families.
//!
//! ## What wins
//!
//! Among candidates within noise of the best refitted score `s` — score at most
//! `s + max(0.1·s, 0.25·σ, 1e-10)`, `σ` the noise level ([`FitOptions::noise`], or `1.4826 ×`
//! the median held-out error of the best) — the **simplest** wins: fewest coefficients, then
//! lowest total degree. A candidate is refitted (SVD, reweighting) before it can win, must have
//! full rank, and is **rejected if its denominator vanishes or changes sign** at a fitting
//! point or anywhere on the caller's [`Domain`]. On the continuous part of a
//! [`Domain::Grid`] (data sizes up to a bound, for each listed block shape) that is a proof,
//! not a sample: the denominator is written in the Bernstein basis of the data box, whose
//! coefficients bound it from below, and the box is subdivided until the bound is positive or a
//! vertex value is not. The winner is finally refitted on all points (including the held-out
//! largest sizes) and checked again; should that refit fail the check, the fit without the
//! held-out points is returned and [`Diagnostics::refit_on_all_points`] says so.
//!
//! # Diagnostics and C
//!
//! [`Diagnostics`] carries the chosen degrees, the held-out median and maximum relative error
//! (overall and at the largest sizes), the condition number and rank of the final system, the
//! point counts, the noise level and the search counts. [`RationalFn::to_c`] writes a C99
//! `static double name(double N, double bx, …)`: the scaling written out, each polynomial in
//! Horner form (outermost in the first variable, one named local per outer coefficient), every
//! constant in the shortest decimal form that reads back to the same double, and a comment
//! with the diagnostics. It compiles without warnings under `-Wall -Wextra -std=c99`, and on
//! x86-64 it returns bit-for-bit what [`RationalFn::eval`] returns (the test checks 100 000
//! points).
//!
//! # Cost
//!
//! `cargo bench -p klaraptor-fitting` (300 points with ±2 % noise, 4 variables, bounds 3
//! everywhere; results in `benches/RESULTS.md`): 55–80 ms wall (≈ 60 ms of CPU) for the 8960
//! tuples of the default cap (7208 screened, the rest pruned), 110–165 ms on the same points
//! without noise (near-exact path), about 1 s with every one of the 65 536 tuples (35 042
//! screened), and about 5 s with an SVD of every candidate.
//!
//! # Limits
//!
//! - Denominators above the total-degree cap are not searched by default (cost; see above).
//! - The SVD fallback on near-exact data covers the 32 simplest refused candidates only.
//! - Extrapolation is only as good as the family: a metric that is piecewise in the data
//!   size (a cache that stops fitting) cannot be extrapolated by one rational function, and the
//!   held-out errors at the largest sizes are the warning.

mod basis;
mod domain;
mod emit;
mod error;
pub mod linalg;
mod poly;
mod problem;
mod rational;
mod screen;
mod select;
mod solve;
mod vars;

pub use domain::Domain;
pub use error::FitError;
pub use linalg::{LstsqSolution, LstsqSolver, NalgebraSvd};
pub use poly::{DegreeBounds, Monomial, Poly};
pub use problem::{FitOptions, FitProblem, Screening};
pub use rational::{Diagnostics, HeldOut, RationalFn, SearchStats};
pub use select::{fit, fit_degrees, fit_degrees_with_solver, fit_with_solver, MAX_MONOMIALS};
pub use vars::{Scaling, VarKind, Variable};
