//! The report end to end on CONSTRUCTED inputs: a study directory and a device output
//! written here in the formats the real pipeline uses (collector JSON lines and
//! kernels.tsv, KLARAPTOR_LOG decision and refine lines, the harness's KL_TIME/KL_OCC lines,
//! env.txt, device.sh's summary.tsv, a profile database), with times from a made-up formula,
//! and rational programs fitted by klaraptor's own fitting code (`rational::build`) from
//! made-up profile counters. Nothing here is a measurement; it checks that the report
//! computes what it says it computes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use klaraptor_accuracy::sizes::Sizes;
use klaraptor_accuracy::study::{self, Method, Paths, Study};
use klaraptor_profiler::db::ProfileDb;
use klaraptor_profiler::plan::kernel_stem;
use klaraptor_profiler::record::{
    Counters, DeviceId, Entry, KernelId, Plan, ProgramBlock, Sample, FORMAT_VERSION,
};
use klaraptor_program::rational::{self, RationalProgram};
use klaraptor_spec::link::LinkSpec;

const GPU_LINE: &str = "NVIDIA H200, GPU-00000000-0000-0000-0000-000000000000, 9.0, 580.00.00";

fn env_txt(date: &str) -> String {
    format!(
        "{GPU_LINE}\nnvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n{date}\n"
    )
}

fn spec(name: &str, mangled: &str, data: &[&str], dim: u8, grid: &[&str]) -> LinkSpec {
    LinkSpec {
        shmem: None,
        name: name.into(),
        mangled: mangled.into(),
        data: data.iter().map(|s| s.to_string()).collect(),
        dim,
        grid: grid.iter().map(|s| s.to_string()).collect(),
        block: vec![],
        profile_run: None,
        profile_sizes: vec![],
        code_hash: "0".repeat(32),
        annotated_at: "constructed.cu:1:1".into(),
        build_dir: PathBuf::from("/nonexistent"),
    }
}

fn grid_of(s: &LinkSpec, sizes: &[i64], b: [u32; 3]) -> [u32; 3] {
    // The constructed kernels' grids: ceil(last-but-... ) as their formulas say.
    let c = |n: i64, d: u32| ((n + i64::from(d) - 1) / i64::from(d)) as u32;
    if s.dim == 2 {
        [c(sizes[1], b[0]), c(sizes[0], b[1]), 1]
    } else {
        [c(sizes[0], b[0]), 1, 1]
    }
}

/// Made-up counters with the shape of a product kernel: per thread a loop of `len`
/// iterations with two loads, coalescing that improves with bx up to a warp.
fn counters(s: &LinkSpec, sizes: &[i64], b: [u32; 3], time_ms: f64) -> Counters {
    let g = grid_of(s, sizes, b);
    let warps_per_block = (u64::from(b[0] * b[1] * b[2])).div_ceil(32);
    let warps = u64::from(g[0]) * u64::from(g[1]) * warps_per_block;
    let len = *sizes.last().unwrap() as u64;
    let ld = warps * 2 * len;
    let lanes_x = u64::from(b[0].min(32));
    let sectors_per_req = 1 + 32 / lanes_x;
    Counters {
        inst_executed: warps * (8 * len + 30),
        inst_global_ld: ld,
        inst_global_st: warps,
        inst_shared_ld: 0,
        inst_shared_st: 0,
        inst_barrier: 0,
        gld_requests: ld,
        gst_requests: warps,
        gld_sectors: ld * sectors_per_req,
        gst_sectors: warps * 4,
        gld_l1_hit_sectors: None,
        dram_bytes_read: (sizes.iter().product::<i64>() as u64) * 8 / len.max(1) + 4096,
        dram_bytes_write: 4 * sizes[0] as u64,
        achieved_active_warps: 32.0,
        global_atomic_requests: None,
        time_ms,
        time_runs_ms: vec![time_ms; 5],
        launches_per_run: None,
        regs_per_thread: 32,
        smem_static: 0,
        smem_dynamic: 0,
    }
}

/// The made-up "measured" time of a shape: work × a coalescing penalty for narrow blocks ×
/// a latency penalty for tiny ones, plus a per-shape wiggle so the optimum is unique.
fn measured_ms(sizes: &[i64], b: [u32; 3]) -> f64 {
    let work: f64 = sizes.iter().map(|&v| v as f64).product::<f64>() * 2e-10;
    let bx = f64::from(b[0]);
    let threads = f64::from(b[0] * b[1] * b[2]);
    let coalesce = (32.0 / bx.min(32.0)).powf(0.8);
    let tiny = if threads < 128.0 {
        (128.0 / threads).sqrt()
    } else {
        1.0
    };
    let big = if threads > 512.0 { 1.15 } else { 1.0 };
    let wiggle = 1.0 + 0.001 * f64::from((b[0] * 7 + b[1] * 13) % 17);
    work * coalesce * tiny * big * wiggle + 0.002
}

fn entry(s: &LinkSpec, sizes: &[Vec<i64>]) -> Entry {
    let mut samples = Vec::new();
    for sz in sizes {
        for b in rational::candidates(s.dim) {
            samples.push(Sample {
                sizes: sz.clone(),
                block: b,
                grid: grid_of(s, sz, b),
                error: None,
                counters: Some(counters(s, sz, b, measured_ms(sz, b))),
            });
        }
    }
    Entry {
        format_version: FORMAT_VERSION,
        kernel: KernelId {
            mangled: s.mangled.clone(),
            name: s.name.clone(),
            code_hash: s.code_hash.clone(),
            data: s.data.clone(),
            dim: s.dim,
        },
        device: DeviceId {
            name: "NVIDIA H200".into(),
            uuid: String::new(),
            cc: "9.0".into(),
            sm_count: 132,
        },
        collector: "constructed".into(),
        captured_at: "2026-01-01T00:00:00Z".into(),
        cuda_version: "13.0".into(),
        driver_version: "580.00.00".into(),
        plan: Plan {
            sizes: sizes.to_vec(),
            shapes: rational::candidates(s.dim),
            runs: 5,
            warmup: 1,
            note: "constructed".into(),
        },
        samples,
        program: Vec::new(),
        incomplete: None,
    }
}

fn write(path: &Path, text: impl AsRef<[u8]>) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn records_dir(dir: &Path, s: &LinkSpec, samples: &[Sample]) {
    let stem = kernel_stem(&s.mangled);
    write(
        &dir.join("kernels.tsv"),
        format!("{stem}\t{}\t{}\n", s.mangled, s.name),
    );
    let mut text = String::new();
    for x in samples {
        text.push_str(&serde_json::to_string(x).unwrap());
        text.push('\n');
    }
    write(&dir.join(format!("{stem}.jsonl")), text);
}

fn sweep(s: &LinkSpec, sizes: &[i64], drop: usize) -> Vec<Sample> {
    let cands = rational::candidates(s.dim);
    let keep = cands.len() - drop;
    cands
        .into_iter()
        .take(keep)
        .map(|b| {
            let t = measured_ms(sizes, b);
            let mut c = counters(s, sizes, b, t);
            // The time-only collector: time fields, counters zero.
            c.inst_executed = 0;
            c.inst_global_ld = 0;
            c.gld_requests = 0;
            c.gld_sectors = 0;
            // Batched as the collector does: runs of ~100 µs, at most 100 launches.
            c.launches_per_run = Some((0.1 / t).ceil().clamp(1.0, 100.0) as u32);
            Sample {
                sizes: sizes.to_vec(),
                block: b,
                grid: grid_of(s, sizes, b),
                error: None,
                counters: Some(c),
            }
        })
        .collect()
}

struct Fixture {
    _tmp: tempfile::TempDir,
    paths: Paths,
    sizes: Sizes,
    gemm: RationalProgram,
    mvt: RationalProgram,
    out: PathBuf,
}

/// The shape the gemm run settles on at 1000³ (the model's second; see `fixture`), and the
/// one mvt settles on at 5000 (1 thread: slower than the program's 256).
fn gemm_settled(gemm: &RationalProgram) -> [u32; 3] {
    gemm.rank(&[1000, 1000, 1000]).unwrap()[1].block
}
const MVT_SETTLED: [u32; 3] = [1, 1, 1];

/// The fixture's two kernels: gemm (2-D) and mvt_x1 (1-D).
fn gemm_and_mvt() -> (LinkSpec, LinkSpec) {
    (
        spec(
            "gemm",
            "_Z4gemmPKfS0_Pfffiii",
            &["NI", "NJ", "NK"],
            2,
            &["ceil(NJ, bx)", "ceil(NI, by)"],
        ),
        spec("mvt_x1", "_Z6mvt_x1PKfS0_Pfi", &["N"], 1, &["ceil(N, bx)"]),
    )
}

