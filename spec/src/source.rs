//! What the front end found in a CUDA source: its functions (kernels among them), their
//! parameters and mangled names, and the files it included. Plain data: libclang fills it
//! in (`klaraptor-passes`), the annotation checks ([`crate::spec::resolve`]) and the include
//! scan ([`crate::includes`]) read it.

use std::path::{Path, PathBuf};

/// One parameter of a function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelParam {
    /// The parameter's name as written in the definition (or, for a function
    /// that is only declared, in the first declaration); empty when unnamed.
    pub name: String,
    /// The canonical type as clang spells it: typedefs and `using` aliases are
    /// resolved (`size_t` is `unsigned long`, `int64_t` is `long`) and
    /// qualifiers are kept (`const unsigned long`, `const float *`). For a
    /// type that depends on a template parameter the written spelling is
    /// given instead (`T`, `const T *`), since clang's canonical spelling of
    /// it (`type-parameter-0-0`) means nothing to a reader.
    pub ty: String,
    /// Whether the parameter is an integer that can carry a size or count:
    /// its canonical type (through typedefs, ignoring `const`/`volatile`) is
    /// `short`, `int`, `long`, `long long` or `__int128`, signed or unsigned.
    /// `bool`, the character types (`char`, `signed char`, `unsigned char`,
    /// `wchar_t`, `char8_t`, `char16_t`, `char32_t`) and enumerations are not
    /// counted; neither are pointers, references, arrays, floating-point
    /// types, classes, or types that depend on a template parameter.
    pub is_integer: bool,
}

/// One instantiation of a function template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Specialization {
    /// The specialization's Itanium mangled name, e.g. `_Z4axpyIfEvT_PKS0_PS0_i`.
    pub mangled: String,
    /// Its parameters, with the template arguments substituted.
    pub params: Vec<KernelParam>,
}

/// What the source says about one function named in the front end's inspection's `names`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionInfo {
    /// The unqualified name (`scale`).
    pub name: String,
    /// The name with its enclosing namespaces (`lin::detail::scale`); the same
    /// as `name` at global scope. An anonymous namespace is written
    /// `(anonymous namespace)`.
    pub qualified_name: String,
    /// The file of the definition if the translation unit has one, else of the
    /// first declaration: the real (absolute, symlink-free) path when libclang
    /// knows it.
    pub file: PathBuf,
    /// 1-based line of the function's name there (after macro expansion).
    pub line: u32,
    /// 1-based column of the function's name there.
    pub col: u32,
    /// Whether the function is a kernel (`__global__`).
    pub is_global: bool,
    /// Whether it is a function template.
    pub is_template: bool,
    /// Whether the translation unit defines it (has a body for it).
    pub is_definition: bool,
    /// The parameters, from the definition when there is one. For a template,
    /// as written in the template.
    pub params: Vec<KernelParam>,
    /// The Itanium mangled name(s). For a non-template, its one name (for an
    /// `extern "C"` function, the plain name). For a template, the name of
    /// every specialization the translation unit uses (through `<<<>>>`
    /// launches, calls, taking its address, explicit instantiations and
    /// explicit specializations), in the order they are first met; empty if
    /// it is never instantiated.
    pub mangled: Vec<String>,
    /// For a template, the specializations behind `mangled`, with their
    /// concrete parameter types; empty for a non-template.
    pub specializations: Vec<Specialization>,
}

/// The result of the front end's inspection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceInfo {
    /// Every function (free function or function template, not class member)
    /// whose name is among `names`, declared in the main file or anything it
    /// includes outside system headers, in the order first met. Overloads
    /// give one entry each; a function declared several times gives one.
    pub functions: Vec<FunctionInfo>,
    /// The errors (and fatal errors) libclang reported, formatted
    /// `file:line:col: error: message` (or just `error: message` when the
    /// error has no location). Warnings are left out.
    pub diagnostics: Vec<String>,
    /// Every file the preprocessor entered besides the main file, once per
    /// time it entered it (a header read twice is listed twice; one that an
    /// include guard or `#pragma once` kept out the second time, once), in the
    /// order it entered them.
    pub inclusions: Vec<Inclusion>,
    /// The lines the preprocessor skipped: the inactive branches of `#if`, `#ifdef`,
    /// `#ifndef`, `#elif` and `#else`, in every file it entered outside system headers, once
    /// per reading of the file.
    pub skipped: Vec<SkippedLines>,
}

