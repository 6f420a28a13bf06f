#!/usr/bin/env bash
# Runs every fuzz target for a bounded time, each over its seed corpus (fuzz/corpus/<target>) and
# a scratch corpus in the build dir, and prints how many inputs each ran. Fails on the first
# crash, leak, timeout or sanitizer report, naming the reproducer that libFuzzer saved.
#
#   fuzz/run.sh BUILD_DIR SECONDS_PER_TARGET [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=$1
seconds=$2
shift 2
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_parse fuzz_specialize fuzz_npy)

# libLLVM is not built with the sanitizers; see the file for the one entry and why.
export LSAN_OPTIONS="suppressions=$PWD/tools/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1"

mkdir -p "$build/artifacts"
for target in "${targets[@]}"; do
  work="$build/corpus/$target"
  log="$build/$target.log"
  mkdir -p "$work"
  flags=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1
         -artifact_prefix="$build/artifacts/$target-")
  # The seeds include deep-nesting regressions larger than a useful mutation.
  [ "$target" = fuzz_parse ] && flags+=(-dict=fuzz/mlir.dict -max_len=16384)
  if ! "$build/bin/$target" "${flags[@]}" "$work" "fuzz/corpus/$target" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "$target: FAILED after $(grep -c '^#' "$log" || true) status lines; full log in $log" >&2
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 || true)
  echo "$target: ${runs} runs in ${seconds} s (${rate}/s), ${cov}, corpus $(ls "$work" | wc -l) files"
done
