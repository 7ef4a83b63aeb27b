//! Front-end inspection of CUDA sources with libclang.
//!
//! `klaraptor-cc` lets users annotate kernels with pragmas; before acting on an
//! annotation it must check it against what the source really declares. This
//! module parses one CUDA translation unit with libclang (loaded at run time
//! through `clang-sys`, LLVM 19 on Debian 12) and reports, for a list of
//! function names, where each function is declared, whether it is a
//! `__global__` kernel or a template, its parameters (names, canonical types,
//! whether each one is an integer), and its Itanium mangled name(s): for a
//! template, one per specialization the translation unit instantiates.
//! Errors libclang reports while parsing are handed back as text.
//!
//! It is **not** a compiler: it never generates code, never runs `nvcc` or
//! `clang`, does not read pragmas (the driver does that), and does not rewrite
//! sources. It parses the *host* side of the CUDA compilation only
//! (`--cuda-host-only`), which sees every kernel declaration and every `<<<>>>`
//! launch; code guarded by `#ifdef __CUDA_ARCH__` is invisible to it.
//!
//! # Loading libclang
//!
//! libclang is looked for, in order: [`ClangConfig::libclang_path`] (a file or
//! a directory); the `LIBCLANG_PATH` environment variable (a file or a
//! directory); the Debian LLVM 19 locations in [`DEBIAN_LIBCLANG`]; and last
//! `clang-sys`'s own search of the usual system directories. The library is
//! loaded once per process, on first use, and shared by all threads
//! (`clang-sys` keeps the loaded library in a thread-local slot; [`inspect`]
//! installs the shared library in the calling thread's slot for the duration
//! of the call and restores what was there before). To make `clang-sys` open
//! one particular file, the first load sets `LIBCLANG_PATH` for the process
//! while it runs and restores it afterwards; it happens under a lock, once.

// libclang's constants (`CXCursor_FunctionDecl`, ...) are matched on by name.
#![allow(non_upper_case_globals)]

use std::collections::HashMap;
use std::ffi::{CStr, CString, OsStr};
use std::os::raw::{c_char, c_int, c_uint};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::{Arc, Mutex};

use clang_sys::*;

pub use klaraptor_spec::source::{
    name_matches, FunctionInfo, Inclusion, KernelParam, SkippedLines, SourceInfo, Specialization,
};

/// Where Debian's `libclang-19-dev` / `libclang1-19` put libclang, in the order
/// they are tried when neither [`ClangConfig::libclang_path`] nor
/// `LIBCLANG_PATH` says where it is. Loading it through the `llvm-19`
/// directory (not `/usr/lib/x86_64-linux-gnu`) lets libclang find its own
/// resource directory (the builtin and CUDA wrapper headers).
pub const DEBIAN_LIBCLANG: &[&str] = &[
    "/usr/lib/llvm-19/lib/libclang-19.so.1",
    "/usr/lib/llvm-19/lib/libclang.so.1",
    "/usr/lib/llvm-19/lib/libclang.so",
];

/// How to run the front end: where CUDA is, and the user's own flags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClangConfig {
    /// The CUDA toolkit root (the directory holding `include/cuda_runtime.h`
    /// and `bin/nvcc`), passed as `--cuda-path`.
    pub cuda_path: PathBuf,
    /// A directory of (empty) stub headers that clang's CUDA wrappers include
    /// but recent toolkits no longer ship (`texture_fetch_functions.h`,
    /// `curand_mtgp32_kernel.h`); added with `-isystem`.
    pub stub_include: Option<PathBuf>,
    /// The user's clang-compatible flags, forwarded as they are, after the
    /// module's own: `-I`, `-D`, `-U`, `-isystem`, `-include`, `-std=`, ...
    /// (the driver translates nvcc spellings before calling [`inspect`]).
    pub args: Vec<String>,
    /// An explicit libclang to load: the shared library itself, or a directory
    /// holding it. Only the first library loaded in a process is used; asking
    /// for a different one later is an error ([`ClangError::LibclangConflict`]).
    pub libclang_path: Option<PathBuf>,
}

impl ClangConfig {
    /// A configuration for the toolkit at `cuda_path`, with no stubs, no user
    /// flags, and the default libclang search.
    pub fn new(cuda_path: impl Into<PathBuf>) -> Self {
        ClangConfig {
            cuda_path: cuda_path.into(),
            ..ClangConfig::default()
        }
    }

    /// The directories in which `#include "…"` looks after the including
    /// file's own, in search order: the `-iquote`, then the `-I` directories of
    /// [`ClangConfig::args`].
    pub fn quote_include_dirs(&self) -> Vec<PathBuf> {
        klaraptor_spec::includes::quote_search_dirs(&self.args)
    }

    /// The command-line arguments [`inspect`] gives libclang (besides the
    /// source file itself, and besides a `-resource-dir` it may add when
    /// libclang cannot find its own headers).
    pub fn clang_args(&self) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "-x".into(),
            "cuda".into(),
            "--cuda-host-only".into(),
            format!("--cuda-path={}", self.cuda_path.display()),
            "-nocudalib".into(),
            "-Wno-unknown-cuda-version".into(),
        ];
        if let Some(stubs) = &self.stub_include {
            args.push("-isystem".into());
            args.push(stubs.display().to_string());
        }
        // CUDA 13 keeps CCCL (libcu++, CUB, Thrust; cooperative_groups.h needs it) in
        // include/cccl, which nvcc adds as a system directory (nvcc.profile): so does the
        // front end.
        let cccl = self.cuda_path.join("include/cccl");
        if cccl.is_dir() {
            args.push("-isystem".into());
            args.push(cccl.display().to_string());
        }
        args.extend(self.args.iter().cloned());
        args
    }
}

