# Sourced by the build-machine scripts that make a bundle for the GPU machine (Ubuntu 24.04,
# CUDA 13.0, no LLVM, no clang, no cargo): bench/linkprof/bundle.sh, bench/reduce/bundle.sh.
# The bundle is unpacked there by bench/linkprof/unpack.sh.
#
#   stage_tools <release dir> <stage dir>
#       bin/      klaraptor-cc, klaraptor, libklaraptor_collector.so (the link looks for the
#                 collector beside klaraptor-cc; the runtime travels inside klaraptor-cc)
#       libs/     what klaraptor-cc needs that Ubuntu 24.04 never has: libLLVM.so.19.1,
#                 libz3.so.4
#       fallback/ libraries of libLLVM's that a minimal Ubuntu 24.04 image may lack (libxml2
#                 and the ICU 72 it was built with, libedit, libffi, libtinfo, libbsd, libmd);
#                 unpack.sh puts one on the library path only when ldd says the system lacks it
#                 (left out with BUNDLE_FALLBACK=0)
#     libc, libm, libstdc++, libgcc_s, libz, libzstd, liblzma are not shipped: the device's
#     own (newer) ones are used.
#   pack_bundle <stage dir> <out dir> <top-level entries...>
#       <out dir>/bundle.tar.xz (xz -9) of the entries, and a copy of the stage's BUILD-INFO
#       beside it with the compressed size appended.
#
#   bundle_args <name> <usage> [<cargo target dir> [<out dir>]]
#       the bundle scripts' common arguments and checks: sets target, rel (its release dir),
#       out (default .dev/<name>) and nvcc (KLARAPTOR_NVCC, else the project's toolchain),
#       and makes the stage directory (stage, removed on exit). Needs repo set.
#
#   run_logged <dir> <log> <what> <command...>
#       appends `$ (cd <dir> && <command>)` and the command's output to <log>, running it in
#       <dir> with KLARAPTOR_NVCC=$nvcc (and whatever the call is prefixed with, e.g.
#       `KLARAPTOR_NO_GPU=1 run_logged …`); if it fails, prints the log and dies "<what>
#       failed (log above)".
#   build_info_head <path...>
#       BUILD-INFO's first lines, on stdout: when and where the bundle was made, the commit and
#       how many tracked files under <path...> were modified, the target dir, klaraptor-cc's
#       version and the nvcc the objects were compiled with. Needs repo, target, rel and nvcc.
#   build_info_files
#       BUILD-INFO's last lines, on stdout: a blank line and every file of the stage but
#       BUILD-INFO with its size. Needs stage.
#
# Needs the caller's die.
bundle_args() {
  local name=$1 usage=$2
  shift 2
  [ $# -ge 1 ] || die "usage: $usage <cargo target dir> [<out dir>]"
  target=$(cd "$1" 2>/dev/null && pwd) || die "no such target dir: $1"
  out=${2:-$repo/.dev/$name}
  rel=$target/release
  nvcc=${KLARAPTOR_NVCC:-$repo/.toolchain/cuda/bin/nvcc}
  [ -x "$nvcc" ] || die "no nvcc at $nvcc: run scripts/setup or set KLARAPTOR_NVCC"
  command -v xz >/dev/null || die "xz is not installed (apt-get install xz-utils)"
  stage=$(mktemp -d "${TMPDIR:-/tmp}/klaraptor-$name-stage.XXXXXX")
  trap 'rm -rf "$stage"' EXIT
}

stage_tools() {
  local rel=$1 stage=$2 so name path
  for f in klaraptor-cc klaraptor libklaraptor_collector.so; do
    [ -f "$rel/$f" ] || die "$rel/$f is missing: run CARGO_TARGET_DIR=$(dirname "$rel") cargo build --release -p klaraptor -p klaraptor-collector"
  done
  mkdir -p "$stage"/{bin,libs,fallback}
  # --- binaries -----------------------------------------------------------------------
  cp "$rel/klaraptor-cc" "$rel/klaraptor" "$rel/libklaraptor_collector.so" "$stage/bin/"
  strip --strip-unneeded "$stage/bin/"* 2>/dev/null || true

  # --- shared libraries: resolved the way the loader resolves them here -----------------
  # soname -> path, from ldd of klaraptor-cc (the whole dependency closure).
  declare -A where
  while read -r name _ path _; do
    [ -n "${path:-}" ] && [ "${path:0:1}" = / ] && where[$name]=$path
  done < <(ldd "$rel/klaraptor-cc")
  if ldd "$rel/klaraptor-cc" | grep -q "not found"; then
    die "$rel/klaraptor-cc has unresolved libraries here: $(ldd "$rel/klaraptor-cc" | grep 'not found' | tr -s ' \t' ' ')"
  fi
  ship() { # ship <dir> <soname>...
    local dir=$1; shift
    for so in "$@"; do
      [ -n "${where[$so]:-}" ] || die "klaraptor-cc does not load $so here (ldd): update the lists in bench/linkprof/stage.sh"
      cp -L "${where[$so]}" "$stage/$dir/$so"
    done
  }
  ship libs libLLVM.so.19.1 libz3.so.4
  # BUNDLE_FALLBACK=0 leaves the fallback libraries out (about 8 MiB of the compressed
  # bundle): the GPU machines' CUDA image has them all (every device run so far loaded only
  # libLLVM and libz3 from the bundle), and a call that carries the bundle beside other data
  # must stay under the carry limit. unpack.sh still stops, naming them, if one is missing.
  if [ "${BUNDLE_FALLBACK:-1}" != 0 ]; then
    ship fallback libxml2.so.2 libicuuc.so.72 libicudata.so.72 libedit.so.2 libffi.so.8 \
      libtinfo.so.6 libbsd.so.0 libmd.so.0
  fi
  # Anything else klaraptor-cc loads must be a library every Linux system has.
  for so in "${!where[@]}"; do
    case $so in
      libLLVM.so.19.1|libz3.so.4|libxml2.so.2|libicuuc.so.72|libicudata.so.72|libedit.so.2|\
      libffi.so.8|libtinfo.so.6|libbsd.so.0|libmd.so.0) ;;
      libc.so.6|libm.so.6|libstdc++.so.6|libgcc_s.so.1|libz.so.1|libzstd.so.1|liblzma.so.5|\
      /lib64/ld-linux-x86-64.so.2|ld-linux-x86-64.so.2) ;;
      *) die "klaraptor-cc loads $so (${where[$so]}), which bench/linkprof/stage.sh neither ships nor expects on the device: add it to a list above" ;;
    esac
  done
  strip --strip-unneeded "$stage"/libs/* "$stage"/fallback/* 2>/dev/null || true
}

run_logged() {
  local dir=$1 log=$2 what=$3
  shift 3
  echo "\$ (cd $dir && $*)" >> "$log"
  (cd "$dir" && KLARAPTOR_NVCC=$nvcc "$@") >> "$log" 2>&1 \
    || { cat "$log" >&2; die "$what failed (log above)"; }
}

build_info_head() {
  local commit dirty
  commit=$(git -C "$repo" rev-parse --short=12 HEAD)
  dirty=$(git -C "$repo" status --porcelain --untracked-files=no -- "$@" | wc -l)
  echo "bundle made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) ($(. /etc/os-release && echo "$PRETTY_NAME"))"
  echo "source: main at $commit ($dirty modified tracked file(s) under the crates when built)"
  echo "target dir: $target"
  echo "klaraptor-cc --version: $("$rel/klaraptor-cc" --version 2>&1 | head -1)"
  echo "nvcc for the objects: $nvcc ($("$nvcc" --version | tail -1))"
}

build_info_files() {
  echo
  echo "files (uncompressed bytes):"
  (cd "$stage" && find . -type f ! -name BUILD-INFO | sort | xargs stat -c '  %8s %n')
}

pack_bundle() {
  local stage=$1 out=$2 size tmp
  shift 2
  command -v xz >/dev/null || die "xz is not installed (apt-get install xz-utils)"
  mkdir -p "$out"
  # BUNDLE_WITHOUT_LIBS=1: without libs/ and fallback/ (carried apart, in parts, where the
  # whole bundle beside the working tree exceeds a device call's limit; unpack.sh's
  # BUNDLE_LIBS names them on the device).
  if [ "${BUNDLE_WITHOUT_LIBS:-0}" = 1 ]; then
    local e kept=()
    for e in "$@"; do [ "$e" = libs ] || [ "$e" = fallback ] || kept+=("$e"); done
    set -- "${kept[@]}"
  fi
  tmp=$out/bundle.tar.xz.tmp
  tar -C "$stage" -cf - "$@" | xz -9 -T2 -c > "$tmp"
  mv "$tmp" "$out/bundle.tar.xz"
  cp "$stage/BUILD-INFO" "$out/BUILD-INFO"
  size=$(stat -c %s "$out/bundle.tar.xz")
  echo "compressed: $size bytes ($(awk "BEGIN{printf \"%.1f\", $size/1048576}") MiB)" >> "$out/BUILD-INFO"
}
