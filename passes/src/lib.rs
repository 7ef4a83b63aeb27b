//! # klaraptor-passes