/// Why [`inspect`] could not give an answer.
#[derive(Debug, thiserror::Error)]
pub enum ClangError {
    /// No usable libclang shared library.
    #[error(
        "could not load libclang: {reason}\n  looked at: {looked}\n  \
         run scripts/setup (it installs libclang-19-dev), or set LIBCLANG_PATH \
         to libclang's shared library or the directory holding it"
    )]
    LibclangNotFound {
        /// Where it looked.
        looked: String,
        /// What went wrong.
        reason: String,
    },
    /// A different libclang than the one asked for is already in use.
    #[error(
        "libclang is already loaded from {loaded} in this process; cannot switch to {requested}"
    )]
    LibclangConflict {
        /// The library in use.
        loaded: PathBuf,
        /// The library asked for.
        requested: PathBuf,
    },
    /// The source file does not exist or is not a file.
    #[error("no such source file: {}", .0.display())]
    SourceNotFound(PathBuf),
    /// A path or argument contains a NUL byte and cannot be given to libclang.
    #[error("argument contains a NUL byte: {0:?}")]
    InvalidArgument(String),
    /// libclang produced no translation unit at all (as opposed to one with
    /// errors, which is reported through [`SourceInfo::diagnostics`]); this is
    /// typically an argument the clang driver rejects.
    #[error("libclang could not parse {} ({code}); clang arguments: {args}", file.display())]
    Parse {
        /// The source file.
        file: PathBuf,
        /// libclang's error code, by name.
        code: &'static str,
        /// The arguments given to libclang, space-separated.
        args: String,
    },
}

// ---------------------------------------------------------------------------
// Loading libclang
// ---------------------------------------------------------------------------

/// A loaded libclang, shared between threads.
struct Libclang {
    library: Arc<SharedLibrary>,
    /// The explicit path it was asked for, if any.
    requested: Option<PathBuf>,
    /// A resource directory to pass with `-resource-dir`, when libclang's own
    /// guess (derived from the path it was loaded from) does not exist.
    resource_dir: Option<PathBuf>,
}

static LIBCLANG: Mutex<Option<Arc<Libclang>>> = Mutex::new(None);

/// The process's libclang, loading it on first use.
fn libclang(requested: Option<&Path>) -> Result<Arc<Libclang>, ClangError> {
    let mut slot = LIBCLANG.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(lib) = slot.as_ref() {
        return match requested {
            Some(req) if lib.requested.as_deref() != Some(req) => {
                Err(ClangError::LibclangConflict {
                    loaded: lib.library.path().to_path_buf(),
                    requested: req.to_path_buf(),
                })
            }
            _ => Ok(Arc::clone(lib)),
        };
    }
    let lib = Arc::new(load_libclang(requested)?);
    *slot = Some(Arc::clone(&lib));
    Ok(lib)
}

fn load_libclang(requested: Option<&Path>) -> Result<Libclang, ClangError> {
    const VAR: &str = "LIBCLANG_PATH";
    let from_env = std::env::var_os(VAR).filter(|v| !v.is_empty());
    // What to point clang-sys at, and a description of where we looked.
    let (target, looked): (Option<PathBuf>, String) = if let Some(req) = requested {
        (
            Some(req.to_path_buf()),
            format!("{} (configured)", req.display()),
        )
    } else if let Some(env) = &from_env {
        (None, format!("{} (from {VAR})", Path::new(env).display()))
    } else if let Some(found) = DEBIAN_LIBCLANG.iter().map(Path::new).find(|p| p.exists()) {
        (Some(found.to_path_buf()), found.display().to_string())
    } else {
        (
            None,
            format!(
                "{}, then clang-sys's search of /usr/lib*, /usr/local/lib* and `llvm-config --prefix`",
                DEBIAN_LIBCLANG.join(", ")
            ),
        )
    };

    let loaded = match &target {
        Some(path) => {
            let saved = from_env.clone();
            std::env::set_var(VAR, path);
            let r = clang_sys::load_manually();
            match saved {
                Some(v) => std::env::set_var(VAR, v),
                None => std::env::remove_var(VAR),
            }
            r
        }
        None => clang_sys::load_manually(),
    };
    let library = Arc::new(loaded.map_err(|reason| ClangError::LibclangNotFound {
        looked: looked.clone(),
        reason,
    })?);

    // Everything used here exists since libclang 7.
    if library
        .version()
        .is_none_or(|v| v < clang_sys::Version::V7_0)
    {
        return Err(ClangError::LibclangNotFound {
            looked,
            reason: format!(
                "{} is too old (libclang 7 or later is needed; LLVM 19 is expected)",
                library.path().display()
            ),
        });
    }
    let resource_dir = {
        let _thread = ThreadLibrary::install(Arc::clone(&library));
        // SAFETY: the library is installed on this thread; the call has no
        // preconditions.
        let version = unsafe { cx_string(clang_getClangVersion()) };
        resource_dir_for(library.path(), &version)
    };
    Ok(Libclang {
        library,
        requested: requested.map(Path::to_path_buf),
        resource_dir,
    })
}

/// libclang finds its builtin headers in `<dir of the .so>/../lib/clang/<major>`
/// (for the path it was loaded through). If that is missing, look for the
/// directory next to the library's real location or in Debian's LLVM prefix.
fn resource_dir_for(lib: &Path, version: &str) -> Option<PathBuf> {
    let major: String = version
        .split("version ")
        .nth(1)?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    if major.is_empty() {
        return None;
    }
    let own_guess = lib.parent()?.parent()?.join("lib/clang").join(&major);
    if own_guess.join("include").is_dir() {
        return None;
    }
    let mut candidates = Vec::new();
    if let Ok(real) = std::fs::canonicalize(lib) {
        if let Some(dir) = real.parent() {
            candidates.push(dir.join("clang").join(&major));
        }
    }
    candidates.push(PathBuf::from(format!(
        "/usr/lib/llvm-{major}/lib/clang/{major}"
    )));
    candidates.into_iter().find(|c| c.join("include").is_dir())
}

/// Installs a library in this thread's clang-sys slot; puts back the previous
/// one when dropped.
struct ThreadLibrary {
    previous: Option<Arc<SharedLibrary>>,
}

impl ThreadLibrary {
    fn install(library: Arc<SharedLibrary>) -> Self {
        ThreadLibrary {
            previous: clang_sys::set_library(Some(library)),
        }
    }
}