/// The fixture's sweeps: program, job stem, kernel, sizes, shapes left out at the end (mvt
/// at 10000 was "killed" after 30 of its 37 shapes).
fn sweep_jobs<'a>(
    gemm: &'a LinkSpec,
    mvt: &'a LinkSpec,
) -> Vec<(&'static str, &'static str, &'a LinkSpec, Vec<i64>, usize)> {
    vec![
        ("gemm", "x1", gemm, vec![1000, 1000, 1000], 0),
        ("gemm", "x2", gemm, vec![2048, 2048, 256], 0),
        ("mvt", "x1", mvt, vec![5000], 0),
        ("mvt", "x2", mvt, vec![10000], 7),
    ]
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let study_dir = tmp.path().join("study");
    let device = tmp.path().join("device");
    let (gemm_s, mvt_s) = gemm_and_mvt();
    let gemm_profile = vec![
        vec![64, 64, 64],
        vec![128, 128, 128],
        vec![256, 128, 192],
        vec![256, 256, 256],
    ];
    let mvt_profile = vec![vec![256], vec![512], vec![1024], vec![2048]];
    // The study database: gemm's profile only (mvt's profile_best then comes from the
    // profile phase's records).
    let db_dir = tmp.path().join("study-db");
    let db = ProfileDb::open(&db_dir).unwrap();

    // The study directory: kernels.tsv, manifests fitted from the constructed profiles,
    // build times.
    let mut progs = BTreeMap::new();
    for (p, s, prof) in [
        ("gemm", &gemm_s, &gemm_profile),
        ("mvt", &mvt_s, &mvt_profile),
    ] {
        let d = study_dir.join(p);
        write(
            &d.join("kernels.tsv"),
            format!(
                "# name\tmangled\tdim\tdata\tgrid\n{}\t{}\t{}\t{}\t{}\n",
                s.name,
                s.mangled,
                s.dim,
                s.data.join(","),
                s.grid.join(";")
            ),
        );
        let prog = rational::build(s, &entry(s, prof), &d).expect("fitting constructed profiles");
        if p == "gemm" {
            db.put(&entry(s, prof)).unwrap();
        }
        std::fs::create_dir_all(d.join("models")).unwrap();
        prog.write(&d.join("models")).unwrap();
        write(
            &d.join("build-times.tsv"),
            "plain_link_s\t0.50\nmodel_link_s\t1.75\n",
        );
        progs.insert(p, prog);
        // Profile records, as device.sh PHASE=profile leaves them.
        let e = entry(s, prof);
        records_dir(
            &device.join(format!("profile/{p}/run1/records")),
            s,
            &e.samples,
        );
    }
    write(
        &study_dir.join("BUILD-INFO"),
        "klaraptor-cc 0.1.0 (constructed)\n",
    );

    let sizes = Sizes::parse(
        r#"
[[job]]
program = "gemm"
args = "1000 1000 1000"
sweep = ["gemm"]
est_s = 2
[[job]]
program = "gemm"
args = "2048 2048 256"
sweep = ["gemm"]
est_s = 2
[[job]]
program = "mvt"
args = "5000"
sweep = ["mvt_x1"]
est_s = 2
[[job]]
program = "mvt"
args = "10000"
sweep = ["mvt_x1"]
est_s = 2
"#,
    )
    .unwrap();

    for phase in ["profile", "exhaustive", "choice"] {
        write(
            &device.join(phase).join("env.txt"),
            env_txt("2026-01-02T03:04:05Z"),
        );
    }
    write(
        &device.join("profile/summary-20260102T030405.tsv"),
        "# id\trc\twall_s\tgpu_s\test_s\ngemm/run1\t1\t3.0\t0.5\t2.8\nmvt/run1\t0\t2.0\t0.25\t2.8\n",
    );
    write(
        &device.join("exhaustive/summary-20260102T030405.tsv"),
        "# id\trc\twall_s\tgpu_s\test_s\ngemm/x1\t0\t4.0\t2.0\t2\ngemm/x2\t0\t5.0\t3.0\t2\n\
         mvt/x1\t0\t2.0\t1.0\t2\nmvt/x2\t124\t30.0\t9.0\t2\n",
    );
    write(
        &device.join("choice/summary-20260102T030405.tsv"),
        "# id\trc\twall_s\tgpu_s\test_s\ngemm/x1\t0,0\t2\t0.1\t3\ngemm/x2\t0,0\t2\t0.1\t3\n\
         mvt/x1\t0,0\t2\t0.1\t3\nmvt/x2\t0,0\t2\t0.1\t3\n",
    );

    // Exhaustive sweeps.
    for (p, stem, s, sz, drop) in sweep_jobs(&gemm_s, &mvt_s) {
        let xdir = device.join(format!("exhaustive/{p}/{stem}"));
        records_dir(&xdir.join("records"), s, &sweep(s, &sz, drop));
        let dims = sz
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join("x");
        let own = if s.dim == 2 { "32x8x1" } else { "256x1x1" };
        let occ = if s.dim == 2 { 1024 } else { 768 };
        write(
            &xdir.join("stdout.txt"),
            format!(
                "KL_TIME {} {dims} median_ms=1.000000 block={own} launches=1\nKL_OCC {} block={occ} min_grid=264\n",
                s.name, s.name
            ),
        );
        // The choice runs.
        let cdir = device.join(format!("choice/{p}/{stem}"));
        let prog = progs[p].clone();
        let ranked = prog.rank(&sz).unwrap();
        let chosen = ranked[0].block;
        let data: String = s
            .data
            .iter()
            .zip(&sz)
            .map(|(l, v)| format!(" {l}={v}"))
            .collect();
        let g = grid_of(s, &sz, chosen);
        let mut log = if p == "mvt" && stem == "x2" {
            // A fallback: the run launched the program's own shape.
            format!(
                "klaraptor: {}{data} block=256x1x1 grid={}x1x1 source=fallback: no model for this device (the model is for NVIDIA H100) device=0:NVIDIA H200\n",
                s.name,
                (sz[0] + 255) / 256
            )
        } else {
            format!(
                "klaraptor: {}{data} block={}x{}x{} grid={}x{}x{} source=model predicted_us={:.3} device=0:NVIDIA H200 program_block={own}\n",
                s.name,
                chosen[0],
                chosen[1],
                chosen[2],
                g[0],
                g[1],
                g[2],
                ranked[0].prediction.time_us
            )
        };
        // The runtime's refinement: gemm at 1000³ settles on the model's second shape, mvt at
        // 5000 on a 1-thread block; gemm at 2048² × 256 began but did not settle; mvt at
        // 10000 (a fallback) has no refine line.
        let trying = format!(
            "klaraptor: {}{data} refine: trying 3 of {} shapes and the program's {own} device=0:NVIDIA H200\n",
            s.name,
            rational::candidates(s.dim).len()
        );
        let settled = match (p, stem) {
            ("gemm", "x1") => Some((ranked[1].block, "model#2", 7)),
            ("mvt", "x1") => Some((MVT_SETTLED, "model#3", 5)),
            _ => None,
        };
        if !(p == "mvt" && stem == "x2") {
            log.push_str(&trying);
        }
        if let Some((b, cand, n)) = settled {
            let g = grid_of(s, &sz, b);
            log.push_str(&format!(
                "klaraptor: {}{data} refine: settled on block={}x{}x{} grid={}x{}x{} after launches={n}, 0.950 of the model's first choice's time (candidate={cand} extra_us=12.5) device=0:NVIDIA H200\n",
                s.name, b[0], b[1], b[2], g[0], g[1], g[2]
            ));
        }
        write(&cdir.join("model.log"), log);
        // The run's KL_TIME is of the shape its launches ended with: the settled one.
        let ended = settled.map_or(chosen, |x| x.0);
        let harness = measured_ms(&sz, ended) * 1.02;
        write(
            &cdir.join("model.out"),
            format!(
                "KL_TIME {} {dims} median_ms={harness:.6} block={}x{}x{} launches=1\nKL_OCC {} block={occ} min_grid=264\n",
                s.name, ended[0], ended[1], ended[2], s.name
            ),
        );
        let own_b: [u32; 3] = if s.dim == 2 { [32, 8, 1] } else { [256, 1, 1] };
        write(
            &cdir.join("default.out"),
            format!(
                "KL_TIME {} {dims} median_ms={:.6} block={own} launches=1\nKL_OCC {} block={occ} min_grid=264\n",
                s.name,
                measured_ms(&sz, own_b),
                s.name
            ),
        );
    }
    let out = tmp.path().join("results");
    Fixture {
        paths: Paths {
            study: study_dir,
            device,
            exhaustive: None,
            profile_db: Some(db_dir),
            split: Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("split.toml")),
        },
        sizes,
        gemm: progs["gemm"].clone(),
        mvt: progs["mvt"].clone(),
        out,
        _tmp: tmp,
    }
}

