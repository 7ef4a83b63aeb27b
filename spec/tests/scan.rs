//! The pragma scanner and the `klaraptor.toml` reader: valid annotations and the exact
//! messages for invalid ones (no compiler involved).

use std::path::Path;

use klaraptor_spec::annotations::{scan, strip, ArgRef, Style};
use klaraptor_spec::config;

fn first_error(src: &str) -> String {
    let d = scan(Path::new("a.cu"), src).expect_err("should be rejected");
    let d = &d.0[0];
    format!(
        "{}: {}{}",
        d.loc,
        d.message,
        d.help
            .as_ref()
            .map(|h| format!(" | {h}"))
            .unwrap_or_default()
    )
}

#[test]
fn classic_pragmas_merge_per_kernel() {
    let src = "#pragma kernel_info_size_param_idx_k = 2;\n  #  pragma   kernel_info_dim_k = 3\n";
    let s = scan(Path::new("a.cu"), src).unwrap();
    assert_eq!(s.annotations.len(), 1);
    let a = &s.annotations[0];
    assert_eq!(
        (a.kernel.as_str(), a.dim, a.style),
        ("k", 3, Style::Classic)
    );
    assert_eq!(a.data[0].arg, ArgRef::Index(2));
    assert_eq!(
        a.grid.iter().map(|g| g.to_string()).collect::<Vec<_>>(),
        ["ceil(N, bx)", "ceil(N, by)", "ceil(N, bz)"]
    );
    assert_eq!(s.pragma_lines.len(), 2);
}

#[test]
fn continuation_lines_and_comments() {
    let src =
        "int x;\n#pragma klaraptor kernel(k) /* the kernel */ \\\n   data(n) // size\nint y;\n";
    let s = scan(Path::new("a.cu"), src).unwrap();
    assert_eq!(s.annotations[0].data[0].arg, ArgRef::Name("n".into()));
    assert_eq!(s.annotations[0].loc.to_string(), "a.cu:2:19");
    let stripped = strip(src, &s.pragma_lines);
    assert_eq!(
        stripped, "int x;\n\n\nint y;\n",
        "pragma lines blank, line count kept"
    );
}

#[test]
fn pragmas_in_comments_and_foreign_pragmas_are_ignored() {
    let src = "/*\n#pragma klaraptor kernel(k)\n*/\n#pragma once\n#pragma omp parallel for\n// #pragma kernel_info_dim_k = 9;\n";
    let s = scan(Path::new("a.cu"), src).unwrap();
    assert!(s.annotations.is_empty() && s.pragma_lines.is_empty());
}