impl Drop for ThreadLibrary {
    fn drop(&mut self) {
        clang_sys::set_library(self.previous.take());
    }
}

// ---------------------------------------------------------------------------
// Small libclang helpers
// ---------------------------------------------------------------------------

/// Takes ownership of a `CXString` and returns its text.
///
/// # Safety
/// libclang must be loaded on this thread and `s` must be a live `CXString`.
unsafe fn cx_string(s: CXString) -> String {
    let p = clang_getCString(s);
    let text = if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    };
    clang_disposeString(s);
    text
}

struct IndexGuard(CXIndex);
impl Drop for IndexGuard {
    fn drop(&mut self) {
        // SAFETY: created by clang_createIndex, disposed once, after the TU.
        unsafe { clang_disposeIndex(self.0) }
    }
}

struct TuGuard(CXTranslationUnit);
impl Drop for TuGuard {
    fn drop(&mut self) {
        // SAFETY: created by clang_parseTranslationUnit2, disposed once.
        unsafe { clang_disposeTranslationUnit(self.0) }
    }
}

/// Calls `f` on each child of `cursor`; `f` says whether to recurse.
///
/// # Safety
/// libclang must be loaded on this thread and `cursor` must belong to a live
/// translation unit. `f` must not panic (the panic would cross C frames).
unsafe fn visit<F>(cursor: CXCursor, mut f: F)
where
    F: FnMut(CXCursor, CXCursor) -> CXChildVisitResult,
{
    extern "C" fn trampoline<F>(
        c: CXCursor,
        parent: CXCursor,
        data: CXClientData,
    ) -> CXChildVisitResult
    where
        F: FnMut(CXCursor, CXCursor) -> CXChildVisitResult,
    {
        // SAFETY: `data` is the `&mut F` passed below, alive for the visit.
        let f = unsafe { &mut *(data as *mut F) };
        f(c, parent)
    }
    clang_visitChildren(cursor, trampoline::<F>, &mut f as *mut F as CXClientData);
}

/// The direct children of `cursor`.
///
/// # Safety
/// As for [`visit`].
unsafe fn children(cursor: CXCursor) -> Vec<CXCursor> {
    let mut out = Vec::new();
    visit(cursor, |c, _| {
        out.push(c);
        CXChildVisit_Continue
    });
    out
}

/// File, line and column of a location after macro expansion.
///
/// # Safety
/// libclang must be loaded on this thread; `loc` from a live TU.
unsafe fn expansion_location(loc: CXSourceLocation) -> (Option<CXFile>, u32, u32) {
    let mut file: CXFile = ptr::null_mut();
    let (mut line, mut col, mut offset): (c_uint, c_uint, c_uint) = (0, 0, 0);
    clang_getExpansionLocation(loc, &mut file, &mut line, &mut col, &mut offset);
    ((!file.is_null()).then_some(file), line, col)
}

/// The real path of a file when libclang has it, else its name as spelled.
///
/// # Safety
/// libclang must be loaded on this thread; `file` from a live TU.
unsafe fn file_path(file: CXFile) -> PathBuf {
    let real = cx_string(clang_File_tryGetRealPathName(file));
    if !real.is_empty() {
        return PathBuf::from(real);
    }
    let name = PathBuf::from(cx_string(clang_getFileName(file)));
    std::fs::canonicalize(&name).unwrap_or(name)
}

// ---------------------------------------------------------------------------
// Inspection
// ---------------------------------------------------------------------------

/// Parses `source` as CUDA (host side) and describes the functions it declares
/// under any of `names` (plain names such as `mm`, or qualified ones such as
/// `lin::detail::scale`).
///
/// A source with errors still gives an answer: whatever clang could make of
/// it, with the errors in [`SourceInfo::diagnostics`]. An `Err` means no
/// answer at all: libclang missing, no such file, or arguments the clang
/// driver refuses.
///
/// Safe to call from several threads at once. The first call in a process
/// loads libclang.
pub fn inspect(source: &Path, names: &[&str], cfg: &ClangConfig) -> Result<SourceInfo, ClangError> {
    // SAFETY: `parse` calls the closure with libclang installed on this thread and the
    // translation unit live.
    parse(source, cfg, |tu| unsafe { read_source_info(tu, names) })
}

/// Parses `source` as [`inspect`] does and hands the translation unit to `read`.
fn parse<T>(
    source: &Path,
    cfg: &ClangConfig,
    read: impl FnOnce(CXTranslationUnit) -> T,
) -> Result<T, ClangError> {
    if !source.is_file() {
        return Err(ClangError::SourceNotFound(source.to_path_buf()));
    }
    let lib = libclang(cfg.libclang_path.as_deref())?;
    let mut args = Vec::new();
    if let Some(dir) = &lib.resource_dir {
        args.push("-resource-dir".to_string());
        args.push(dir.display().to_string());
    }
    args.extend(cfg.clang_args());

    let c_source = c_string(source.as_os_str())?;
    let c_args = args
        .iter()
        .map(|a| c_string(OsStr::new(a)))
        .collect::<Result<Vec<_>, _>>()?;
    let arg_ptrs: Vec<*const c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
    let n_args = c_int::try_from(arg_ptrs.len())
        .map_err(|_| ClangError::InvalidArgument("too many arguments".into()))?;

    let _thread = ThreadLibrary::install(Arc::clone(&lib.library));
    // SAFETY: libclang is installed on this thread for the whole block; every
    // pointer handed to it outlives the call that uses it; the index outlives
    // the translation unit (guards drop in reverse order).
    unsafe {
        // excludeDeclarationsFromPCH = 1: the TU cursor's children are then
        // the top-level declarations the parser produced (see
        // `Collector::run`); displayDiagnostics = 0: they are collected.
        let index = IndexGuard(clang_createIndex(1, 0));
        let mut tu: CXTranslationUnit = ptr::null_mut();
        let code = clang_parseTranslationUnit2(
            index.0,
            c_source.as_ptr(),
            arg_ptrs.as_ptr(),
            n_args,
            ptr::null_mut(),
            0,
            CXTranslationUnit_KeepGoing | CXTranslationUnit_DetailedPreprocessingRecord,
            &mut tu,
        );
        if code != CXError_Success || tu.is_null() {
            return Err(ClangError::Parse {
                file: source.to_path_buf(),
                code: error_name(code),
                args: args.join(" "),
            });
        }
        let tu = TuGuard(tu);
        Ok(read(tu.0))
    }
}

