//! klaraptor's occupancy equals `cudaOccupancyMaxActiveBlocksPerMultiprocessor` on every row
//! of the sweep measured on the H200 (`tests/fixtures/occupancy-h200.csv`, written by
//! `bench/gpu/occupancy/run.sh`). The device is built from the attributes recorded in the
//! CSV's header with `Device::from_attributes`.
//!
//! While the fixture is absent the test says so and passes, unless
//! `KLARAPTOR_REQUIRE_FIXTURES=1`, which makes its absence a failure.

mod replay;

use std::path::Path;

use klaraptor_model::Device;

const FIXTURE: &str = "tests/fixtures/occupancy-h200.csv";

#[test]
fn occupancy_equals_the_cuda_api_on_every_row_of_the_h200_sweep() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            let msg = format!(
                "{}: {e}. Run bench/gpu/occupancy/run.sh on the GPU machine and commit its \
                 occupancy.csv there.",
                path.display()
            );
            if std::env::var("KLARAPTOR_REQUIRE_FIXTURES").as_deref() == Ok("1") {
                panic!("KLARAPTOR_REQUIRE_FIXTURES=1 and the fixture is missing: {msg}");
            }
            eprintln!("occupancy replay SKIPPED (fixture absent): {msg}");
            return;
        }
    };
    let sweep = replay::parse(&text, &path.display().to_string()).unwrap();
    let dev = Device::from_attributes(&sweep.attrs)
        .unwrap_or_else(|e| panic!("{}: header attributes: {e}", path.display()));
    assert!(
        sweep.rows.len() > 1000,
        "{}: only {} rows",
        path.display(),
        sweep.rows.len()
    );
    let bad = replay::mismatches(&dev, &sweep);
    let shown: Vec<String> = bad
        .iter()
        .take(25)
        .map(|(r, o)| replay::describe(r, *o))
        .collect();
    assert!(
        bad.is_empty(),
        "{}: {} of {} rows disagree with the CUDA occupancy API:\n{}",
        path.display(),
        bad.len(),
        sweep.rows.len(),
        shown.join("\n")
    );
    eprintln!(
        "occupancy replay: {} rows of {} agree",
        sweep.rows.len(),
        sweep.header.first().map(String::as_str).unwrap_or("")
    );
}

/// The replay itself catches a wrong row and reads the header (hand-computed sm_90 rows).
#[test]
fn replay_reports_a_disagreeing_row_with_its_line() {
    let csv = "\
# gpu: hand-made
# attr ComputeCapabilityMajor 9
# attr ComputeCapabilityMinor 0
# attr MultiProcessorCount 132
kernel,num_regs,static_smem,max_dyn_smem,carveout,block_size,dyn_smem,rc,blocks
a,32,0,232448,-1,256,0,0,8
a,40,0,232448,-1,256,0,0,6
a,32,0,232448,-1,64,10000,0,20
a,32,0,232448,25,32,4096,0,12
a,255,0,232448,-1,288,0,0,1
a,16,0,232448,-1,1056,0,1,77
";
    let sweep = replay::parse(csv, "hand.csv").unwrap();
    assert_eq!(sweep.attrs["MultiProcessorCount"], 132);
    assert_eq!(sweep.header, vec!["gpu: hand-made".to_string()]);
    let dev = Device::from_attributes(&sweep.attrs).unwrap();
    let bad = replay::mismatches(&dev, &sweep);
    // 255 registers × 9 warps cannot launch: 0, not 1. The refused query (rc 1) is 0.
    assert_eq!(bad.len(), 1, "{:?}", bad);
    assert_eq!((bad[0].0.line, bad[0].1), (10, 0));
    assert!(replay::describe(bad[0].0, bad[0].1).starts_with("line 10: a (255 regs"));
}

#[test]
fn malformed_sweeps_are_refused_with_file_and_line() {
    let e = replay::parse("kernel,x\n", "s.csv").err().unwrap();
    assert!(e.starts_with("s.csv:1:"), "{e}");
    let e = replay::parse(
        &format!("{}\na,32,0,0,-1,256,zero,0,8\n", replay::COLUMNS),
        "s.csv",
    )
    .err()
    .unwrap();
    assert!(e.starts_with("s.csv:2:") && e.contains("zero"), "{e}");
    let e = replay::parse("# attr Foo\n", "s.csv").err().unwrap();
    assert!(e.contains("s.csv:1:"), "{e}");
}
