fn main() {
    // Debian's liblapack.so (reference LAPACK over the reference BLAS, or whatever
    // `update-alternatives` selects).
    println!("cargo:rustc-link-lib=lapack");
    println!("cargo:rustc-link-lib=blas");
}