/// What the front end found in a translation unit.
///
/// # Safety
/// libclang loaded on this thread; `tu` live.
unsafe fn read_source_info(tu: CXTranslationUnit, names: &[&str]) -> SourceInfo {
    SourceInfo {
        functions: Collector::new(names).run(tu),
        diagnostics: collect_diagnostics(tu),
        inclusions: collect_inclusions(tu),
        skipped: collect_skipped(tu),
    }
}

/// One `<<<…>>>` launch of a `__global__` function in host code, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSite {
    /// The kernel's name, and with its namespaces.
    pub kernel: String,
    pub qualified_name: String,
    /// Where the kernel is defined (or first declared), and its parameters.
    pub kernel_file: PathBuf,
    pub kernel_line: u32,
    pub params: Vec<KernelParam>,
    /// Where the launch is (after macro expansion), and the function holding it.
    pub file: PathBuf,
    pub line: u32,
    pub col: u32,
    pub caller: String,
    /// The launch's text (`k<<<n / 256, 256>>>(a, b)`), its configuration (grid, block, and
    /// shared memory and stream when given) and its arguments, as written.
    pub text: String,
    pub config: Vec<String>,
    pub args: Vec<String>,
    /// The dimensions the grid and the block are built with: 1 for an integer, the number of
    /// values a `dim3` is constructed from (trailing 1s left out) where the front end can see
    /// its construction (`dim3(16, 16)`, or a variable declared `dim3 b(16, 16)`); `None`
    /// where it cannot (a `dim3` from a function's result, a parameter, a field).
    pub grid_dims: Option<u8>,
    pub block_dims: Option<u8>,
}

/// Every `<<<…>>>` launch of a `__global__` function outside system headers in `source`, in
/// order, and libclang's errors (as [`SourceInfo::diagnostics`]).
pub fn launch_sites(
    source: &Path,
    cfg: &ClangConfig,
) -> Result<(Vec<LaunchSite>, Vec<String>), ClangError> {
    // SAFETY: `parse` calls the closure with libclang installed and the TU live.
    parse(source, cfg, |tu| unsafe {
        let mut out = Vec::new();
        let mut caller = String::new();
        let mut callers: Vec<(CXCursor, String)> = Vec::new();
        visit(clang_getTranslationUnitCursor(tu), |c, parent| {
            if in_system_header(c) {
                return CXChildVisit_Continue;
            }
            match clang_getCursorKind(c) {
                CXCursor_FunctionDecl
                | CXCursor_FunctionTemplate
                | CXCursor_CXXMethod
                | CXCursor_Constructor
                | CXCursor_LambdaExpr => {
                    callers.push((c, cx_string(clang_getCursorSpelling(c))));
                }
                CXCursor_CallExpr => {
                    while let Some((f, name)) = callers.last() {
                        if clang_equalCursors(*f, parent) != 0 || is_within(c, *f) {
                            caller.clone_from(name);
                            break;
                        }
                        callers.pop();
                    }
                    if let Some(site) = launch_site(tu, c, &caller) {
                        out.push(site);
                    }
                }
                _ => {}
            }
            CXChildVisit_Recurse
        });
        (out, collect_diagnostics(tu))
    })
}

/// Whether `c` lies inside the source extent of `outer`.
///
/// # Safety
/// libclang loaded on this thread; both from a live TU.
unsafe fn is_within(c: CXCursor, outer: CXCursor) -> bool {
    let (f, _, _, o) = file_offset(clang_getCursorLocation(c));
    let r = clang_getCursorExtent(outer);
    let (fa, _, _, a) = file_offset(clang_getRangeStart(r));
    let (fb, _, _, b) = file_offset(clang_getRangeEnd(r));
    !f.is_null()
        && clang_File_isEqual(f, fa) != 0
        && clang_File_isEqual(f, fb) != 0
        && a <= o
        && o <= b
}

/// The file, line, column and byte offset of a location (the spelling's file: a launch in
/// a macro gives the macro's definition).
///
/// # Safety
/// libclang loaded on this thread.
unsafe fn file_offset(loc: CXSourceLocation) -> (CXFile, u32, u32, u32) {
    let mut file: CXFile = ptr::null_mut();
    let (mut line, mut col, mut offset): (c_uint, c_uint, c_uint) = (0, 0, 0);
    clang_getExpansionLocation(loc, &mut file, &mut line, &mut col, &mut offset);
    (file, line, col, offset)
}

/// The source text of `c`'s extent, when it lies in one file.
///
/// # Safety
/// libclang loaded on this thread; `c` from the live `tu`.
unsafe fn extent_text(tu: CXTranslationUnit, c: CXCursor) -> Option<String> {
    let r = clang_getCursorExtent(c);
    let (fa, _, _, a) = file_offset(clang_getRangeStart(r));
    let (fb, _, _, b) = file_offset(clang_getRangeEnd(r));
    if fa.is_null() || clang_File_isEqual(fa, fb) == 0 || b < a {
        return None;
    }
    let mut size: usize = 0;
    let contents = clang_getFileContents(tu, fa, &mut size);
    if contents.is_null() || b as usize > size {
        return None;
    }
    let bytes = std::slice::from_raw_parts(contents.add(a as usize).cast::<u8>(), (b - a) as usize);
    Some(String::from_utf8_lossy(bytes).into_owned())
}