#[test]
fn exact_messages_for_bad_pragmas() {
    let cases = [
        ("#pragma kernel_info_size_param_idx_k 3;", "a.cu:1:38: expected '=' after the kernel name | write e.g. '#pragma kernel_info_size_param_idx_mm = 3;'"),
        ("#pragma kernel_info_size_param_idx_k = -1;", "a.cu:1:40: expected a non-negative integer | write e.g. '#pragma kernel_info_size_param_idx_mm = 3;'"),
        ("#pragma kernel_info_dim_k = 4;\n#pragma kernel_info_size_param_idx_k = 0;", "a.cu:1:29: a kernel's dimensionality is 1, 2 or 3, not 4"),
        ("#pragma kernel_info_dim_k = 2;", "a.cu:1:9: kernel 'k' has a dimensionality but no data-size argument | add '#pragma kernel_info_size_param_idx_k = <argument index>;'"),
        ("#pragma klaraptor data(n)", "a.cu:1:9: this klaraptor pragma names no kernel | start it with kernel(<name>), e.g. '#pragma klaraptor kernel(mm) data(N=3) dim(2) grid(ceil(N, bx), ceil(N, by))'"),
        ("#pragma klaraptor kernel(k) grid(ceil(N, bx))", "a.cu:1:39: unknown name 'N'; the names are bx, by, bz, NX"),
        ("#pragma klaraptor kernel(k) data(n) dims(2)", "a.cu:1:37: unknown clause 'dims' | the clauses are kernel, data, dim, grid, block, shmem, profile"),
        ("#pragma klaraptor kernel(k) data(n) dim(4)", "a.cu:1:41: expected 1, 2 or 3, found '4' | dim(…) is the number of block dimensions the kernel uses"),
        ("#pragma klaraptor kernel(k) data(n) dim(2) grid(n)", "a.cu:1:44: grid(…) gives 1 formula(s) but the kernel has 2 block dimension(s) | give one formula per grid axis, separated by commas: at least 2 (one per block dimension, or change dim(2)) and at most 3"),
        ("#pragma klaraptor kernel(k) data(n) grid(n, n, n, n)", "a.cu:1:37: grid(…) gives 4 formula(s) but the kernel has 1 block dimension(s) | give one formula per grid axis, separated by commas: at least 1 (one per block dimension, or change dim(1)) and at most 3"),
        ("#pragma klaraptor kernel(k) data(n, b) dim(2) grid(ceil(n, bx), ceil(n, by), ceil(b, bz))", "a.cu:1:52: grid formula 3 uses 'bz', but the kernel has 2 dimension(s) | use only bx, by and the data parameters"),
        ("#pragma klaraptor kernel(k) data(n) grid(ceil(n, by))", "a.cu:1:42: grid formula 1 uses 'by', but the kernel has 1 dimension(s) | use only bx and the data parameters"),
        ("#pragma klaraptor kernel(k) data(n) block(bx * 2)", "a.cu:1:43: expected a condition here (a comparison such as 'bx * by <= 512'), but this is an integer"),
        ("#pragma klaraptor kernel(k) data(bx=1)", "a.cu:1:34: 'bx' is reserved (block dimensions and functions); choose another label | write LABEL=INDEX (0-based argument position), LABEL=ARGUMENT, or ARGUMENT, e.g. data(NI=3, NJ=4) or data(n)"),
        ("#pragma klaraptor kernel(k) data(pow2=1)", "a.cu:1:34: 'pow2' is reserved (block dimensions and functions); choose another label | write LABEL=INDEX (0-based argument position), LABEL=ARGUMENT, or ARGUMENT, e.g. data(NI=3, NJ=4) or data(n)"),
        ("#pragma klaraptor kernel(k) data(n) block(pow2(bx) + 1 > 2)", "a.cu:1:43: expected an integer here, but 'pow2(…)' is a truth value"),
        ("#pragma klaraptor kernel(k) data(n) block(bx < 1", "a.cu:1:42: the '(' of 'block' is never closed | add the missing ')' (a pragma that spans lines needs a '\\' at the end of each line but the last)"),
        ("#pragma klaraptor kernel(k) data(N=n) profile(run=\"./a {N}\", sizes=[1, (2, 3)])", "a.cu:1:72: this size gives 2 values but the kernel has 1 data parameter(s) | write e.g. profile(run=\"./app {N}\", sizes=[64, 128, 256]) — one value per size, or a tuple (NI, NJ) per size when there are several data parameters"),
        ("#pragma klaraptor kernel(k) data(N=n, M=m) profile(run=\"./a 100\", sizes=[1, 2])", "a.cu:1:44: profile(run=\"./a 100\") uses none of the data parameters ({N}, {M}) nor {SIZES}: every size would run the same command | write e.g. profile(run=\"./app {N}\", sizes=[64, 128, 256]) — one value per size, or a tuple (NI, NJ) per size when there are several data parameters"),
        ("#pragma klaraptor kernel(k) data(N=n, M=m) profile(run=\"./a --sizes {SIZES} --m {M}\", sizes=[1, 2])", "a.cu:1:56: profile(run=\"./a --sizes {SIZES} --m {M}\") uses {SIZES}, which runs the command once for all the profile sizes, together with {M}, which runs it once per size: use one or the other | write run=\"./app --sizes {SIZES}\" to run the program once with every size ({SIZES} becomes e.g. `64,64 128,128`: each size's values joined by commas in the order of data(…), the sizes separated by spaces), or run=\"./app {N} {M}\" to run it once per size"),
        ("#pragma klaraptor kernel(k) data(N=n, M=m) \\\n    profile(run=\"./a {N} {SIZES} {M}\", sizes=[1, 2])", "a.cu:2:17: profile(run=\"./a {N} {SIZES} {M}\") uses {SIZES}, which runs the command once for all the profile sizes, together with {N}, {M}, which run it once per size: use one or the other | write run=\"./app --sizes {SIZES}\" to run the program once with every size ({SIZES} becomes e.g. `64,64 128,128`: each size's values joined by commas in the order of data(…), the sizes separated by spaces), or run=\"./app {N} {M}\" to run it once per size"),
        ("#pragma klaraptor kernel(k) data(n) shmem(bx * Q)", "a.cu:1:48: unknown name 'Q'; the names are bx, by, bz, n | shmem(…) gives the bytes of dynamic shared memory a launch needs for a block shape, as a formula of bx, by, bz and the data parameters, e.g. shmem(bx * 4) for one float per thread of x"),
        ("#pragma klaraptor kernel(k) data(n) shmem(bx < 4)", "a.cu:1:43: expected an integer here, but a '<' expression is a truth value | shmem(…) gives the bytes of dynamic shared memory a launch needs for a block shape, as a formula of bx, by, bz and the data parameters, e.g. shmem(bx * 4) for one float per thread of x"),
        ("#pragma klaraptor kernel(k) data(n) shmem(bx * by * 4)", "a.cu:1:43: shmem(…) uses 'by', but the kernel has 1 block dimension(s) | shmem(…) gives the bytes of dynamic shared memory a launch needs for a block shape, as a formula of bx, by, bz and the data parameters, e.g. shmem(bx * 4) for one float per thread of x"),
        ("#pragma klaraptor kernel(k) data(n) shmem((bx - 64) * 4)", "a.cu:1:43: shmem(((bx - 64) * 4)) is -252 bytes at block 1x1x1: an amount of shared memory is never negative | shmem(…) gives the bytes of dynamic shared memory a launch needs for a block shape, as a formula of bx, by, bz and the data parameters, e.g. shmem(bx * 4) for one float per thread of x"),
        ("#pragma klaraptor kernel(k) data(n) shmem(bx * 4) shmem(bx * 8)", "a.cu:1:51: 'shmem' is given twice | give each clause once (only 'block' may repeat; its conditions must all hold)"),
        ("#pragma klaraptor kernel(k) data(n)\n#pragma klaraptor kernel(k) data(m)", "a.cu:2:19: kernel 'k' is annotated twice | the first annotation is at a.cu:1:19; keep one"),
    ];
    for (src, want) in cases {
        assert_eq!(first_error(src), want, "for {src}");
    }
}

