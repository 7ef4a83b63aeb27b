//! Compiles the C model (`c/kl_model.c`, through `c/ffi.c`) into the crate: the Rust API
//! calls it, so the model is written once.

fn main() {
    println!("cargo:rerun-if-changed=c/kl_model.c");
    println!("cargo:rerun-if-changed=c/ffi.c");
    cc::Build::new()
        .file("c/ffi.c")
        .flag_if_supported("-std=c99")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("klaraptor_model_c");
}