fn argmin(sizes: &[i64], shapes: &[[u32; 3]]) -> ([u32; 3], f64) {
    shapes
        .iter()
        .map(|&b| (b, measured_ms(sizes, b)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap()
}

#[test]
fn every_method_is_timed_by_the_sweep() {
    let f = fixture();
    let st = Study::load(&f.paths, &f.sizes).unwrap();
    assert_eq!(st.cases.len(), 4);

    // gemm at 1000³: every method against the made-up times.
    let c = st
        .cases
        .iter()
        .find(|c| c.kernel == "gemm" && c.sizes == [1000, 1000, 1000])
        .unwrap();
    let sz = [1000i64, 1000, 1000];
    let cands = rational::candidates(2);
    assert_eq!(c.measured.len(), 66);
    assert!(c.complete());
    let (best, tbest) = argmin(&sz, &cands);
    let o = &c.picks[&Method::Optimum];
    assert_eq!(o.block, Some(best));
    assert_eq!(o.time_ms, Some(measured_ms(&sz, best)));

    let chosen = f.gemm.rank(&sz).unwrap()[0].block;
    let k = &c.picks[&Method::Klaraptor];
    assert_eq!(k.block, Some(chosen));
    assert_eq!(k.ratio, Some(tbest / measured_ms(&sz, chosen)));
    assert!(k.flag.is_none(), "{:?}", k.flag);
    assert!(k.how.contains("source=model"));
    // The run ended on the settled shape: its KL_TIME is settled's, not klaraptor's.
    assert_eq!(k.harness_ms, None);

    // settled: the model's second shape, after 7 launches, timed by the sweep.
    let settled = gemm_settled(&f.gemm);
    assert_ne!(settled, chosen);
    let st_pick = &c.picks[&Method::Settled];
    assert_eq!(st_pick.block, Some(settled));
    assert_eq!(st_pick.launches, Some(7));
    assert_eq!(st_pick.candidate.as_deref(), Some("model#2"));
    assert_eq!(st_pick.ratio, Some(tbest / measured_ms(&sz, settled)));
    assert!((st_pick.harness_ms.unwrap() - measured_ms(&sz, settled) * 1.02).abs() < 1e-5);
    assert_eq!(
        st_pick.slower_than_default,
        Some(measured_ms(&sz, settled) > 1.03 * measured_ms(&sz, [32, 8, 1]))
    );

    // profiled_best: the study database's gemm profile, nearest size 256³ (in ln, 1000³ is
    // nearer 256³ than any other profiled size), its fastest shape there.
    let (pbest, ptime) = argmin(&[256, 256, 256], &cands);
    let pb = &c.picks[&Method::ProfiledBest];
    assert_eq!(pb.block, Some(pbest));
    assert_eq!(pb.profiled_at.as_deref(), Some(&[256i64, 256, 256][..]));
    assert_eq!(pb.profile_time_ms, Some(ptime));
    assert_eq!(pb.ratio, Some(tbest / measured_ms(&sz, pbest)));
    assert!(
        pb.how
            .contains("the profile its rational program was built from"),
        "{}",
        pb.how
    );
    // The prediction is the manifest's for that shape, in ms.
    let p = f
        .gemm
        .rank(&sz)
        .unwrap()
        .into_iter()
        .find(|r| r.block == chosen)
        .unwrap()
        .prediction
        .time_us
        / 1000.0;
    assert_eq!(k.predicted_ms, Some(p));

    let d = &c.picks[&Method::Default];
    assert_eq!(d.block, Some([32, 8, 1]));
    assert_eq!(d.ratio, Some(tbest / measured_ms(&sz, [32, 8, 1])));

    // Occupancy 1024 on a 2-D kernel: the fastest shape with 1024 threads.
    let occ: Vec<[u32; 3]> = cands
        .iter()
        .copied()
        .filter(|b| b[0] * b[1] == 1024)
        .collect();
    assert_eq!(occ.len(), 11);
    let (ob, ot) = argmin(&sz, &occ);
    let oc = &c.picks[&Method::Occupancy];
    assert_eq!(oc.block, Some(ob));
    assert_eq!(oc.ratio, Some(tbest / ot));
    assert!(oc.how.contains("fastest of its 11 measured"), "{}", oc.how);

    // Spearman of the manifest's predictions against the made-up times.
    let ranked = f.gemm.rank(&sz).unwrap();
    let (mut xs, mut ys) = (vec![], vec![]);
    for b in &cands {
        if let Some(r) = ranked.iter().find(|r| r.block == *b) {
            xs.push(r.prediction.time_us);
            ys.push(measured_ms(&sz, *b));
        }
    }
    let rho = study::spearman(&xs, &ys).unwrap();
    assert!((c.spearman.unwrap() - rho).abs() < 1e-12);

    // mvt at 5000: 1-D, occupancy 768 is a candidate and used as is.
    let m = st
        .cases
        .iter()
        .find(|c| c.kernel == "mvt_x1" && c.sizes == [5000])
        .unwrap();
    assert_eq!(m.picks[&Method::Occupancy].block, Some([768, 1, 1]));
    assert_eq!(
        m.picks[&Method::Occupancy].ratio,
        Some(m.picks[&Method::Optimum].time_ms.unwrap() / measured_ms(&[5000], [768, 1, 1]))
    );
    assert_eq!(
        m.picks[&Method::Klaraptor].block,
        Some(f.mvt.rank(&[5000]).unwrap()[0].block)
    );
    // mvt settles on 1 thread, more than 3 % slower than its own 256.
    let ms = &m.picks[&Method::Settled];
    assert_eq!(ms.block, Some(MVT_SETTLED));
    assert!(measured_ms(&[5000], MVT_SETTLED) > 1.03 * measured_ms(&[5000], [256, 1, 1]));
    assert_eq!(ms.slower_than_default, Some(true));
    // Its profiled_best comes from the profile phase's records (no database entry): the
    // fastest shape at 2048.
    let mp = &m.picks[&Method::ProfiledBest];
    assert_eq!(mp.block, Some(argmin(&[2048], &rational::candidates(1)).0));
    assert!(mp.how.contains("the profile phase's records"), "{}", mp.how);
    assert!(mp.how.contains("no profile of mvt_x1"), "{}", mp.how);

    // gemm at 2048² × 256 began refining but did not settle.
    let g2 = st
        .cases
        .iter()
        .find(|c| c.kernel == "gemm" && c.sizes == [2048, 2048, 256])
        .unwrap();
    let gs = &g2.picks[&Method::Settled];
    assert_eq!((gs.block, gs.ratio), (None, None));
    assert!(
        gs.how.starts_with(
            "did not settle: the instrumented build's run began refining (trying 3 of 66 shapes"
        ),
        "{}",
        gs.how
    );
    // The KL_TIME of that run is klaraptor's.
    assert!(g2.picks[&Method::Klaraptor].harness_ms.is_some());

    // mvt at 10000: incomplete sweep and a fallback, both said.
    let m2 = st
        .cases
        .iter()
        .find(|c| c.kernel == "mvt_x1" && c.sizes == [10000])
        .unwrap();
    assert!(!m2.complete());
    assert!(st
        .warnings
        .iter()
        .any(|w| w.contains("mvt/x2") && w.contains("incomplete") && w.contains("30 of 37")));
    assert!(st
        .warnings
        .iter()
        .any(|w| w.contains("exhaustive job mvt/x2 exited with 124")));
    let k2 = &m2.picks[&Method::Klaraptor];
    assert_eq!(k2.block, Some([256, 1, 1]));
    assert!(k2.flag.as_deref().unwrap().contains("fallback: no model"));
    assert!(m2.picks[&Method::Settled]
        .how
        .starts_with("did not settle: no refine line"));

    // Criteria: gemm has two sizes, its largest is 8× the profiled 256 in NI and NJ.
    let g = st.criteria.iter().find(|c| c.kernel == "gemm").unwrap();
    assert_eq!(g.sizes, 2);
    assert_eq!(g.grid_labels, ["NJ", "NI"]);
    assert_eq!(g.grid_factor, Some(8.0));
    assert!(g.non_pow2 && !g.ok());
    let mv = st.criteria.iter().find(|c| c.kernel == "mvt_x1").unwrap();
    assert!((mv.grid_factor.unwrap() - 10000.0 / 2048.0).abs() < 1e-12);

    // Costs from the summaries and build-times.tsv.
    let gc = st.costs.iter().find(|c| c.program == "gemm").unwrap();
    assert_eq!(gc.profile_runs, 1);
    assert_eq!(gc.exhaustive_runs, 2);
    assert!((gc.exhaustive_wall_s - 9.0).abs() < 1e-12);
    assert!((gc.fit_s.unwrap() - 1.25).abs() < 1e-12);
}

#[test]
fn the_report_files() {
    let f = fixture();
    let w = klaraptor_accuracy::report(&f.paths, &f.sizes, &f.out, None, &["gemm".into()], None)
        .unwrap();
    assert_eq!(w.cases, 4);
    assert!(w.json.ends_with("accuracy-h200-2026-01-02.json"));
    let recs: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&w.json).unwrap()).unwrap();
    // 4 cases × optimum, klaraptor, settled, profiled_best, default, occupancy.
    assert_eq!(recs.len(), 24);
    // Each record names its program's suite and half (split.toml: gemm test, mvt tuning).
    for r in &recs {
        assert_eq!(r["suite"], "polybench", "{r}");
        let want = if r["program"] == "gemm" {
            "test"
        } else {
            "tuning"
        };
        assert_eq!(r["half"], want, "{r}");
    }
    for r in &recs {
        for key in [
            "program", "kernel", "mangled", "sizes", "method", "block", "time_ms",
        ] {
            assert!(r.get(key).is_some(), "{key} missing in {r}");
        }
    }
    let of =
        |m: &str| -> Vec<&serde_json::Value> { recs.iter().filter(|r| r["method"] == m).collect() };
    assert_eq!(of("settled").len(), 4);
    assert_eq!(of("profiled_best").len(), 4);
    let gs = of("settled")
        .into_iter()
        .find(|r| r["kernel"] == "gemm" && r["sizes"]["NK"] == 1000)
        .unwrap();
    assert_eq!(gs["launches"], 7);
    assert_eq!(gs["candidate"], "model#2");
    assert_eq!(gs["mangled"], "_Z4gemmPKfS0_Pfffiii");
    let unsettled = of("settled")
        .into_iter()
        .filter(|r| r["block"].is_null())
        .count();
    assert_eq!(unsettled, 2);
    let mv = of("settled")
        .into_iter()
        .find(|r| r["kernel"] == "mvt_x1" && r["sizes"]["N"] == 5000)
        .unwrap();
    assert_eq!(mv["slower_than_default"], true);
    let gp = of("profiled_best")
        .into_iter()
        .find(|r| r["kernel"] == "gemm" && r["sizes"]["NK"] == 256)
        .unwrap();
    assert_eq!(gp["profiled_at"]["NI"], 256);
    assert!(gp["ratio"].as_f64().unwrap() > 0.0);
    // The summary: one line per compared method, settled's counts.
    assert!(w
        .summary_json
        .ends_with("accuracy-h200-2026-01-02-summary.json"));
    let sum: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&w.summary_json).unwrap()).unwrap();
    let methods: Vec<&str> = sum.iter().map(|x| x["method"].as_str().unwrap()).collect();
    assert_eq!(
        methods,
        [
            "klaraptor",
            "settled",
            "profiled_best",
            "default",
            "occupancy"
        ]
    );
    assert_eq!(sum[1]["cases"], 2);
    assert_eq!(sum[1]["not_settled"], 2);
    // mvt at 5000, and gemm at 1000³ where its settled shape is slower than 32×8.
    let gsz = [1000i64, 1000, 1000];
    let gslow = measured_ms(&gsz, gemm_settled(&f.gemm)) > 1.03 * measured_ms(&gsz, [32, 8, 1]);
    assert_eq!(sum[1]["slower_than_default"], 1 + u64::from(gslow));
    assert_eq!(sum[2]["cases"], 4);
    assert_eq!(sum[2]["no_profile"], 0);
    let k = recs
        .iter()
        .find(|r| r["method"] == "klaraptor" && r["sizes"]["NK"] == 256)
        .unwrap();
    assert!(k["predicted_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(k["sizes"]["NI"], 2048);

    let md = std::fs::read_to_string(&w.markdown).unwrap();
    for needle in [
        "NVIDIA H200",
        "580.00.00",
        "13.0, V13.0.88",
        "| klaraptor | 4 |",
        "| settled | 2 |",
        "| profiled_best | 4 |",
        "2 of 4 cases did not settle",
        "Acceptance of the runtime's refinement (settled)",
        "| optimum | klaraptor | settled | profiled_best | default | occupancy | ρ |",
        "(7×)",
        "more than 3 % slower than default (256 at",
        "- settled: did not settle: gemm gemm at 2048×2048×256; mvt mvt_x1 at 10000",
        "KLARAPTOR_CHOICES=off",
        "Targets of the issue",
        "Spearman",
        "Build-time cost",
        "| gemm | 1 | 3.0 | 0.50 | 1.2 | 2 | 9.0 | 5.00 |",
        "accuracy-h200-2026-01-02-ratios.svg",
        "accuracy-h200-2026-01-02-shapes.svg",
        "fallback: no model",
        "incomplete",
        "**short**",
    ] {
        assert!(md.contains(needle), "the report lacks {needle:?}:\n{md}");
    }
    // A choice phase without whole-run files (before them, or WHOLE_RUN=0): null columns,
    // said once.
    assert!(recs
        .iter()
        .all(|r| r["whole_run_ms"].is_null() && r["drifts"].is_null()));
    assert_eq!(md.matches("No whole-run measurement").count(), 1, "{md}");
    // The method section says how the sweep timed, from the records' launches per run.
    let st = Study::load(&f.paths, &f.sizes).unwrap();
    let (lo, hi) = st.sweep_launches.expect("the sweep's records are batched");
    assert!(1 <= lo && lo <= hi && hi <= 100, "{lo}..{hi}");
    for needle in [
        format!("holding {lo} to {hi} launches back to back"),
        "gate kernel".to_string(),
    ] {
        assert!(md.contains(&needle), "the report lacks {needle:?}");
    }
    for c in &w.charts {
        let svg = std::fs::read_to_string(c).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("gemm"),
            "{}",
            c.display()
        );
    }
    let ratios = std::fs::read_to_string(&w.charts[0]).unwrap();
    assert!(ratios.contains("mvt_x1") && ratios.contains("0.90"));
}