/// The one-line form: without `data(…)`, the data are the threads the launch runs per block
/// axis (`NX`, `NY`, `NZ`, one per dimension), the grid is `ceil(NX, bx)` per axis, and the
/// blocks must divide those threads exactly (`NX % bx == 0`), unless the pragma gives its own
/// grid; a `block(…)` clause adds to that rule, and expressions may use the names.
#[test]
fn a_pragma_without_data_takes_the_threads_of_the_launch() {
    let labels = |a: &klaraptor_spec::annotations::KernelAnnotation| {
        a.data.iter().map(|d| d.label.clone()).collect::<Vec<_>>()
    };
    let strs = |v: &[klaraptor_spec::expr::BoolExpr]| {
        v.iter().map(ToString::to_string).collect::<Vec<_>>()
    };
    let one = |src: &str| scan(Path::new("a.cu"), src).unwrap().annotations.remove(0);
    let a = one("#pragma klaraptor kernel(k)
");
    assert_eq!(labels(&a), ["NX"]);
    assert_eq!(a.data[0].arg, ArgRef::Launch(0));
    assert_eq!(a.grid[0].to_string(), "ceil(NX, bx)");
    assert_eq!(strs(&a.constraints), ["((NX % bx) == 0)"]);
    assert!(a.profile.is_none());
    let a = one(
        "#pragma klaraptor kernel(k) dim(3) block(bx * by * bz <= 256)
",
    );
    assert_eq!(labels(&a), ["NX", "NY", "NZ"]);
    assert_eq!(a.data[2].arg, ArgRef::Launch(2));
    let grid: Vec<String> = a.grid.iter().map(ToString::to_string).collect();
    assert_eq!(grid, ["ceil(NX, bx)", "ceil(NY, by)", "ceil(NZ, bz)"]);
    assert_eq!(
        strs(&a.constraints),
        [
            "((NX % bx) == 0)",
            "((NY % by) == 0)",
            "((NZ % bz) == 0)",
            "(((bx * by) * bz) <= 256)"
        ]
    );
    // Its own grid formula: the kernel checks its bounds, any block will do.
    let a = one(
        "#pragma klaraptor kernel(k) dim(2) grid(ceil(NX, bx), ceil(NY, by))
",
    );
    assert!(a.constraints.is_empty());
    // With data(…), the names of the launch are not data.
    assert!(scan(
        Path::new("a.cu"),
        "#pragma klaraptor kernel(k) data(n) grid(ceil(NX, bx))
"
    )
    .is_err());
}

#[test]
fn the_shmem_clause_is_a_formula_of_the_block_and_the_data() {
    let src = "#pragma klaraptor kernel(k) data(N=n) dim(2) shmem((bx + 1) * by * 4 + N % 8)\n";
    let s = scan(Path::new("a.cu"), src).unwrap();
    let e = s.annotations[0].shmem.as_ref().expect("the clause");
    assert_eq!(e.to_string(), "((((bx + 1) * by) * 4) + (N % 8))");
    let env = [("bx", 32), ("by", 8), ("bz", 1), ("N", 13)];
    assert_eq!(e.eval(env.as_slice()), Ok(33 * 8 * 4 + 5));
    // Without the clause: none.
    let s = scan(Path::new("a.cu"), "#pragma klaraptor kernel(k) data(n)\n").unwrap();
    assert!(s.annotations[0].shmem.is_none());
}

/// `shmem(bx * 1000000)`: above the most any GPU gives a block (227 KiB, sm_90 opt-in) at
/// every block shape: refused at the clause, in a pragma and in `klaraptor.toml`, saying the
/// limit, why that one, and what to write. A formula above it at some shapes only, or one that
/// fits once `block(…)` rules the large shapes out, is accepted; one that fits at no shape
/// `block(…)` allows is refused.
#[test]
fn a_shmem_formula_above_every_gpus_limit_at_every_shape_is_refused() {
    let d = scan(
        Path::new("a.cu"),
        "int x;\n#pragma klaraptor kernel(k) data(n) shmem(bx * 1000000)\n",
    )
    .unwrap_err();
    let d = &d.0[0];
    assert_eq!(d.loc.to_string(), "a.cu:2:43");
    assert!(
        d.message.starts_with(
            "shmem((bx * 1000000)) is more shared memory than a block may have at every block \
             shape the annotation allows (at least 1000000 bytes, at block 1): the most any \
             supported GPU gives a block is 232448 bytes (227 KiB, sm_90 with opt-in; the \
             device is not known when annotations are checked)"
        ),
        "{}",
        d.message
    );
    let help = d.help.as_deref().unwrap();
    assert!(
        help.contains("ONE block") && help.contains("block(…)"),
        "{help}"
    );
    // Data sizes count: N * 1000000 is above the limit at every size tried.
    let e =
        first_error("#pragma klaraptor kernel(k) data(N=n) dim(2) shmem(N * 1000000 + bx * by)");
    assert!(
        e.contains("at least 1000001 bytes, at block 1x1, data 1"),
        "{e}"
    );
    // bx * 1000 fits at blocks up to 232 threads only: accepted, unless block(…) allows
    // larger blocks alone.
    assert!(scan(
        Path::new("a.cu"),
        "#pragma klaraptor kernel(k) data(n) shmem(bx * 1000)\n"
    )
    .is_ok());
    let e = first_error("#pragma klaraptor kernel(k) data(n) block(bx >= 256) shmem(bx * 1000)");
    assert!(e.contains("at least 256000 bytes, at block 256"), "{e}");
    assert!(scan(
        Path::new("a.cu"),
        "#pragma klaraptor kernel(k) data(n) shmem(n * 4 + 232000)\n"
    )
    .is_ok());
    // The same in klaraptor.toml, at the value.
    let e = config::parse(
        Path::new("klaraptor.toml"),
        "[kernel.k]\ndata = [\"N=0\"]\nshmem = \"bx * 1000000\"\n",
    )
    .unwrap_err();
    assert_eq!(e.0[0].loc.to_string(), "klaraptor.toml:3:9");
    assert!(
        e.0[0].message.contains("232448 bytes (227 KiB"),
        "{}",
        e.0[0].message
    );
}

#[test]
fn diagnostics_show_the_line_and_a_caret() {
    let d = scan(
        Path::new("a.cu"),
        "int x;\n#pragma klaraptor kernel(k) data(n) dim(7)\n",
    )
    .unwrap_err();
    assert_eq!(
        d.to_string(),
        "a.cu:2:41: error: expected 1, 2 or 3, found '7'\n    | #pragma klaraptor kernel(k) data(n) dim(7)\n    |                                         ^\n    = help: dim(…) is the number of block dimensions the kernel uses"
    );
}

#[test]
fn toml_entries_and_errors() {
    let ok = "[kernel.k]\nsource = \"k.cu\"\ndata = [\"N=0\", \"m\"]\ndim = 2\nprofile = { run = \"./k {N} {m}\", sizes = [8, [16, 4]] }\n";
    let ks = config::parse(Path::new("d/klaraptor.toml"), ok).unwrap();
    assert_eq!(ks[0].source.as_deref(), Some(Path::new("d/k.cu")));
    let a = &ks[0].annotation;
    assert_eq!((a.dim, a.data.len(), a.style), (2, 2, Style::Toml));
    assert_eq!(
        a.profile.as_ref().unwrap().sizes,
        vec![vec![8, 8], vec![16, 4]]
    );
    assert_eq!(
        a.grid.iter().map(|g| g.to_string()).collect::<Vec<_>>(),
        ["ceil(N, bx)", "ceil(m, by)"]
    );

    let with_shmem = "[kernel.k]\ndata = [\"N=0\"]\ndim = 2\nshmem = \"(bx + 1) * by * 4\"\n";
    let ks = config::parse(Path::new("d/klaraptor.toml"), with_shmem).unwrap();
    assert_eq!(
        ks[0].annotation.shmem.as_ref().map(|e| e.to_string()),
        Some("(((bx + 1) * by) * 4)".to_string())
    );

    let bad = [
        ("[kernel.k]\ndata = [\"N=0\"]\nshmem = \"bz * 4\"\n", "klaraptor.toml:3:9: shmem(…) uses 'bz', but the kernel has 1 block dimension(s)"),
        ("[kernel.k]\ndata = [\"N=0\"]\nshmem = \"bx * M\"\n", "klaraptor.toml:3:15: unknown name 'M'; the names are bx, by, bz, N"),
        ("[kernel.k]\ndata = [\"N=0\"]\ndimension = 2\n", "klaraptor.toml:3:1: unknown field `dimension`, expected one of `source`, `data`, `dim`, `grid`, `block`, `shmem`, `profile`"),
        ("[kernel.k]\ndata = [\"N=0\"]\ndim = 5\n", "klaraptor.toml:3:7: expected 1, 2 or 3, found 5"),
        ("[kernel.k]\ndata = [\"N=0\"]\nblock = [\"bx >= Q\"]\n", "klaraptor.toml:3:17: unknown name 'Q'; the names are bx, by, bz, N"),
        ("[kernel.k]\ndata = []\n", "klaraptor.toml:2:8: kernel 'k' has an empty data list"),
        ("[kernel.k]\ndata = [\"N=0\"]\nprofile = { run = \"x {N}\", sizes = [0] }\n", "klaraptor.toml:3:37: each profile size is a positive integer, or a list of 1 positive integers (one per data parameter)"),
        ("[kernel.k]\ndata = [\"N=0\"]\nprofile = { run = \"x 100\", sizes = [8] }\n", "klaraptor.toml:3:19: profile.run uses none of the data parameters ({N}) nor {SIZES}: every size would run the same command"),
        ("[kernel.k]\ndata = [\"N=0\"]\nprofile = { run = \"x {SIZES} {N}\", sizes = [8] }\n", "klaraptor.toml:3:19: profile.run uses {SIZES}, which runs the command once for all the profile sizes, together with {N}, which runs it once per size: use one or the other"),
    ];
    for (src, want) in bad {
        let e = config::parse(Path::new("klaraptor.toml"), src).unwrap_err();
        let got = format!("{}: {}", e.0[0].loc, e.0[0].message);
        assert_eq!(got, want, "for {src}");
    }
}

#[test]
fn multibyte_text_outside_pragmas_is_fine() {
    // Found by the `pragma` fuzz target: a two-byte character before a '-'.
    let s = scan(
        Path::new("a.cu"),
        "\u{67b}-\n// é /* ü */\n#pragma klaraptor kernel(k) data(n) // ünïcode\n",
    )
    .unwrap();
    assert_eq!(s.annotations.len(), 1);
}

#[test]
fn a_deeply_nested_formula_is_an_error_naming_the_pragma() {
    let src = format!(
        "#pragma klaraptor kernel(k) data(n) grid({}n{})",
        "(".repeat(5000),
        ")".repeat(5000)
    );
    let e = first_error(&src);
    assert!(e.starts_with("a.cu:1:"), "{e}");
    assert!(e.contains("longer than 4000 tokens"), "{e}");
    let src = format!(
        "#pragma klaraptor kernel(k) data(n) grid({}n{})",
        "(".repeat(200),
        ")".repeat(200)
    );
    let e = first_error(&src);
    assert!(
        e.starts_with("a.cu:1:170: this expression nests more than 128 levels"),
        "{e}"
    );
}

#[test]
fn a_misspelled_klaraptor_pragma_is_found() {
    use klaraptor_spec::annotations::misspelled_pragmas;
    let src = "#pragma klaraptr kernel(k) data(n)\n\
               #pragma once\n\
               #  pragma   Klaraptor kernel(k)\n\
               #pragma klaraptor kernel(k) data(n)\n\
               #pragma unroll\n\
               #pragma karaptor kernel(k)\n\
               #pragma kernel_info_dim_k = 2;\n\
               #pragma clang diagnostic push\n";
    let found: Vec<String> = misspelled_pragmas(Path::new("a.cu"), src)
        .iter()
        .map(|d| format!("{}: {}", d.loc, d.message))
        .collect();
    assert_eq!(
        found,
        [
            "a.cu:1:9: '#pragma klaraptr' is not a klaraptor annotation: the compiler ignores it and the kernel keeps its own launch",
            "a.cu:3:13: '#pragma Klaraptor' is not a klaraptor annotation: the compiler ignores it and the kernel keeps its own launch",
            "a.cu:6:9: '#pragma karaptor' is not a klaraptor annotation: the compiler ignores it and the kernel keeps its own launch",
        ]
    );
}

#[test]
fn a_two_dimensional_block_may_have_a_batch_on_the_grids_z_axis() {
    let s = scan(
        Path::new("a.cu"),
        "#pragma klaraptor kernel(k) data(W=w, H=h, B=b) dim(2) \\\n    grid(ceil(W, bx), ceil(H, by), B)\n",
    )
    .unwrap();
    let a = &s.annotations[0];
    assert_eq!(a.dim, 2);
    assert_eq!(
        a.grid.iter().map(|g| g.to_string()).collect::<Vec<_>>(),
        ["ceil(W, bx)", "ceil(H, by)", "B"]
    );
}

#[test]
fn an_annotation_that_leaves_no_launch_is_refused() {
    use klaraptor_spec::spec::check_launchable;
    let ann = |src: &str| scan(Path::new("a.cu"), src).unwrap().annotations.remove(0);
    // A division by zero at every block shape.
    let e = check_launchable(&ann(
        "#pragma klaraptor kernel(k) data(N=n) grid(N / (bx - bx))",
    ))
    .unwrap_err();
    assert!(
        e.starts_with("grid formula 1 ((N / (bx - bx))) cannot be evaluated at any block shape")
            && e.contains("division by zero"),
        "{e}"
    );
    // Constraints no candidate shape meets.
    let e = check_launchable(&ann(
        "#pragma klaraptor kernel(k) data(N=n) block(bx == 33)",
    ))
    .unwrap_err();
    assert!(e.starts_with("no block shape satisfies"), "{e}");
    // A grid below 1 everywhere.
    let e =
        check_launchable(&ann("#pragma klaraptor kernel(k) data(N=n) grid(0 - N)")).unwrap_err();
    assert!(e.contains("is below 1 at every block shape"), "{e}");
    // What only some sizes or shapes allow is fine (the launch decides).
    for ok in [
        "#pragma klaraptor kernel(k) data(N=n) grid(ceil(N, bx))",
        "#pragma klaraptor kernel(k) data(N=n) grid(N / (bx - 1))",
        "#pragma klaraptor kernel(k) data(N=n) grid(ceil(N, bx)) block(bx == 96)",
        "#pragma klaraptor kernel(k) data(N=n) grid(ceil(N - 1000, bx))",
        "#pragma klaraptor kernel(k) data(W=w, H=h, B=b) dim(2) grid(ceil(W, bx), ceil(H, by), B) block(bx * by <= N_MAX_UNUSED || bx >= 1)",
    ] {
        let ok = ok.replace(" block(bx * by <= N_MAX_UNUSED || bx >= 1)", "");
        assert_eq!(check_launchable(&ann(&ok)), Ok(()), "{ok}");
    }
}

/// `{SIZES}`: one command for all the profile sizes, accepted in a pragma and in
/// `klaraptor.toml`; a kernel with a data parameter called SIZES keeps `{SIZES}` as its value.
#[test]
fn a_recipe_may_run_once_for_all_sizes() {
    use klaraptor_spec::annotations::{check_recipe_placeholders, runs_all_sizes};
    let src = "#pragma klaraptor kernel(k) data(N=n, M=m) dim(2) \\\n    profile(run=\"./k --sizes {SIZES} --time 1\", sizes=[8, (16, 4)])\n__global__ void k(int n, int m) {}\n";
    let s = scan(Path::new("a.cu"), src).unwrap();
    let p = s.annotations[0].profile.as_ref().unwrap();
    assert_eq!(p.run, "./k --sizes {SIZES} --time 1");
    assert_eq!(p.sizes, vec![vec![8, 8], vec![16, 4]]);
    assert!(runs_all_sizes(&p.run, &["N", "M"]));
    let toml = "[kernel.k]\ndata = [\"N=0\"]\nprofile = { run = \"./k --sizes {SIZES}\", sizes = [8, 16] }\n";
    let ks = config::parse(Path::new("klaraptor.toml"), toml).unwrap();
    assert_eq!(
        ks[0].annotation.profile.as_ref().unwrap().run,
        "./k --sizes {SIZES}"
    );
    // A data parameter called SIZES: `{SIZES}` is its value, one command per size.
    assert!(!runs_all_sizes("./k {SIZES}", &["SIZES"]));
    assert_eq!(check_recipe_placeholders("./k {SIZES}", &["SIZES"]), Ok(()));
    assert!(check_recipe_placeholders("./k {SIZES} {N}", &["SIZES", "N"]).is_ok());
    assert!(check_recipe_placeholders("./k {SIZES} {N}", &["N"]).is_err());
    assert!(check_recipe_placeholders("./k {NN}", &["N"]).is_err());
}
