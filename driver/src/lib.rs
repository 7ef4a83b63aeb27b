//! # klaraptor (the driver)
