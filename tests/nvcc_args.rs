//! Real nvcc command lines (from CMake, hand-written Makefiles, PolyBench-style builds and
//! nvcc's documentation) parsed against the option table and re-emitted token for token.

use std::path::Path;

use klaraptor::nvcc_args::{split_response_file, Arg, CommandLine, KlOption, Phase, Role};

struct Case {
    line: &'static str,
    phase: Phase,
    output: Option<&'static str>,
    cuda: &'static [&'static str],
    archs: &'static [&'static str],
}

const CASES: &[Case] = &[
    // CMake 3.28, Ninja generator, a CUDA object.
    Case {
        line: "-forward-unknown-to-host-compiler -DKL_DEMO -I/src/include -isystem /opt/x/include -O3 -DNDEBUG -std=c++17 \"--generate-code=arch=compute_90,code=[compute_90,sm_90]\" -Xcompiler=-fPIC -MD -MT CMakeFiles/app.dir/a.cu.o -MF CMakeFiles/app.dir/a.cu.o.d -x cu -c /src/a.cu -o CMakeFiles/app.dir/a.cu.o",
        phase: Phase::Compile,
        output: Some("CMakeFiles/app.dir/a.cu.o"),
        cuda: &["/src/a.cu"],
        archs: &["arch=compute_90,code=[compute_90,sm_90]"],
    },
    // CMake device link step of a separable-compilation target.
    Case {
        line: "-forward-unknown-to-host-compiler -O3 -DNDEBUG \"--generate-code=arch=compute_80,code=[compute_80,sm_80]\" -Xcompiler=-fPIC -Wno-deprecated-gpu-targets -shared -dlink CMakeFiles/app.dir/a.cu.o -o CMakeFiles/app.dir/cmake_device_link.o -lcudadevrt -lcudart_static -lrt -lpthread -ldl",
        phase: Phase::DeviceLink,
        output: Some("CMakeFiles/app.dir/cmake_device_link.o"),
        cuda: &[],
        archs: &["arch=compute_80,code=[compute_80,sm_80]"],
    },
    // PolyBench/GPU-style one-line build.
    Case {
        line: "-O3 -arch=sm_90 2mm.cu -o 2mm.exe",
        phase: Phase::Link,
        output: Some("2mm.exe"),
        cuda: &["2mm.cu"],
        archs: &["sm_90"],
    },
    // Separate compilation with relocatable device code.
    Case {
        line: "-rdc=true -c --gpu-architecture sm_90 -I ../common -Xptxas -v,-O3 a.cu b.cu",
        phase: Phase::Compile,
        output: None,
        cuda: &["a.cu", "b.cu"],
        archs: &["sm_90"],
    },
    Case {
        line: "-dc -gencode arch=compute_90,code=sm_90 -gencode=arch=compute_80,code=compute_80 -lineinfo -G -g x.cu -o x.o",
        phase: Phase::CompileRdc,
        output: Some("x.o"),
        cuda: &["x.cu"],
        archs: &["arch=compute_90,code=sm_90", "arch=compute_80,code=compute_80"],
    },
    // Dependencies only, then a preprocess: nothing is compiled.
    Case {
        line: "-M -MT main.o -MF main.d main.cu -DUSE_FP64=1 -UNDEBUG -include cstdint",
        phase: Phase::Dependencies,
        output: None,
        cuda: &["main.cu"],
        archs: &[],
    },
    Case {
        line: "-E --std c++20 -Ddim=3 kernel.cu",
        phase: Phase::Preprocess,
        output: None,
        cuda: &["kernel.cu"],
        archs: &[],
    },
    // Link only, with linker and host-compiler options and a custom host compiler.
    Case {
        line: "-ccbin=g++-12 --compiler-options -Wall,-Wextra -Xlinker=--as-needed -L/opt/lib -lcublas main.o mm.o -o app",
        phase: Phase::Link,
        output: Some("app"),
        cuda: &[],
        archs: &[],
    },
    // Intermediate outputs.
    Case {
        line: "-ptx -arch sm_90 --use_fast_math -maxrregcount=64 k.cu -o k.ptx",
        phase: Phase::Intermediate,
        output: Some("k.ptx"),
        cuda: &["k.cu"],
        archs: &["sm_90"],
    },
    Case {
        line: "-cuda -ccbin clang++-19 -O2 app.cu -o app.cu.cpp.ii",
        phase: Phase::Intermediate,
        output: Some("app.cu.cpp.ii"),
        cuda: &["app.cu"],
        archs: &[],
    },
    // A C++ file compiled as CUDA.
    Case {
        line: "-x cu -c host_and_device.cpp -o hd.o -t2 --threads=4 -m64",
        phase: Phase::Compile,
        output: Some("hd.o"),
        cuda: &["host_and_device.cpp"],
        archs: &[],
    },
    // Options nvcc does not know are kept as they are (nvcc reports them).
    Case {
        line: "-c -Wall -fopenmp a.cu",
        phase: Phase::Compile,
        output: None,
        cuda: &["a.cu"],
        archs: &[],
    },
    Case {
        line: "-lib -o libk.a a.cu b.cu c.o",
        phase: Phase::Library,
        output: Some("libk.a"),
        cuda: &["a.cu", "b.cu"],
        archs: &[],
    },
    Case { line: "--version", phase: Phase::Link, output: None, cuda: &[], archs: &[] },
    Case { line: "-dryrun -c a.cu", phase: Phase::Compile, output: None, cuda: &["a.cu"], archs: &[] },
];

