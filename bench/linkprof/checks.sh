# Sourced by the GPU-machine scripts that check a flow and print PASS/FAIL lines
# (bench/linkprof/device.sh, bench/reduce/device.sh, bench/cmake-gpu/device.sh). Needs
# $summary (the file every line is also appended to); sets fails=0.
#
#   say <text...>                  print and append to $summary
#   check <name> <1 if ok> <detail>  a PASS or FAIL line; a FAIL counts in $fails
#   die <text...>                  a FAIL line and "RESULT: FAIL (stopped early)", exit 1
#   now; secs <t0> <t1>            wall-clock seconds, and the difference to 2 decimals
fails=0
say() { echo "$*" | tee -a "$summary"; }
check() {
  if [ "$2" = 1 ]; then say "PASS  $1: $3"; else say "FAIL  $1: $3"; fails=$((fails + 1)); fi
}
die() {
  say "FAIL  $*"
  say "RESULT: FAIL (stopped early)"
  exit 1
}
now() { date +%s.%N; }
secs() { awk "BEGIN{printf \"%.2f\", $2 - $1}"; }
