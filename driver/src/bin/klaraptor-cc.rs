//! `klaraptor-cc`: use it wherever you would use `nvcc` (`make NVCC=klaraptor-cc`).

fn main() {
    let code = klaraptor::compile::main_with(std::env::args_os().skip(1).collect());
    klaraptor_profiler::interrupt::exit(code);
}