#[test]
fn a_repeated_sweep_times_every_choice_again() {
    let f = fixture();
    // The second sweep measures the same shapes, except that the first sweep's optimum of
    // gemm at 1000³ runs 1.25 times longer.
    let repeat = f.out.parent().unwrap().join("repeat");
    let x = repeat.join("exhaustive");
    write(&x.join("env.txt"), env_txt("2026-01-03T00:00:00Z"));
    let (gemm, mvt) = gemm_and_mvt();
    let cands2 = rational::candidates(2);
    let (best, _) = argmin(&[1000, 1000, 1000], &cands2);
    for (p, stem, s, sz, drop) in sweep_jobs(&gemm, &mvt) {
        let mut samples = sweep(s, &sz, drop);
        if stem == "x1" && p == "gemm" {
            for smp in samples.iter_mut().filter(|smp| smp.block == best) {
                smp.counters.as_mut().unwrap().time_ms *= 1.25;
            }
        }
        records_dir(&x.join(format!("{p}/{stem}/records")), s, &samples);
    }
    let report = |again: &Path| {
        klaraptor_accuracy::report(
            &f.paths,
            &f.sizes,
            &f.out,
            None,
            &["gemm".into()],
            Some(again),
        )
    };
    // Without exhaustive/env.txt the directory is refused, by name.
    let e = report(&f.paths.device.join("choice")).unwrap_err();
    assert!(format!("{e:#}").contains("--repeat"), "{e:#}");

    let w = report(&repeat).unwrap();
    let md = std::fs::read_to_string(&w.markdown).unwrap();
    let section = &md[md.find("## Run to run").expect("no run-to-run section")..];
    assert!(
        section.find("## Per kernel and size").is_some(),
        "placed before the table"
    );
    assert!(section.contains("(run 2026-01-03T00:00:00Z"), "{section}");
    assert!(
        section.contains("timed the same 4 cases again"),
        "{section}"
    );
    // The optimum of the first sweep scores (the second sweep's fastest) / (1.25 × its
    // first time) in the second, the other three cases 1.
    let slow = 1.25 * measured_ms(&[1000, 1000, 1000], best);
    let runner_up = cands2
        .iter()
        .filter(|&&b| b != best)
        .map(|&b| measured_ms(&[1000, 1000, 1000], b))
        .fold(slow, f64::min);
    let r = runner_up / slow;
    assert!(r < 0.9);
    let g = r.powf(0.25);
    assert!(
        section.contains(&format!(
            "geometric mean {g:.3}, minimum {r:.3}, 1 cases below 0.90; the second's optimum \
             timed by this one: 1.000"
        )),
        "{section}"
    );
    // The case is listed, with the second sweep's own optimum beside.
    let row = section
        .lines()
        .find(|l| l.starts_with("| gemm | gemm | NI×NJ×NK = 1000×1000×1000"))
        .expect("the noisy case is listed");
    assert!(row.contains("| 0.80 |"), "{row}");
}