/// `c` as a launch: a call of a `__global__` function whose text holds `<<<…>>>`.
///
/// # Safety
/// libclang loaded on this thread; `c` a `CallExpr` of the live `tu`.
unsafe fn launch_site(tu: CXTranslationUnit, c: CXCursor, caller: &str) -> Option<LaunchSite> {
    let callee = clang_getCursorReferenced(c);
    if clang_Cursor_isNull(callee) != 0 {
        return None;
    }
    // A template instance: the template's declaration carries the attribute.
    let template = clang_getSpecializedCursorTemplate(callee);
    let decl = if clang_Cursor_isNull(template) == 0 {
        template
    } else {
        callee
    };
    let definition = clang_getCursorDefinition(decl);
    let decl = if clang_Cursor_isNull(definition) == 0 {
        definition
    } else {
        decl
    };
    if !has_global_attr(decl) && !has_global_attr(clang_getCanonicalCursor(decl)) {
        return None;
    }
    let text = extent_text(tu, c)?;
    let (config, args) = split_launch(&text)?;
    let name = cx_string(clang_getCursorSpelling(decl));
    let (kfile, kline, _) = expansion_location(clang_getCursorLocation(decl));
    let (file, line, col) = expansion_location(clang_getCursorLocation(c));
    let is_template = clang_getCursorKind(decl) == CXCursor_FunctionTemplate;
    // The configuration call (`__cudaPushCallConfiguration(grid, block, …)`) is a child
    // of the launch: its arguments are the grid and block expressions.
    let dims = children(c)
        .into_iter()
        .find(|k| {
            clang_getCursorKind(*k) == CXCursor_CallExpr && clang_Cursor_getNumArguments(*k) >= 2
        })
        .map(|cfg_call| [0, 1].map(|i| dims_of(tu, clang_Cursor_getArgument(cfg_call, i))))
        .unwrap_or([None, None]);
    Some(LaunchSite {
        qualified_name: qualified_name(decl, &name),
        kernel: name,
        kernel_file: kfile.map(|f| file_path(f)).unwrap_or_default(),
        kernel_line: kline,
        params: params(decl, is_template),
        file: file.map(|f| file_path(f)).unwrap_or_default(),
        line,
        col,
        caller: caller.to_string(),
        text,
        config,
        args,
        grid_dims: dims[0],
        block_dims: dims[1],
    })
}

/// The configuration and the arguments of a launch's text (`k<<<g, b>>>(x, n)`), each split
/// at its top-level commas and trimmed.
pub fn split_launch(text: &str) -> Option<(Vec<String>, Vec<String>)> {
    let open = text.find("<<<")?;
    let rest = &text[open + 3..];
    let close = top_level(rest, ">>>")?;
    let config = split_commas(&rest[..close]);
    let after = rest[close + 3..].trim_start();
    let inner = after.strip_prefix('(')?;
    let end = top_level(inner, ")")?;
    let args = split_commas(&inner[..end]);
    Some((config, args))
}

/// The first occurrence of `pat` in `s` outside parentheses, brackets and braces.
fn top_level(s: &str, pat: &str) -> Option<usize> {
    let mut depth = 0i32;
    for (i, ch) in s.char_indices() {
        if depth == 0 && s[i..].starts_with(pat) {
            return Some(i);
        }
        match ch {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            _ => {}
        }
    }
    None
}

fn split_commas(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, ch) in s.char_indices() {
        match ch {
            '(' | '[' | '{' | '<' => depth += 1,
            ')' | ']' | '}' | '>' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[start..i].trim().to_string());
                start = i + 1;
            }
            _ => {}
        }
    }
    let last = s[start..].trim();
    if !last.is_empty() || !out.is_empty() {
        out.push(last.to_string());
    }
    out
}

/// How many dimensions a launch's grid or block expression `e` is built with: 1 for an
/// integer; for a `dim3`, the values it is constructed from (trailing literal 1s left out),
/// read from its text (`dim3(16, 16)`, `dim3{32, 8}`) or from the declaration of the
/// variable it names (`dim3 b(16, 16);`, `dim3 b = dim3(16, 16);`); `None` otherwise.
///
/// # Safety
/// libclang loaded on this thread; `e` from the live `tu`.
unsafe fn dims_of(tu: CXTranslationUnit, e: CXCursor) -> Option<u8> {
    let text = extent_text(tu, e)?;
    let t = text.trim();
    if let Some(n) = dim3_values(t) {
        return Some(n);
    }
    // A variable: its type and its declaration.
    let mut var = None;
    visit(e, |k, _| {
        if clang_getCursorKind(k) == CXCursor_DeclRefExpr {
            let r = clang_getCursorReferenced(k);
            if cx_string(clang_getCursorSpelling(r)) == t
                && matches!(clang_getCursorKind(r), CXCursor_VarDecl | CXCursor_ParmDecl)
            {
                var = Some(r);
                return CXChildVisit_Break;
            }
        }
        CXChildVisit_Recurse
    });
    match var {
        Some(v) => {
            let ty = clang_getCanonicalType(clang_getCursorType(v));
            if is_integer_kind(ty.kind) {
                return Some(1);
            }
            if clang_getCursorKind(v) == CXCursor_ParmDecl {
                return None;
            }
            let decl = extent_text(tu, v)?;
            let name = cx_string(clang_getCursorSpelling(v));
            let after = decl.split_once(name.as_str())?.1.trim_start();
            let init = after.strip_prefix('=').map_or(after, str::trim_start);
            let init = init.strip_prefix("dim3").map_or(init, str::trim_start);
            dim3_values(&format!("dim3{init}"))
        }
        // No variable: an integer expression (`n / 256`, `256`), unless it names a dim3.
        None if !t.contains("dim3") && !t.contains('.') && !t.contains("->") => {
            let ty = clang_getCanonicalType(clang_getCursorType(e));
            let spelled = cx_string(clang_getTypeSpelling(ty));
            (is_integer_kind(ty.kind)
                || !spelled.contains("dim3")
                || t.chars().all(|c| c.is_ascii_digit()))
            .then_some(1)
        }
        None => None,
    }
}

/// The values of `dim3(a, b, c)` or `dim3{a, b}`, trailing literal 1s left out (at least 1).
fn dim3_values(t: &str) -> Option<u8> {
    let body = t.strip_prefix("dim3")?.trim_start();
    let inner = body
        .strip_prefix('(')
        .and_then(|b| b.strip_suffix(')'))
        .or_else(|| body.strip_prefix('{').and_then(|b| b.strip_suffix('}')))?;
    let mut values = split_commas(inner);
    while values.len() > 1 && values.last().is_some_and(|v| v == "1" || v == "1u") {
        values.pop();
    }
    u8::try_from(values.len().clamp(1, 3)).ok()
}