/// Lines of one file the preprocessor skipped (an inactive conditional branch, from the
/// directive that opens it to the one that closes it, both included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedLines {
    /// The file: its real (absolute, symlink-free) path when libclang knows it.
    pub file: PathBuf,
    /// The first and last skipped line, 1-based.
    pub first: u32,
    pub last: u32,
}

/// One `#include` the preprocessor followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inclusion {
    /// The included file: its real (absolute, symlink-free) path when libclang
    /// knows it.
    pub file: PathBuf,
    /// The included file's name as the preprocessor formed it: the directory
    /// it was found in joined with the name the directive spells
    /// (`./kernel.cuh`, `inc/kernels/stencil.cuh`).
    pub name: PathBuf,
    /// The real path of the file whose directive included it; `None` for a
    /// file included from the command line (`-include`) or by the compiler.
    pub from: Option<PathBuf>,
    /// The 1-based line of that directive.
    pub line: u32,
    /// Whether the directive spells the name in quotes (`#include "…"`);
    /// false for `#include <…>`. An include whose name comes from a macro
    /// counts as quoted unless the macro expands to `<…>`.
    pub quoted: bool,
    /// Whether the included file is a system header (found in an `-isystem`,
    /// CUDA or built-in directory).
    pub system: bool,
}

impl SourceInfo {
    /// The functions called `name` (unqualified, or qualified with `::`).
    pub fn find(&self, name: &str) -> Vec<&FunctionInfo> {
        self.functions
            .iter()
            .filter(|f| name_matches(name, &f.name, &f.qualified_name))
            .collect()
    }

    /// The first function called `name`, if any.
    pub fn function(&self, name: &str) -> Option<&FunctionInfo> {
        self.functions
            .iter()
            .find(|f| name_matches(name, &f.name, &f.qualified_name))
    }

    /// Whether the preprocessor skipped line `line` of `file` (a path compared canonically)
    /// every time it read the file: the line lies in an inactive conditional branch. A
    /// header read twice whose line is active in one reading counts as active.
    pub fn is_skipped(&self, file: &Path, line: u32) -> bool {
        if self.skipped.is_empty() {
            return false;
        }
        let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let file = canonical(file);
        // Within one reading of a file the skipped ranges do not overlap: a line skipped in
        // every reading is covered once per reading.
        // libclang gives real paths: only the question's path needs making canonical.
        let covered = self
            .skipped
            .iter()
            .filter(|s| s.first <= line && line <= s.last && s.file == file)
            .count();
        let readings = self
            .inclusions
            .iter()
            .filter(|i| i.file == file)
            .count()
            .max(1);
        covered > 0 && covered >= readings
    }

    /// Whether libclang reported any error.
    pub fn has_errors(&self) -> bool {
        !self.diagnostics.is_empty()
    }

    /// The files reached from the main file (`main`, a canonical path) through
    /// quoted includes of non-system headers, recursively: each once, in the
    /// order the preprocessor first entered it, with the inclusion that
    /// brought it in. Paths are compared canonically.
    pub fn quoted_includes(&self, main: &Path) -> Vec<&Inclusion> {
        let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let files: Vec<PathBuf> = self.inclusions.iter().map(|i| canonical(&i.file)).collect();
        let froms: Vec<Option<PathBuf>> = self
            .inclusions
            .iter()
            .map(|i| i.from.as_deref().map(canonical))
            .collect();
        let mut members: Vec<PathBuf> = vec![main.to_path_buf()];
        let mut taken: Vec<usize> = Vec::new();
        // Until nothing changes: a header may be included first from outside the set and
        // again from inside it.
        loop {
            let before = taken.len();
            for (i, inc) in self.inclusions.iter().enumerate() {
                let reached = froms[i].as_ref().is_some_and(|f| members.contains(f));
                if reached && inc.quoted && !inc.system && !members.contains(&files[i]) {
                    members.push(files[i].clone());
                    taken.push(i);
                }
            }
            if taken.len() == before {
                break;
            }
        }
        taken.sort_unstable();
        taken.into_iter().map(|i| &self.inclusions[i]).collect()
    }
}

/// Whether `wanted` (unqualified, or qualified with `::`) names the function `name` of
/// qualified name `qualified`.
pub fn name_matches(wanted: &str, name: &str, qualified: &str) -> bool {
    let wanted = wanted.strip_prefix("::").unwrap_or(wanted);
    if wanted.contains("::") {
        wanted == qualified
    } else {
        wanted == name
    }
}