#[test]
fn job_lists_from_a_binary_with_specs() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = spec(
        "gemm",
        "_Z4gemmPKfS0_Pfffiii",
        &["NI", "NJ", "NK"],
        2,
        &["ceil(NJ, bx)", "ceil(NI, by)"],
    );
    s.profile_run = Some("./gemm {NI} {NJ} {NK}".into());
    s.profile_sizes = vec![vec![64, 64, 64], vec![256, 128, 192]];
    let mut t = spec("tail", "_Z4tailPfi", &["N"], 1, &["ceil(N, bx)"]);
    t.profile_run = None;
    // A "binary": the embedded spec text among other bytes, as scan_bytes finds it.
    let mut bytes = b"\x7fELF junk".to_vec();
    bytes.extend(s.embedded().unwrap().as_bytes());
    bytes.extend(b"\0\0more");
    bytes.extend(t.embedded().unwrap().as_bytes());
    write(&tmp.path().join("gemm/gemm"), &bytes);
    let sizes_text = r#"
[profile.gemm]
run = ["./gemm 512 512 512"]
[[job]]
program = "gemm"
args = "1000 1000 1000"
sweep = ["gemm"]
est_s = 2.5
[[job]]
program = "gemm"
args = "2048 2048 256"
sweep = ["gemm", "tail"]
est_s = 3
choice_est_s = 4
"#;
    let sizes = Sizes::parse(sizes_text).unwrap();
    let w = klaraptor_accuracy::jobs::write(tmp.path(), &sizes, &[]).unwrap();
    assert_eq!(w.jobs, [3, 2, 2]);
    let lines = klaraptor_accuracy::jobs::read(&w.jobs_txt).unwrap();
    let cmds: Vec<&str> = lines.iter().map(|l| l.command.as_str()).collect();
    assert_eq!(
        cmds,
        [
            "./gemm 64 64 64",
            "./gemm 256 128 192",
            "./gemm 512 512 512",
            "./gemm 1000 1000 1000 --time 1",
            "./gemm 2048 2048 256 --time 1",
            "./gemm.klaraptor 1000 1000 1000 --time 5",
            "./gemm.klaraptor 2048 2048 256 --time 5",
        ]
    );
    assert_eq!(lines[4].id, "gemm/x2");
    assert_eq!(lines[4].plan.as_deref(), Some("gemm/plans/x2.plan"));
    assert_eq!(lines[6].est_s, 4.0);
    assert_eq!(lines[5].plan, None);
    let plan = std::fs::read_to_string(tmp.path().join("gemm/plans/x2.plan")).unwrap();
    let plan_lines: Vec<&str> = plan.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(plan_lines.len(), 2);
    assert!(plan_lines[0].starts_with("_Z4gemmPKfS0_Pfffiii 1x1x1 "));
    assert_eq!(plan_lines[0].split(' ').count(), 1 + 66);
    assert_eq!(plan_lines[1].split(' ').count(), 1 + 37);
    let x1 = std::fs::read_to_string(tmp.path().join("gemm/plans/x1.plan")).unwrap();
    assert!(!x1.contains("_Z4tailPfi"));
    let tsv = std::fs::read_to_string(tmp.path().join("gemm/kernels.tsv")).unwrap();
    assert!(tsv.contains("gemm\t_Z4gemmPKfS0_Pfffiii\t2\tNI,NJ,NK\tceil(NJ, bx);ceil(NI, by)"));

    // A sweep of a kernel the binary does not have, and a kernel without any recipe.
    let bad = Sizes::parse(&sizes_text.replace("\"tail\"]", "\"nope\"]")).unwrap();
    let e = format!(
        "{:#}",
        klaraptor_accuracy::jobs::write(tmp.path(), &bad, &[]).unwrap_err()
    );
    assert!(
        e.contains("sweeps \"nope\"") && e.contains("its kernels: gemm, tail"),
        "{e}"
    );
    let none =
        Sizes::parse(&sizes_text.replace("[profile.gemm]\nrun = [\"./gemm 512 512 512\"]", ""))
            .unwrap();
    let e = format!(
        "{:#}",
        klaraptor_accuracy::jobs::write(tmp.path(), &none, &[]).unwrap_err()
    );
    assert!(e.contains("tail") && e.contains("[profile.gemm]"), "{e}");
}

/// A recipe with `{SIZES}` is one profile job for all of its kernel's profile sizes, told to
/// sweep each of them; a per-size recipe of another kernel keeps one job per size.
#[test]
fn a_sizes_recipe_is_one_profile_job() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = spec(
        "gemm",
        "_Z4gemmPKfS0_Pfffiii",
        &["NI", "NJ", "NK"],
        2,
        &["ceil(NJ, bx)", "ceil(NI, by)"],
    );
    s.profile_run = Some("./gemm --sizes {SIZES}".into());
    s.profile_sizes = klaraptor_spec::link::profile_design(&[
        vec![64, 64, 64],
        vec![128, 128, 128],
        vec![256, 128, 192],
        vec![256, 256, 256],
    ]);
    let mut t = spec("tail", "_Z4tailPfi", &["N"], 1, &["ceil(N, bx)"]);
    t.profile_run = Some("./gemm --tail {N}".into());
    t.profile_sizes = vec![vec![100], vec![200]];
    let mut u = spec("head", "_Z4headPfi", &["N"], 1, &["ceil(N, bx)"]);
    u.profile_run = Some("./gemm --sizes {SIZES}".into());
    u.profile_sizes = vec![vec![100], vec![200]];
    let mut bytes = b"\x7fELF".to_vec();
    for k in [&s, &t, &u] {
        bytes.extend(k.embedded().unwrap().as_bytes());
        bytes.extend(b"\0\0");
    }
    write(&tmp.path().join("gemm/gemm"), &bytes);
    let sizes = Sizes::parse(
        "[[job]]\nprogram = \"gemm\"\nargs = \"1000 1000 1000\"\nsweep = [\"gemm\"]\nest_s = 2\n",
    )
    .unwrap();
    let w = klaraptor_accuracy::jobs::write(tmp.path(), &sizes, &[]).unwrap();
    assert_eq!(w.jobs[0], 4);
    let lines = klaraptor_accuracy::jobs::read(&w.jobs_txt).unwrap();
    let profile: Vec<&klaraptor_accuracy::jobs::JobLine> =
        lines.iter().filter(|l| l.phase == "profile").collect();
    let cmds: Vec<&str> = profile.iter().map(|l| l.command.as_str()).collect();
    assert_eq!(
        cmds,
        [
            "KLARAPTOR_PROFILE_MAX_SIZES=7 ./gemm --sizes 64,64,64 128,128,128 256,128,192 \
             256,256,256 256,64,64 64,256,64 64,64,256",
            "./gemm --tail 100",
            "./gemm --tail 200",
            // Two sizes: within the runtime's default of 4.
            "./gemm --sizes 100 200",
        ]
    );
    assert_eq!(profile[0].id, "gemm/run1");
    // The one job sweeps the shapes at each of its 7 sizes.
    let shapes: usize = [&s, &t, &u]
        .iter()
        .map(|k| klaraptor_profiler::plan::plan_shapes_for(k).len())
        .sum();
    let per_shape = klaraptor_accuracy::jobs::PROFILE_S_PER_SHAPE;
    let overhead = klaraptor_accuracy::jobs::RUN_OVERHEAD_S;
    let rounded = |x: f64| format!("{x:.1}").parse::<f64>().unwrap();
    assert_eq!(
        profile[0].est_s,
        rounded(overhead + per_shape * (7 * shapes) as f64)
    );
    assert_eq!(
        profile[1].est_s,
        rounded(overhead + per_shape * shapes as f64)
    );
    let recipes = std::fs::read_to_string(tmp.path().join("gemm/recipes.txt")).unwrap();
    assert_eq!(recipes.lines().count(), 4);
}