fn c_string(s: &OsStr) -> Result<CString, ClangError> {
    CString::new(s.as_encoded_bytes())
        .map_err(|_| ClangError::InvalidArgument(s.to_string_lossy().into_owned()))
}

fn error_name(code: CXErrorCode) -> &'static str {
    match code {
        CXError_Success => "no translation unit",
        CXError_Failure => "CXError_Failure",
        CXError_Crashed => "CXError_Crashed: libclang crashed",
        CXError_InvalidArguments => "CXError_InvalidArguments",
        CXError_ASTReadError => {
            "CXError_ASTReadError: typically the clang driver rejected an argument"
        }
        _ => "unknown libclang error",
    }
}

/// # Safety
/// libclang loaded on this thread; `tu` live.
unsafe fn collect_diagnostics(tu: CXTranslationUnit) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..clang_getNumDiagnostics(tu) {
        let diag = clang_getDiagnostic(tu, i);
        let severity = clang_getDiagnosticSeverity(diag);
        if severity >= CXDiagnostic_Error {
            let label = if severity == CXDiagnostic_Fatal {
                "fatal error"
            } else {
                "error"
            };
            let message = cx_string(clang_getDiagnosticSpelling(diag));
            let (file, line, col) = expansion_location(clang_getDiagnosticLocation(diag));
            out.push(match file {
                Some(f) => {
                    let name = cx_string(clang_getFileName(f));
                    format!("{name}:{line}:{col}: {label}: {message}")
                }
                None => format!("{label}: {message}"),
            });
        }
        clang_disposeDiagnostic(diag);
    }
    out
}

/// The files the preprocessor entered, besides the main file.
///
/// # Safety
/// libclang loaded on this thread; `tu` live.
unsafe fn collect_inclusions(tu: CXTranslationUnit) -> Vec<Inclusion> {
    extern "C" fn visitor(
        file: CXFile,
        stack: *mut CXSourceLocation,
        depth: c_uint,
        data: CXClientData,
    ) {
        // SAFETY: `data` is the `(tu, Vec)` passed below, alive for the call; `stack` holds
        // `depth` locations (libclang's contract); the library is installed on this thread.
        unsafe {
            let (tu, out) = &mut *(data as *mut (CXTranslationUnit, Vec<Inclusion>));
            if depth == 0 || stack.is_null() || file.is_null() {
                return; // the main file
            }
            // The first location is the directive's file name: `"`, `<`, or (for a name
            // from a macro) the end of the macro's expansion.
            let at = *stack;
            let mut from: CXFile = ptr::null_mut();
            let (mut line, mut col, mut offset): (c_uint, c_uint, c_uint) = (0, 0, 0);
            clang_getFileLocation(at, &mut from, &mut line, &mut col, &mut offset);
            let quoted = if from.is_null() {
                true
            } else {
                let mut size: usize = 0;
                let contents = clang_getFileContents(*tu, from, &mut size);
                contents.is_null()
                    || (offset as usize) >= size
                    || *contents.add(offset as usize) as u8 != b'<'
            };
            let start = clang_getLocationForOffset(*tu, file, 0);
            out.push(Inclusion {
                file: file_path(file),
                name: PathBuf::from(cx_string(clang_getFileName(file))),
                from: (!from.is_null()).then(|| file_path(from)),
                line,
                quoted,
                system: clang_Location_isInSystemHeader(start) != 0,
            });
        }
    }
    let mut data: (CXTranslationUnit, Vec<Inclusion>) = (tu, Vec::new());
    clang_getInclusions(
        tu,
        visitor,
        &mut data as *mut (CXTranslationUnit, Vec<Inclusion>) as CXClientData,
    );
    data.1
}

/// The lines the preprocessor skipped (inactive conditional branches), in every file but
/// the system headers.
///
/// # Safety
/// libclang loaded on this thread; `tu` live.
unsafe fn collect_skipped(tu: CXTranslationUnit) -> Vec<SkippedLines> {
    let list = clang_getAllSkippedRanges(tu);
    if list.is_null() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let n = (*list).count as usize;
    let ranges = (*list).ranges;
    for i in 0..n {
        if ranges.is_null() {
            break;
        }
        let r = *ranges.add(i);
        if clang_Location_isInSystemHeader(clang_getRangeStart(r)) != 0 {
            continue;
        }
        let line_of = |loc: CXSourceLocation| {
            let mut file: CXFile = ptr::null_mut();
            let (mut line, mut col, mut offset): (c_uint, c_uint, c_uint) = (0, 0, 0);
            clang_getFileLocation(loc, &mut file, &mut line, &mut col, &mut offset);
            (file, line)
        };
        let (file, first) = line_of(clang_getRangeStart(r));
        let (_, last) = line_of(clang_getRangeEnd(r));
        if file.is_null() {
            continue;
        }
        out.push(SkippedLines {
            file: file_path(file),
            first,
            last: last.max(first),
        });
    }
    clang_disposeSourceRangeList(list);
    out
}

/// A function found so far, keyed by its USR.
struct Entity {
    info: FunctionInfo,
    usr: String,
}

/// Walks the translation unit once, collecting the named functions and the
/// template specializations referenced anywhere.
struct Collector<'n> {
    names: &'n [&'n str],
    entities: Vec<Entity>,
    by_usr: HashMap<String, usize>,
    /// Template USR -> specializations met, in order, without repeats.
    specializations: HashMap<String, Vec<Specialization>>,
}

