//! Rational-function least squares for klaraptor (being written; see issue 3).