/// One CONSTRUCTED line of a whole-run launch-times file (the runtime's format; the times are
/// made up).
fn launch_times_line(
    mangled: &str,
    name: &str,
    sizes: &[i64],
    (launches, total_ms, head_ms, tail_ms): (u64, f64, f64, f64),
    block: [u32; 3],
    blocks_seen: u32,
) -> String {
    let mean = total_ms / launches as f64;
    serde_json::json!({
        "kernel": mangled, "name": name, "sizes": sizes, "launches": launches,
        "timed": launches, "total_ms": total_ms, "first_ms": head_ms, "last_ms": tail_ms,
        "head_ms": head_ms, "tail_ms": tail_ms, "min_ms": mean.min(head_ms).min(tail_ms),
        "max_ms": mean.max(head_ms).max(tail_ms), "trend": 0.0, "block": block,
        "grid": [1, 1, 1], "blocks_seen": blocks_seen,
    })
    .to_string()
        + "\n"
}

/// The whole-run files of the choice phase (device.sh WHOLE_RUN=1; CONSTRUCTED times) fill
/// the records' whole_run_ms, whole_run_ratio and drifts, and the report's per-launch /
/// whole-run table; a job without them keeps null columns.
#[test]
fn whole_run_files_fill_the_records() {
    let f = fixture();
    let st = Study::load(&f.paths, &f.sizes).unwrap();
    assert_eq!((st.whole_run_jobs, st.no_whole_run_jobs), (0, 4));
    let case = |p: &str, job: &str| {
        st.cases
            .iter()
            .find(|c| c.program == p && c.job == job)
            .unwrap()
            .clone()
    };
    let block = |c: &study::Case, m: Method| c.picks[&m].block.unwrap();
    // gemm at 1000³: the program's own shape in 100 ms over 10 launches, the model's first
    // choice in 80 ms (its per-launch cost halving over the run: it drifts), settled's shape
    // forced in 90 ms.
    let g = case("gemm", "gemm/x1");
    let (gd, gk, gs) = (
        block(&g, Method::Default),
        block(&g, Method::Klaraptor),
        block(&g, Method::Settled),
    );
    assert!(gd != gk && gk != gs && gd != gs, "{gd:?} {gk:?} {gs:?}");
    let gdir = f.paths.device.join("choice/gemm/x1/wholerun");
    let line = |c: &study::Case, t, b, seen| {
        launch_times_line(&c.mangled, &c.kernel, &c.sizes, t, b, seen)
    };
    write(
        &gdir.join("default.times.jsonl"),
        line(&g, (10, 100.0, 10.0, 10.0), gd, 1),
    );
    write(
        &gdir.join("model.times.jsonl"),
        line(&g, (10, 80.0, 10.0, 5.0), gk, 1),
    );
    write(
        &gdir.join("f1.times.jsonl"),
        line(&g, (10, 90.0, 9.0, 9.0), gs, 1),
    );
    write(
        &gdir.join("f1.force"),
        format!("{} {}x{}x{}\n", g.kernel, gs[0], gs[1], gs[2]),
    );
    // mvt at 5000: the default run only, and a model run whose key was launched with two
    // shapes (no whole-run time for klaraptor from it); the last line half-written (a run
    // killed at exit).
    let m = case("mvt", "mvt/x1");
    let (md_, mk) = (block(&m, Method::Default), block(&m, Method::Klaraptor));
    let mdir = f.paths.device.join("choice/mvt/x1/wholerun");
    write(
        &mdir.join("default.times.jsonl"),
        line(&m, (1, 2.0, 2.0, 2.0), md_, 1) + "{\"kernel\":",
    );
    write(
        &mdir.join("model.times.jsonl"),
        line(&m, (1, 1.0, 1.0, 1.0), mk, 2),
    );

    let w = klaraptor_accuracy::report(&f.paths, &f.sizes, &f.out, None, &["gemm".into()], None)
        .unwrap();
    let recs: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&w.json).unwrap()).unwrap();
    let rec = |p: &str, first: i64, m: &str| {
        recs.iter()
            .find(|r| {
                r["program"] == p
                    && r["method"] == m
                    && r["sizes"].as_object().unwrap().values().next().unwrap() == first
            })
            .unwrap_or_else(|| panic!("no {p} {first} {m} record"))
            .clone()
    };
    let close =
        |v: &serde_json::Value, want: f64| (v.as_f64().unwrap_or(f64::NAN) - want).abs() < 1e-9;
    let gdef = rec("gemm", 1000, "default");
    assert!(close(&gdef["whole_run_ms"], 100.0), "{gdef}");
    assert!(close(&gdef["whole_run_ratio"], 0.8), "{gdef}");
    assert_eq!(gdef["drifts"], true, "the case drifts (klaraptor's run)");
    let gk_ = rec("gemm", 1000, "klaraptor");
    assert!(
        close(&gk_["whole_run_ratio"], 1.0) && close(&gk_["drift"], 0.5),
        "{gk_}"
    );
    assert!(
        gk_["how"].as_str().unwrap().contains("wholerun/model"),
        "{gk_}"
    );
    let gst = rec("gemm", 1000, "settled");
    assert!(close(&gst["whole_run_ms"], 90.0), "{gst}");
    assert!(gst["how"]
        .as_str()
        .unwrap()
        .contains("wholerun/f1, KLARAPTOR_FORCE"));
    // profiled_best has a whole-run time where its shape is one of those measured.
    let gpb = rec("gemm", 1000, "profiled_best");
    let pb = gpb["block"].as_array().unwrap();
    let pb: Vec<u32> = pb.iter().map(|v| v.as_u64().unwrap() as u32).collect();
    assert_eq!(
        gpb["whole_run_ms"].is_null(),
        ![gd, gk, gs].iter().any(|b| b[..] == pb[..]),
        "{gpb}"
    );
    // mvt at 5000: default measured alone (ratio 1), klaraptor's run mixed shapes.
    let mdef = rec("mvt", 5000, "default");
    assert!(close(&mdef["whole_run_ratio"], 1.0), "{mdef}");
    assert_eq!(mdef["drifts"], false);
    let mk_ = rec("mvt", 5000, "klaraptor");
    assert!(mk_["whole_run_ms"].is_null(), "{mk_}");
    assert!(mk_["how"].as_str().unwrap().contains("and others"), "{mk_}");
    // The jobs without files: null.
    let other = rec("gemm", 2048, "default");
    assert!(other["whole_run_ms"].is_null() && other["drifts"].is_null());

    let sum: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&w.summary_json).unwrap()).unwrap();
    let by = |m: &str| sum.iter().find(|x| x["method"] == m).unwrap().clone();
    assert_eq!(by("default")["whole_run_cases"], 2);
    assert!(close(&by("default")["whole_run_geomean"], 0.8f64.sqrt()));
    assert_eq!(by("default")["drifting"], 1);
    assert_eq!(by("klaraptor")["whole_run_cases"], 1);

    let md = std::fs::read_to_string(&w.markdown).unwrap();
    assert!(!md.contains("No whole-run measurement"), "{md}");
    for needle in [
        "### Per launch and whole run",
        "Whole-run files in 2 of 4 choice jobs",
        &format!(
            "| all | default | 4 | {:.3} | 2 | {:.3} | 0.800 | 1 |",
            study::stats(&st.ratios(Method::Default)).unwrap().geomean,
            0.8f64.sqrt()
        ),
        "| test | klaraptor |",
        "| tuning | default |",
        "1 of the 2 cases with a whole-run measurement drift",
    ] {
        assert!(md.contains(needle), "the report lacks {needle:?}:\n{md}");
    }
}

/// The halves table gives the model's median Spearman ρ per half beside klaraptor's geometric
/// mean (issue 38), from the cases of that half only.
#[test]
fn halves_give_the_median_spearman() {
    let f = fixture();
    let st = Study::load(&f.paths, &f.sizes).unwrap();
    let w = klaraptor_accuracy::report(&f.paths, &f.sizes, &f.out, None, &["gemm".into()], None)
        .unwrap();
    let md = std::fs::read_to_string(&w.markdown).unwrap();
    assert!(md.contains("| cases < 0.80 | median Spearman ρ |"), "{md}");
    let mut rows = 0;
    for half in ["tuning", "test"] {
        let mut v: Vec<f64> = st
            .cases
            .iter()
            .filter(|c| st.split.of(&c.program).map(|(_, h)| h) == Some(half))
            .filter_map(|c| c.spearman)
            .collect();
        if v.is_empty() {
            continue;
        }
        v.sort_by(|a, b| a.total_cmp(b));
        let cell = format!("| {:.2} ({} cases) |", v[v.len() / 2], v.len());
        let row = md
            .lines()
            .find(|l| l.starts_with(&format!("| {half} | klaraptor | ")) && l.ends_with(&cell))
            .unwrap_or_else(|| panic!("no {half} klaraptor row ending in {cell}:\n{md}"));
        assert!(row.matches('|').count() == 8, "{row}");
        rows += 1;
    }
    assert!(rows > 0, "the fixture has no case with a half and a ρ");
}

