//! C99 emission of a fitted function: the scaling written out, both polynomials in Horner
//! form over exactly the expression tree [`RationalFn::eval`] evaluates, and a comment with the
//! fit's diagnostics.

use std::fmt::Write as _;

use crate::poly::{horner_fold, horner_step, HornerAlgebra, Poly};
use crate::rational::RationalFn;
use crate::vars::VarKind;
use crate::FitError;

const C_KEYWORDS: &[&str] = &[
    "auto",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "_Bool",
    "_Complex",
    "_Imaginary",
];

fn check_identifier(name: &str) -> Result<(), FitError> {
    let mut chars = name.chars();
    let ok = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !C_KEYWORDS.contains(&name);
    if ok {
        Ok(())
    } else {
        Err(FitError::BadIdentifier(name.to_string()))
    }
}

/// A C double literal that parses back to exactly `x` (shortest round-trip digits).
fn literal(x: f64) -> String {
    let s = format!("{x:?}");
    if s.contains(['.', 'e', 'E']) {
        s
    } else {
        format!("{s}.0")
    }
}

/// How an expression binds, to parenthesise exactly where C's grouping would differ from the
/// Horner tree.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    /// A non-negative literal or a name.
    Atom,
    /// A negative literal.
    Negative,
    /// `t*…`
    Product,
    /// `c + t*…`
    Sum,
}

#[derive(Clone)]
struct CExpr {
    text: String,
    form: Form,
}

struct CHorner<'a> {
    tnames: &'a [String],
}

impl HornerAlgebra for CHorner<'_> {
    type Expr = CExpr;

    fn constant(&mut self, c: f64) -> CExpr {
        CExpr {
            text: literal(c),
            form: if c.is_sign_negative() {
                Form::Negative
            } else {
                Form::Atom
            },
        }
    }

    fn mul_var(&mut self, var: usize, a: CExpr) -> CExpr {
        // `t*(…)` keeps the tree's grouping: C's `*` associates left, so `t*u*(…)` would not.
        let text = match a.form {
            Form::Atom => format!("{}*{}", self.tnames[var], a.text),
            _ => format!("{}*({})", self.tnames[var], a.text),
        };
        CExpr {
            text,
            form: Form::Product,
        }
    }

    fn add(&mut self, c: CExpr, xa: CExpr) -> CExpr {
        let c_text = match c.form {
            Form::Sum => format!("({})", c.text),
            _ => c.text,
        };
        CExpr {
            text: format!("{c_text} + {}", xa.text),
            form: Form::Sum,
        }
    }
}

/// Statements computing `name = poly(t)`: one local per outermost Horner coefficient that is
/// not a literal, then the outermost Horner combination.
fn emit_poly(out: &mut String, poly: &Poly, name: &str, local: &str, tnames: &[String]) {
    let degs = &poly.degrees().0;
    let coeffs = poly.coeffs();
    let mut alg = CHorner { tnames };
    let d0 = degs[0] as usize;
    let stride = coeffs.len() / (d0 + 1);
    let mut parts: Vec<Option<CExpr>> = Vec::with_capacity(d0 + 1);
    for j in 0..=d0 {
        let c = horner_fold(&coeffs[j * stride..(j + 1) * stride], degs, 1, &mut alg);
        parts.push(c.map(|e| {
            if e.form == Form::Atom || e.form == Form::Negative || d0 == 0 {
                e
            } else {
                let lname = format!("{local}{j}");
                let _ = writeln!(
                    out,
                    "    const double {lname} = {}; /* coefficient of {}^{j} */",
                    e.text, tnames[0]
                );
                CExpr {
                    text: lname,
                    form: Form::Atom,
                }
            }
        }));
    }
    let mut acc: Option<CExpr> = None;
    for part in parts.into_iter().rev() {
        acc = horner_step(acc, part, 0, &mut alg);
    }
    let text = acc.map_or_else(|| "0.0".to_string(), |e| e.text);
    let _ = writeln!(out, "    const double {name} = {text};");
}

fn sci(x: f64) -> String {
    format!("{x:.3e}")
}

