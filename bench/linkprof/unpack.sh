# Sourced by the GPU-machine scripts that run klaraptor-cc there (bench/linkprof/device.sh,
# bench/parallel/device.sh): unpacks a bundle made by bench/linkprof/bundle.sh and makes its
# klaraptor-cc runnable on that machine.
#
#   unpack_bundle <bundle.tar.xz> <dir> <nvcc>
#
# Needs the caller's say, die, now, secs, $summary and $OUT; BUNDLE_LIBS names klaraptor-cc's
# libraries unpacked apart (a bundle made without libs/). Sets B (the unpacked bundle),
# kcc, klaraptor, and exports LD_LIBRARY_PATH (the bundle's libs/, with those of its
# fallback libraries ldd says the system lacks) and KLARAPTOR_NVCC. LINKPROF_FORCE_FALLBACK=1
# loads every carried fallback library, as if the system had none.
missing() { { ldd "$1" 2>&1 || true; } | awk '/not found/ {print $1}' | sort -u; }

unpack_bundle() {
  local bundle=$1 dir=$2 nvcc=$3 t0
  mkdir -p "$dir"
  t0=$(now)
  xz -T0 -dc "$bundle" | tar -C "$dir" -xf -
  say "unpacked $(stat -c %s "$bundle") bytes in $(secs "$t0" "$(now)") s"
  B=$dir
  sed -n '1,7p' "$B/BUILD-INFO" | sed 's/^/  /' | tee -a "$summary"
  kcc=$B/bin/klaraptor-cc
  klaraptor=$B/bin/klaraptor
  local libdir=$B/libs
  # klaraptor-cc's libraries carried apart (BUNDLE_LIBS: a directory unpacked on this machine
  # by an earlier call), where the whole bundle beside the working tree exceeds a device
  # call's limit.
  if [ ! -d "$libdir" ] && [ -n "${BUNDLE_LIBS:-}" ] && [ -d "$BUNDLE_LIBS" ]; then
    ln -s "$(cd "$BUNDLE_LIBS" && pwd)" "$libdir"
  fi
  if [ ! -d "$libdir" ]; then
    # A bundle without klaraptor-cc's libraries (bin/ and BUILD-INFO of one: bench/cmake-gpu
    # runs no klaraptor-cc there, and the whole bundle beside the working tree may exceed the
    # device call's limit): klaraptor and the collector only.
    local b m
    for b in "$klaraptor" "$B/bin/libklaraptor_collector.so"; do
      m=$(missing "$b")
      [ -z "$m" ] || die "ldd: $(basename "$b") lacks: $(echo $m)"
    done
    export KLARAPTOR_NVCC=$nvcc
    say "klaraptor and the collector only (no klaraptor-cc libraries); nvcc: $nvcc ($("$nvcc" --version | tail -1))"
    return 0
  fi
  export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if [ "${LINKPROF_FORCE_FALLBACK:-0}" = 1 ]; then
    for f in "$B"/fallback/*; do ln -sf "../fallback/$(basename "$f")" "$libdir/"; done
  fi
  # Add a fallback library only where the system lacks it (libxml2's ICU comes with it).
  local added so miss carried b m
  for _ in 1 2 3 4; do
    added=0
    for so in $(missing "$kcc"); do
      if [ -f "$B/fallback/$so" ] && [ ! -e "$libdir/$so" ]; then
        ln -s "../fallback/$so" "$libdir/$so"
        added=1
      fi
    done
    [ $added = 1 ] || break
  done
  miss=$(missing "$kcc")
  [ -z "$miss" ] || { ldd "$kcc" > "$OUT/ldd.txt" 2>&1 || true; die "ldd: klaraptor-cc still lacks: $(echo $miss) (ldd output in ldd.txt)"; }
  carried=$(ldd "$kcc" | awk -v d="$B/" 'index($3, d) == 1 {print $1}' | sort | tr '\n' ' ')
  say "ldd: every library resolves; from the bundle: $carried"
  for b in "$klaraptor" "$B/bin/libklaraptor_collector.so"; do
    m=$(missing "$b")
    [ -z "$m" ] || die "ldd: $(basename "$b") lacks: $(echo $m)"
  done

  export KLARAPTOR_NVCC=$nvcc
  "$kcc" --version > "$dir/version.txt" 2>&1 || die "klaraptor-cc --version failed: $(cat "$dir/version.txt")"
  grep -q "KLARAPTOR_NVCC" "$dir/version.txt" || die "klaraptor-cc does not use KLARAPTOR_NVCC: $(head -3 "$dir/version.txt")"
  say "klaraptor-cc: $(head -1 "$dir/version.txt"); nvcc: $nvcc ($("$nvcc" --version | tail -1))"
}