/// The isolated whole runs (device.sh WHOLE_RUN_ISOLATE=1; CONSTRUCTED times) fill the
/// records' whole_run_iso_* and settled's whole_run_isolated / whole_run_accept, the
/// summary's acceptance counts and the report's acceptance section, which says which figure
/// each case took: gemm at 1000³ misses 1.03 × min(own, model) all at once (90 against 80 ms)
/// and meets it isolated (82 against 80 ms); the reference runs' line of another kernel does
/// not count for gemm.
#[test]
fn isolated_whole_runs_fill_the_records() {
    let f = fixture();
    let st = Study::load(&f.paths, &f.sizes).unwrap();
    let g = st
        .cases
        .iter()
        .find(|c| c.job == "gemm/x1")
        .unwrap()
        .clone();
    let block = |m: Method| g.picks[&m].block.unwrap();
    let (gd, gk, gs) = (
        block(Method::Default),
        block(Method::Klaraptor),
        block(Method::Settled),
    );
    let line = |t, b| launch_times_line(&g.mangled, &g.kernel, &g.sizes, t, b, 1);
    let shape = |b: [u32; 3]| format!("{}x{}x{}", b[0], b[1], b[2]);
    let job = f.paths.device.join("choice/gemm/x1");
    write(
        &job.join("wholerun/default.times.jsonl"),
        line((10, 100.0, 10.0, 10.0), gd),
    );
    write(
        &job.join("wholerun/model.times.jsonl"),
        line((10, 80.0, 8.0, 8.0), gk),
    );
    write(
        &job.join("wholerun/f1.times.jsonl"),
        line((10, 90.0, 9.0, 9.0), gs),
    );
    // A second kernel of the program, `tail`, isolated too: its runs hold gemm at settled's
    // shape in another neighbourhood (120 ms), which must not count for gemm.
    let iso = job.join("isolated");
    write(
        &iso.join("plan.tsv"),
        format!(
            "# kernel\tstem\tkeys\town\tmodel\tsettled\tstatus\tnote\n\
             gemm\tiso-gemm\t1\t{}\t{}\t{}\tisolated\t\n\
             tail\tiso-tail\t1\t256x1x1\t64x1x1\t128x1x1\tisolated\t\n",
            shape(gd),
            shape(gk),
            shape(gs)
        ),
    );
    let other = launch_times_line(
        "_Z4tailPf",
        "tail",
        &[1000],
        (10, 5.0, 0.5, 0.5),
        [128, 1, 1],
        1,
    );
    write(
        &iso.join("ref.times.jsonl"),
        line((10, 82.0, 8.2, 8.2), gs) + &other,
    );
    write(
        &iso.join("iso-gemm-model.times.jsonl"),
        line((10, 80.0, 8.0, 8.0), gk) + &other,
    );
    write(
        &iso.join("iso-gemm-own.times.jsonl"),
        line((10, 101.0, 10.1, 10.1), gd) + &other,
    );
    write(
        &iso.join("iso-tail-own.times.jsonl"),
        line((10, 120.0, 12.0, 12.0), gs)
            + &launch_times_line(
                "_Z4tailPf",
                "tail",
                &[1000],
                (10, 6.0, 0.6, 0.6),
                [256, 1, 1],
                1,
            ),
    );

    let w = klaraptor_accuracy::report(&f.paths, &f.sizes, &f.out, None, &["gemm".into()], None)
        .unwrap();
    let recs: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&w.json).unwrap()).unwrap();
    let rec = |m: &str| {
        recs.iter()
            .find(|r| r["job"] == "gemm/x1" && r["method"] == m)
            .unwrap()
            .clone()
    };
    let close =
        |v: &serde_json::Value, want: f64| (v.as_f64().unwrap_or(f64::NAN) - want).abs() < 1e-9;
    let s = rec("settled");
    assert!(close(&s["whole_run_ms"], 90.0), "{s}");
    assert!(close(&s["whole_run_iso_ms"], 82.0), "{s}");
    assert!(close(&s["whole_run_iso_launch_ms"], 8.2), "{s}");
    assert_eq!(s["whole_run_iso_runs"], 1);
    assert!(close(&s["whole_run_vs_min"], 9.0 / 8.0), "{s}");
    assert!(close(&s["whole_run_isolated"], 8.2 / 8.0), "{s}");
    assert!(close(&s["whole_run_accept"], 8.2 / 8.0), "{s}");
    assert_eq!(s["whole_run_accept_from"], "isolated");
    assert_eq!(s["isolation"], "isolated");
    assert!(close(&rec("default")["whole_run_iso_ms"], 101.0));
    assert!(close(&rec("klaraptor")["whole_run_iso_ms"], 80.0));
    // settled-only fields are absent elsewhere
    assert!(rec("default").get("whole_run_isolated").is_none());
    // a job without isolated runs: null figures, the all-at-once source where there is one
    let other_job = recs
        .iter()
        .find(|r| r["job"] == "gemm/x2" && r["method"] == "settled")
        .unwrap();
    assert!(other_job["whole_run_isolated"].is_null() && other_job["isolation"].is_null());

    let sum: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&w.summary_json).unwrap()).unwrap();
    let settled = sum.iter().find(|x| x["method"] == "settled").unwrap();
    assert_eq!(settled["whole_run_accept_cases"], 1, "{settled}");
    assert_eq!(settled["whole_run_accept_within"], 1);
    assert_eq!(settled["whole_run_accept_isolated"], 1);
    assert_eq!(settled["whole_run_accept_alone"], 0);
    assert!(sum
        .iter()
        .find(|x| x["method"] == "default")
        .unwrap()
        .get("whole_run_accept_cases")
        .is_none());

    let md = std::fs::read_to_string(&w.markdown).unwrap();
    for needle in [
        "#### Settled against min(own, model), per kernel",
        "Isolation plans in 1 of 4 choice jobs",
        "settled ≤ 1.03 × min(own, model): **1 of 1 cases**; the figure used: isolated runs 1, \
         all-at-once runs with the kernel alone changing 0, all-at-once runs with other kernels \
         changing too 0.",
        "| gemm | gemm | NI×NJ×NK = 1000×1000×1000 | 1.125 | 1.025 | isolated | yes |",
    ] {
        assert!(md.contains(needle), "the report lacks {needle:?}:\n{md}");
    }
}

/// Names the program's own blocks (issue 38's `Entry::program`) in gemm's entry of the
/// fixture's study database, as a profile captured since then does (CONSTRUCTED blocks).
fn name_gemm_program_blocks(f: &Fixture, blocks: &[(Vec<i64>, [u32; 3])]) {
    let db = ProfileDb::open(f.paths.profile_db.as_ref().unwrap()).unwrap();
    let g = &f.gemm;
    let mut e = db
        .get(&g.mangled, &g.provenance.code_hash, &g.device.name)
        .unwrap()
        .expect("the fixture's gemm entry");
    e.program = blocks
        .iter()
        .map(|(sizes, block)| ProgramBlock {
            sizes: sizes.clone(),
            block: *block,
        })
        .collect();
    db.put(&e).unwrap();
}