impl<'n> Collector<'n> {
    fn new(names: &'n [&'n str]) -> Self {
        Collector {
            names,
            entities: Vec::new(),
            by_usr: HashMap::new(),
            specializations: HashMap::new(),
        }
    }

    /// # Safety
    /// libclang loaded on this thread; `tu` live.
    unsafe fn run(mut self, tu: CXTranslationUnit) -> Vec<FunctionInfo> {
        // The index was created with `excludeDeclarationsFromPCH`, so the
        // translation unit's children are its top-level declarations as the
        // parser handed them on: they include explicit instantiations and the
        // instantiated bodies of implicitly instantiated function templates
        // (so `launch<float>` calling `axpy<T><<<...>>>` yields `axpy<float>`),
        // which a walk of the declaration contexts would not show.
        visit(clang_getTranslationUnitCursor(tu), |c, _| self.on_cursor(c));
        let mut specs = self.specializations;
        self.entities
            .into_iter()
            .map(|mut e| {
                if e.info.is_template {
                    let found = specs.remove(&e.usr).unwrap_or_default();
                    e.info.mangled = found.iter().map(|s| s.mangled.clone()).collect();
                    e.info.specializations = found;
                }
                e.info
            })
            .collect()
    }

    /// # Safety
    /// As for [`Collector::run`].
    unsafe fn on_cursor(&mut self, c: CXCursor) -> CXChildVisitResult {
        let kind = clang_getCursorKind(c);
        match kind {
            CXCursor_FunctionDecl | CXCursor_FunctionTemplate => {
                let template = clang_getSpecializedCursorTemplate(c);
                if in_system_header(c) {
                    return CXChildVisit_Continue;
                }
                if kind == CXCursor_FunctionDecl && clang_Cursor_isNull(template) == 0 {
                    // An explicit specialization or instantiation, or an
                    // implicit instantiation.
                    self.note_specialization(c, template);
                } else {
                    self.note_function(c, kind == CXCursor_FunctionTemplate);
                }
                CXChildVisit_Recurse
            }
            CXCursor_DeclRefExpr | CXCursor_MemberRefExpr => {
                let target = clang_getCursorReferenced(c);
                if clang_getCursorKind(target) == CXCursor_FunctionDecl {
                    let template = clang_getSpecializedCursorTemplate(target);
                    if clang_Cursor_isNull(template) == 0 {
                        self.note_specialization(target, template);
                    }
                }
                CXChildVisit_Recurse
            }
            CXCursor_Namespace | CXCursor_LinkageSpec | CXCursor_UnexposedDecl => {
                CXChildVisit_Recurse
            }
            _ if in_system_header(c) => CXChildVisit_Continue,
            _ => CXChildVisit_Recurse,
        }
    }

    /// # Safety
    /// As for [`Collector::run`].
    unsafe fn note_function(&mut self, c: CXCursor, is_template: bool) {
        let name = cx_string(clang_getCursorSpelling(c));
        let qualified = qualified_name(c, &name);
        if !self
            .names
            .iter()
            .any(|w| name_matches(w, &name, &qualified))
        {
            return;
        }
        let usr = cx_string(clang_getCursorUSR(clang_getCanonicalCursor(c)));
        let is_definition = clang_isCursorDefinition(c) != 0;
        let is_global = has_global_attr(c);
        let idx = match self.by_usr.get(&usr) {
            Some(&i) => {
                let e = &mut self.entities[i].info;
                e.is_global |= is_global;
                if !is_definition || e.is_definition {
                    return;
                }
                i
            }
            None => {
                self.entities.push(Entity {
                    info: FunctionInfo {
                        name: name.clone(),
                        qualified_name: qualified,
                        file: PathBuf::new(),
                        line: 0,
                        col: 0,
                        is_global,
                        is_template,
                        is_definition: false,
                        params: Vec::new(),
                        mangled: Vec::new(),
                        specializations: Vec::new(),
                    },
                    usr: usr.clone(),
                });
                self.by_usr.insert(usr, self.entities.len() - 1);
                self.entities.len() - 1
            }
        };
        // First declaration, or the definition: take its location and params.
        let (file, line, col) = expansion_location(clang_getCursorLocation(c));
        let e = &mut self.entities[idx].info;
        e.file = file.map(|f| file_path(f)).unwrap_or_default();
        e.line = line;
        e.col = col;
        e.is_definition = is_definition;
        e.params = params(c, is_template);
        if !is_template {
            e.mangled = vec![mangled_name(c)];
        }
    }

    /// Records `spec`, a specialization of `template`.
    ///
    /// # Safety
    /// As for [`Collector::run`].
    unsafe fn note_specialization(&mut self, spec: CXCursor, template: CXCursor) {
        if clang_getCursorKind(template) != CXCursor_FunctionTemplate || in_system_header(template)
        {
            return;
        }
        let template_usr = cx_string(clang_getCursorUSR(clang_getCanonicalCursor(template)));
        let mangled = mangled_name(spec);
        let list = self.specializations.entry(template_usr).or_default();
        if !mangled.is_empty() && !list.iter().any(|s| s.mangled == mangled) {
            list.push(Specialization {
                mangled,
                params: params(spec, false),
            });
        }
    }
}

/// The Itanium name of a function as the device code has it.
///
/// On the host side clang names a kernel's launch stub, and libclang's
/// mangling of a kernel is that stub's name: the kernel's identifier gets the
/// prefix `__device_stub__` (`_Z4axpyIfEvT_PKS0_PS0_i` becomes
/// `_Z19__device_stub__axpyIfEvT_PKS0_PS0_i`). [`kernel_symbol`] undoes that.
///
/// # Safety
/// libclang loaded on this thread; `c` a function from a live TU.
unsafe fn mangled_name(c: CXCursor) -> String {
    kernel_symbol(&cx_string(clang_Cursor_getMangling(c)))
}

const STUB_PREFIX: &str = "__device_stub__";

/// Removes the `__device_stub__` prefix clang's host side puts on a kernel's
/// identifier: in a mangled name, the `<length>__device_stub__<identifier>`
/// source name becomes `<length - 15><identifier>`; an unmangled
/// (`extern "C"`) name just loses the prefix. Names without it are returned
/// unchanged.
pub fn kernel_symbol(mangled: &str) -> String {
    if let Some(plain) = mangled.strip_prefix(STUB_PREFIX) {
        return plain.to_string();
    }
    let Some(at) = mangled.find(STUB_PREFIX) else {
        return mangled.to_string();
    };
    let head = &mangled[..at];
    let digits = head.len() - head.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let Ok(len) = head[head.len() - digits..].parse::<usize>() else {
        return mangled.to_string();
    };
    if digits == 0 || len <= STUB_PREFIX.len() {
        return mangled.to_string();
    }
    format!(
        "{}{}{}",
        &head[..head.len() - digits],
        len - STUB_PREFIX.len(),
        &mangled[at + STUB_PREFIX.len()..]
    )
}