fn archs(c: &CommandLine) -> Vec<&str> {
    let mut v: Vec<&str> = c.values(Role::Arch).collect();
    v.extend(c.values(Role::Gencode));
    v
}

#[test]
fn real_command_lines_parse_and_reemit_exactly() {
    for case in CASES {
        let words = split_response_file(case.line);
        let c = CommandLine::parse(words.clone()).unwrap_or_else(|e| panic!("{}: {e}", case.line));
        assert_eq!(c.to_args(), words, "re-emission of {}", case.line);
        assert_eq!(c.phase(), case.phase, "phase of {}", case.line);
        assert_eq!(c.output(), case.output, "output of {}", case.line);
        let cuda: Vec<&Path> = case.cuda.iter().map(Path::new).collect();
        assert_eq!(c.cuda_sources(), cuda, "CUDA sources of {}", case.line);
        assert_eq!(archs(&c), case.archs, "targets of {}", case.line);
    }
}

#[test]
fn each_spelling_of_an_option_means_the_same() {
    for line in [
        "-o x.o a.cu",
        "-o=x.o a.cu",
        "--output-file x.o a.cu",
        "--output-file=x.o a.cu",
    ] {
        let c = CommandLine::parse(split_response_file(line)).unwrap();
        assert_eq!(c.output(), Some("x.o"), "{line}");
    }
    for line in [
        "-Iinc",
        "-I inc",
        "-I=inc",
        "--include-path inc",
        "--include-path=inc",
    ] {
        let c = CommandLine::parse(split_response_file(line)).unwrap();
        assert_eq!(
            c.values(Role::IncludeDir).collect::<Vec<_>>(),
            ["inc"],
            "{line}"
        );
    }
    for line in ["-O3", "-O 3", "-O=3", "--optimize 3"] {
        let c = CommandLine::parse(split_response_file(line)).unwrap();
        assert_eq!(
            c.values(Role::Optimize).collect::<Vec<_>>(),
            ["3"],
            "{line}"
        );
    }
    for line in [
        "-Xcompiler -fPIC,-Wall",
        "-Xcompiler=-fPIC,-Wall",
        "--compiler-options=-fPIC,-Wall",
    ] {
        let c = CommandLine::parse(split_response_file(line)).unwrap();
        let v: Vec<_> = c
            .args
            .iter()
            .filter_map(|a| match a {
                Arg::Flag { value, .. } => value.clone(),
                _ => None,
            })
            .collect();
        assert_eq!(v, ["-fPIC,-Wall"], "{line}");
    }
    for line in [
        "-rdc=true -c a.cu",
        "-rdc true -c a.cu",
        "--relocatable-device-code=true -c a.cu",
        "-dc a.cu",
    ] {
        assert!(
            CommandLine::parse(split_response_file(line)).unwrap().rdc(),
            "{line}"
        );
    }
    // nvcc rejects these spellings; they must not be taken for the option they resemble.
    for line in ["-ox.o", "-output-file x.o", "-compile"] {
        let c = CommandLine::parse(split_response_file(line)).unwrap();
        assert!(
            matches!(c.args[0], Arg::Unknown(_)),
            "{line}: {:?}",
            c.args[0]
        );
    }
}

#[test]
fn klaraptor_options_never_reach_nvcc() {
    let c = CommandLine::parse(["--kl-verbose", "-c", "a.cu", "--kl-keep"]).unwrap();
    assert_eq!(c.to_args(), ["-c", "a.cu"]);
    assert!(c.has_kl(&KlOption::Verbose) && c.has_kl(&KlOption::Keep));
    let e = CommandLine::parse(["--kl-verbsoe"]).unwrap_err();
    assert!(e.to_string().contains("--kl-verbsoe"), "{e}");
}

#[test]
fn options_files_are_expanded_recursively() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("inner.rsp"),
        "-DINNER \"-I dir with space\"",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("outer.rsp"),
        "-c\n--options-file inner.rsp\nk.cu",
    )
    .unwrap();
    let c = CommandLine::parse(["-optf", "outer.rsp", "-o", "k.o"]).unwrap();
    assert_eq!(
        c.to_args(),
        ["-optf", "outer.rsp", "-o", "k.o"],
        "the user's words travel unexpanded"
    );
    let x = c.expanded(dir.path()).unwrap();
    assert_eq!(
        x.to_args(),
        ["-c", "-DINNER", "-I dir with space", "k.cu", "-o", "k.o"]
    );
    assert_eq!(x.phase(), Phase::Compile);
    assert_eq!(x.cuda_sources(), [Path::new("k.cu")]);
    let missing = CommandLine::parse(["--options-file", "nope.rsp"]).unwrap();
    assert!(missing
        .expanded(dir.path())
        .unwrap_err()
        .to_string()
        .contains("nope.rsp"));
}