/// program_profiled (issue 38): where the study database's entry names the program's own
/// blocks, the one at the profiled size nearest to the case's it names one at, timed by the
/// sweep; in the records, the summary, the summary and halves tables, the per-kernel table.
/// The entry names 16×16 at 64³ and 64×4 at 128³ (not the program's 32×8 at the case's
/// size: the method is the profile's evidence, not the launch): both gemm cases are nearest
/// 128³ among those; mvt has no database entry, so no pick.
#[test]
fn program_profiled_where_the_entry_names_the_programs_blocks() {
    let f = fixture();
    let (at, block) = (vec![128i64, 128, 128], [64u32, 4, 1]);
    name_gemm_program_blocks(&f, &[(vec![64, 64, 64], [16, 16, 1]), (at.clone(), block)]);
    assert!(rational::candidates(2).contains(&block));
    let st = Study::load(&f.paths, &f.sizes).unwrap();
    for sz in [vec![1000i64, 1000, 1000], vec![2048, 2048, 256]] {
        let c = st
            .cases
            .iter()
            .find(|c| c.kernel == "gemm" && c.sizes == sz)
            .unwrap();
        let (_, tbest) = argmin(&sz, &rational::candidates(2));
        let p = &c.picks[&Method::ProgramProfiled];
        assert_eq!(p.block, Some(block), "{}", p.how);
        assert_eq!(p.profiled_at.as_deref(), Some(&at[..]));
        assert_eq!(p.profile_time_ms, Some(measured_ms(&at, block)));
        assert_eq!(p.ratio, Some(tbest / measured_ms(&sz, block)));
        assert!(p.how.contains("the program's own block"), "{}", p.how);
        // The other methods are as without the entry's blocks.
        assert_eq!(c.picks[&Method::Default].block, Some([32, 8, 1]));
    }
    for c in st.cases.iter().filter(|c| c.kernel == "mvt_x1") {
        assert!(!c.picks.contains_key(&Method::ProgramProfiled));
    }

    let w = klaraptor_accuracy::report(&f.paths, &f.sizes, &f.out, None, &["gemm".into()], None)
        .unwrap();
    let recs: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&w.json).unwrap()).unwrap();
    assert_eq!(recs.len(), 26, "24 as before and 2 of program_profiled");
    let pp: Vec<&serde_json::Value> = recs
        .iter()
        .filter(|r| r["method"] == "program_profiled")
        .collect();
    assert_eq!(pp.len(), 2);
    for r in &pp {
        assert_eq!(r["program"], "gemm");
        assert_eq!(r["block"], serde_json::json!([64, 4, 1]), "{r}");
        assert_eq!(r["profiled_at"]["NI"], 128, "{r}");
        assert!(r["ratio"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["profile_time_ms"].as_f64().unwrap() > 0.0, "{r}");
    }
    let sum: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&w.summary_json).unwrap()).unwrap();
    let methods: Vec<&str> = sum.iter().map(|x| x["method"].as_str().unwrap()).collect();
    assert_eq!(
        methods,
        [
            "klaraptor",
            "settled",
            "profiled_best",
            "program_profiled",
            "default",
            "occupancy"
        ]
    );
    assert_eq!(sum[3]["cases"], 2);

    let md = std::fs::read_to_string(&w.markdown).unwrap();
    let (_, t1) = argmin(&[1000, 1000, 1000], &rational::candidates(2));
    let r1 = t1 / measured_ms(&[1000, 1000, 1000], block);
    for needle in [
        "| program_profiled | 2 |".to_string(),
        "| test | program_profiled | 2 |".to_string(),
        "| optimum | klaraptor | settled | profiled_best | program_profiled | default | \
         occupancy | ρ |"
            .to_string(),
        "| --- | --- | --- | ---: | --- | --- | --- | --- | --- | --- | --- | ---: |".to_string(),
        format!("| 64×4 {r1:.2} |"),
        "2 of 4 cases have a profile that names the program's blocks, 0 of them without a ratio"
            .to_string(),
        "- **program_profiled**".to_string(),
    ] {
        assert!(md.contains(&needle), "the report lacks {needle:?}:\n{md}");
    }
    // Each per-kernel row has one cell more than before, for every case.
    for l in md
        .lines()
        .filter(|l| l.starts_with("| gemm | gemm |") || l.starts_with("| mvt | mvt_x1 |"))
    {
        if l.contains("/66 |") || l.contains("/37 |") {
            assert_eq!(l.matches('|').count(), 13, "{l}");
        }
    }
}

/// An entry without the program's blocks (captured before issue 38; the fixture's) gives no
/// program_profiled at all: no pick, no record, no column, row or sentence, the tables as
/// before.
#[test]
fn without_the_programs_blocks_nothing_changes() {
    let f = fixture();
    let st = Study::load(&f.paths, &f.sizes).unwrap();
    assert!(st
        .cases
        .iter()
        .all(|c| !c.picks.contains_key(&Method::ProgramProfiled)));
    assert_eq!(Method::compared(&st.cases), Method::COMPARED);
    let w = klaraptor_accuracy::report(&f.paths, &f.sizes, &f.out, None, &["gemm".into()], None)
        .unwrap();
    let recs = std::fs::read_to_string(&w.json).unwrap();
    let md = std::fs::read_to_string(&w.markdown).unwrap();
    let sum = std::fs::read_to_string(&w.summary_json).unwrap();
    for text in [&recs, &md, &sum] {
        assert!(!text.contains("program_profiled"), "{text}");
    }
    assert!(md.contains(
        "| optimum | klaraptor | settled | profiled_best | default | occupancy | ρ |\n\
         | --- | --- | --- | ---: | --- | --- | --- | --- | --- | --- | ---: |\n"
    ));
    for l in md
        .lines()
        .filter(|l| l.starts_with("| gemm | gemm |") && l.contains("/66 |"))
    {
        assert_eq!(l.matches('|').count(), 12, "{l}");
    }
}

/// klaraptor where the link's decision keeps the program's own launch (ChosenBy::Program,
/// issue 38; the manifest says so): the block the run logged (source=program) at 1000³, the
/// block the KLARAPTOR_DISABLE=1 run read back where the run logged no decision (2048² × 256),
/// never the model's first-ranked shape; mvt (decided by the model) as before.
#[test]
fn klaraptor_is_the_programs_own_shape_when_the_program_chooses() {
    let f = fixture();
    let mut g = f.gemm.clone();
    let mut d: klaraptor_program::decide::Decision = g.decision.clone().unwrap_or_else(|| {
        serde_json::from_value(serde_json::json!({
            "chosen_by": "program",
            "why": "constructed: the program's own shape beat the model's on held-out sizes",
            "held_out": [],
        }))
        .unwrap()
    });
    d.chosen_by = klaraptor_program::decide::ChosenBy::Program;
    g.decision = Some(d);
    assert!(g.program_chooses());
    g.write(&f.paths.study.join("gemm/models")).unwrap();
    let choice = f.paths.device.join("choice/gemm");
    // The runtime keeps the program's launch: a source=program line at 1000³, none at
    // 2048² × 256; no refinement; the harness times the program's shape.
    write(
        &choice.join("x1/model.log"),
        "klaraptor: gemm NI=1000 NJ=1000 NK=1000 block=32x8x1 grid=32x125x1 source=program \
         device=0:NVIDIA H200\n",
    );
    write(&choice.join("x2/model.log"), "");
    for (stem, dims) in [("x1", "1000x1000x1000"), ("x2", "2048x2048x256")] {
        let sz: Vec<i64> = dims.split('x').map(|v| v.parse().unwrap()).collect();
        write(
            &choice.join(stem).join("model.out"),
            format!(
                "KL_TIME gemm {dims} median_ms={:.6} block=32x8x1 launches=1\n",
                measured_ms(&sz, [32, 8, 1])
            ),
        );
    }
    let st = Study::load(&f.paths, &f.sizes).unwrap();
    for (sz, logged) in [
        (vec![1000i64, 1000, 1000], true),
        (vec![2048, 2048, 256], false),
    ] {
        let c = st
            .cases
            .iter()
            .find(|c| c.kernel == "gemm" && c.sizes == sz)
            .unwrap();
        let model_first = g.model_rank(&sz).unwrap()[0].block;
        assert_ne!(
            model_first,
            [32, 8, 1],
            "the test would not tell them apart"
        );
        let k = &c.picks[&Method::Klaraptor];
        assert_eq!(k.block, Some([32, 8, 1]), "{}", k.how);
        assert_eq!(k.ratio, c.picks[&Method::Default].ratio);
        assert!(
            k.how.contains("keeps the program's own launch"),
            "{}",
            k.how
        );
        if logged {
            assert!(k.how.contains("source=program"), "{}", k.how);
        } else {
            assert!(k.how.contains("logged no decision"), "{}", k.how);
        }
        assert!(k.flag.is_none(), "{:?}", k.flag);
        assert!(k.harness_ms.is_some());
    }
    let m = st
        .cases
        .iter()
        .find(|c| c.kernel == "mvt_x1" && c.sizes == [5000])
        .unwrap();
    assert_eq!(
        m.picks[&Method::Klaraptor].block,
        Some(f.mvt.rank(&[5000]).unwrap()[0].block)
    );
    let w = klaraptor_accuracy::report(&f.paths, &f.sizes, &f.out, None, &["gemm".into()], None)
        .unwrap();
    let md = std::fs::read_to_string(&w.markdown).unwrap();
    assert!(
        md.contains("keeps the program's launch (chosen by: program's own; here gemm (gemm))"),
        "{md}"
    );
    let recs: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&w.json).unwrap()).unwrap();
    for r in recs
        .iter()
        .filter(|r| r["program"] == "gemm" && r["method"] == "klaraptor")
    {
        assert_eq!(r["block"], serde_json::json!([32, 8, 1]), "{r}");
    }
}