/// # Safety
/// libclang loaded on this thread; `c` from a live TU.
unsafe fn in_system_header(c: CXCursor) -> bool {
    clang_Location_isInSystemHeader(clang_getCursorLocation(c)) != 0
}

/// `a::b::name` for a function in namespaces `a::b`.
///
/// # Safety
/// libclang loaded on this thread; `c` from a live TU.
unsafe fn qualified_name(c: CXCursor, name: &str) -> String {
    let mut parts = vec![name.to_string()];
    let mut parent = clang_getCursorSemanticParent(c);
    loop {
        match clang_getCursorKind(parent) {
            CXCursor_TranslationUnit => break,
            k if clang_isInvalid(k) != 0 => break,
            CXCursor_LinkageSpec => {}
            CXCursor_Namespace if clang_Cursor_isAnonymous(parent) != 0 => {
                parts.push("(anonymous namespace)".into())
            }
            _ => parts.push(cx_string(clang_getCursorSpelling(parent))),
        }
        parent = clang_getCursorSemanticParent(parent);
    }
    parts.reverse();
    parts.join("::")
}

/// Whether this declaration carries `__global__`.
///
/// # Safety
/// libclang loaded on this thread; `c` from a live TU.
unsafe fn has_global_attr(c: CXCursor) -> bool {
    children(c)
        .into_iter()
        .any(|k| clang_getCursorKind(k) == CXCursor_CUDAGlobalAttr)
}

/// The parameters of a function or function template.
///
/// # Safety
/// libclang loaded on this thread; `c` from a live TU.
unsafe fn params(c: CXCursor, is_template: bool) -> Vec<KernelParam> {
    let cursors: Vec<CXCursor> = if is_template {
        children(c)
            .into_iter()
            .filter(|k| clang_getCursorKind(*k) == CXCursor_ParmDecl)
            .collect()
    } else {
        let n = clang_Cursor_getNumArguments(c).max(0) as c_uint;
        (0..n).map(|i| clang_Cursor_getArgument(c, i)).collect()
    };
    cursors.into_iter().map(|p| param(p)).collect()
}

/// # Safety
/// libclang loaded on this thread; `p` a `ParmDecl` from a live TU.
unsafe fn param(p: CXCursor) -> KernelParam {
    let ty = clang_getCursorType(p);
    let canonical = clang_getCanonicalType(ty);
    let canonical_spelling = cx_string(clang_getTypeSpelling(canonical));
    let dependent = canonical_spelling.contains("type-parameter-");
    KernelParam {
        name: cx_string(clang_getCursorSpelling(p)),
        ty: if dependent {
            cx_string(clang_getTypeSpelling(ty))
        } else {
            canonical_spelling
        },
        is_integer: !dependent && is_integer_kind(canonical.kind),
    }
}

/// The integer kinds that can carry a size or count (see
/// [`KernelParam::is_integer`]).
fn is_integer_kind(kind: CXTypeKind) -> bool {
    matches!(
        kind,
        CXType_Short
            | CXType_UShort
            | CXType_Int
            | CXType_UInt
            | CXType_Long
            | CXType_ULong
            | CXType_LongLong
            | CXType_ULongLong
            | CXType_Int128
            | CXType_UInt128
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_plain_and_qualified() {
        assert!(name_matches("scale", "scale", "lin::detail::scale"));
        assert!(name_matches(
            "lin::detail::scale",
            "scale",
            "lin::detail::scale"
        ));
        assert!(name_matches(
            "::lin::detail::scale",
            "scale",
            "lin::detail::scale"
        ));
        assert!(!name_matches(
            "detail::scale",
            "scale",
            "lin::detail::scale"
        ));
        assert!(!name_matches("scal", "scale", "scale"));
    }

    #[test]
    fn clang_args_order() {
        let cfg = ClangConfig {
            cuda_path: "/opt/cuda".into(),
            stub_include: Some("/stubs".into()),
            args: vec!["-Iinc".into(), "-DX=1".into()],
            libclang_path: None,
        };
        assert_eq!(
            cfg.clang_args(),
            [
                "-x",
                "cuda",
                "--cuda-host-only",
                "--cuda-path=/opt/cuda",
                "-nocudalib",
                "-Wno-unknown-cuda-version",
                "-isystem",
                "/stubs",
                "-Iinc",
                "-DX=1"
            ]
        );
    }

    #[test]
    fn stub_names_become_kernel_names() {
        assert_eq!(
            kernel_symbol("_Z17__device_stub__mmPKfS0_Pfi"),
            "_Z2mmPKfS0_Pfi"
        );
        assert_eq!(
            kernel_symbol("_Z19__device_stub__axpyIfEvT_PKS0_PS0_i"),
            "_Z4axpyIfEvT_PKS0_PS0_i"
        );
        assert_eq!(
            kernel_symbol("_ZN3lin6detail20__device_stub__scaleEPffm"),
            "_ZN3lin6detail5scaleEPffm"
        );
        assert_eq!(kernel_symbol("__device_stub__plain_c"), "plain_c");
        assert_eq!(kernel_symbol("_Z7mm_hostPKfS0_Pfi"), "_Z7mm_hostPKfS0_Pfi");
        assert_eq!(kernel_symbol("main"), "main");
        assert_eq!(kernel_symbol("x__device_stub__"), "x__device_stub__");
    }

    #[test]
    fn resource_dir_parsing() {
        // A library whose own guess exists needs no override.
        assert_eq!(
            resource_dir_for(Path::new("/nonexistent/lib/libclang.so"), "no version"),
            None
        );
    }
}