impl RationalFn {
    /// The function as a C99 `static double fn_name(double x0, …)`, parameters named after the
    /// variables. The scaling is written out (`t = (x − center)·scale`), both polynomials are in
    /// Horner form with the same grouping as [`RationalFn::eval`], and every constant has the
    /// shortest decimal form that reads back to the same double: compiled without fused
    /// multiply-add contraction the C returns bit-for-bit what `eval` returns.
    pub fn to_c(&self, fn_name: &str) -> Result<String, FitError> {
        check_identifier(fn_name)?;
        self.check_consistent()?;
        let n = self.vars.len();
        let tnames: Vec<String> = self.vars.iter().map(|v| format!("t_{}", v.name)).collect();
        let mut reserved: Vec<String> = vec!["num".into(), "den".into(), fn_name.into()];
        reserved.extend(tnames.iter().cloned());
        for v in &self.vars {
            check_identifier(&v.name)?;
            let is_local = |prefix: char| {
                v.name.len() > 1
                    && v.name.starts_with(prefix)
                    && v.name[1..].chars().all(|c| c.is_ascii_digit())
            };
            if reserved.contains(&v.name) || is_local('p') || is_local('q') {
                return Err(FitError::BadIdentifier(v.name.clone()));
            }
            if self.vars.iter().filter(|w| w.name == v.name).count() > 1 {
                return Err(FitError::BadIdentifier(v.name.clone()));
            }
        }
        let used: Vec<bool> = (0..n)
            .map(|i| self.num.degrees().0[i] > 0 || self.den.degrees().0[i] > 0)
            .collect();

        let mut out = String::new();
        self.write_comment(&mut out, fn_name);
        let params: Vec<String> = self
            .vars
            .iter()
            .map(|v| format!("double {}", v.name))
            .collect();
        let _ = writeln!(out, "static double {fn_name}({})\n{{", params.join(", "));
        for (i, v) in self.vars.iter().enumerate() {
            if used[i] {
                let s = &self.scalings[i];
                let _ = writeln!(
                    out,
                    "    const double {} = ({} - {}) * {};",
                    tnames[i],
                    v.name,
                    literal(s.center),
                    literal(s.scale)
                );
            } else {
                let _ = writeln!(
                    out,
                    "    (void){}; /* the fit does not depend on it */",
                    v.name
                );
            }
        }
        emit_poly(&mut out, &self.num, "num", "p", &tnames);
        if self.is_polynomial() {
            out.push_str("    return num;\n}\n");
        } else {
            emit_poly(&mut out, &self.den, "den", "q", &tnames);
            out.push_str("    return num / den;\n}\n");
        }
        Ok(out)
    }

    fn write_comment(&self, out: &mut String, fn_name: &str) {
        let d = &self.diagnostics;
        let kind = if self.is_constant() {
            "constant"
        } else if self.is_polynomial() {
            "polynomial"
        } else {
            "rational function"
        };
        let _ = writeln!(
            out,
            "/*\n * {fn_name}: {kind} fitted by klaraptor-fitting (SVD least squares)."
        );
        let _ = writeln!(
            out,
            " *   f = num(t) / den(t), t = (x - center) * scale maps the fitted range onto [-1, 1]"
        );
        let _ = writeln!(
            out,
            " *   variable   kind   fitted range                num deg  den deg"
        );
        for (i, v) in self.vars.iter().enumerate() {
            let s = &self.scalings[i];
            let kind = match v.kind {
                VarKind::Data => "data",
                VarKind::Block => "block",
            };
            let range = format!("[{}, {}]", s.lo, s.hi);
            let _ = writeln!(
                out,
                " *   {:<10} {:<6} {:<27} {:<8} {}",
                v.name,
                kind,
                range,
                self.num.degrees().0[i],
                self.den.degrees().0[i]
            );
        }
        let _ = writeln!(
            out,
            " *   {} points ({} distinct{}), {} unknowns, rank {}, condition number {}",
            d.points,
            d.distinct_points,
            if d.dropped_non_finite > 0 {
                format!(", {} non-finite dropped", d.dropped_non_finite)
            } else {
                String::new()
            },
            d.unknowns,
            d.rank,
            sci(d.condition_number)
        );
        match &d.heldout {
            Some(h) => {
                let _ = writeln!(
                    out,
                    " *   held-out relative error: median {}, max {} over {} points",
                    sci(h.median_rel_error),
                    sci(h.max_rel_error),
                    h.points
                );
                if let (Some(m), Some(x)) = (
                    h.extrapolation_median_rel_error,
                    h.extrapolation_max_rel_error,
                ) {
                    let _ = writeln!(
                        out,
                        " *     at the largest data sizes ({} points): median {}, max {}",
                        h.extrapolation_points,
                        sci(m),
                        sci(x)
                    );
                }
            }
            None => {
                let _ = writeln!(
                    out,
                    " *   no held-out validation (degrees given, or too few points)"
                );
            }
        }
        let _ = writeln!(
            out,
            " *   relative error on the fitting points: median {}, max {}",
            sci(d.fit_median_rel_error),
            sci(d.fit_max_rel_error)
        );
        if let Some(s) = &d.search {
            let _ = writeln!(
                out,
                " *   degree search: {} candidates screened by {}, {} refitted by SVD{}",
                s.candidates,
                s.screening,
                s.refit,
                d.noise_estimate
                    .map_or(String::new(), |x| format!(", noise estimate {}", sci(x)))
            );
        }
        if !d.refit_on_all_points {
            let _ = writeln!(out, " *   coefficients from the fit without the held-out points (the refit failed the domain check)");
        }
        out.push_str(" */\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_round_trip() {
        for x in [1.0, -0.1, 1e-300, 123456.789, 2.0_f64.sqrt(), -1e22] {
            let s = literal(x);
            assert_eq!(s.parse::<f64>().unwrap(), x);
            assert!(s.contains(['.', 'e']));
        }
    }

    #[test]
    fn identifiers() {
        assert!(check_identifier("bx").is_ok());
        assert!(check_identifier("_n2").is_ok());
        assert!(check_identifier("2n").is_err());
        assert!(check_identifier("double").is_err());
        assert!(check_identifier("a-b").is_err());
    }
}
