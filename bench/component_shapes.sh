#!/usr/bin/env bash
# Every component at its benchmark shape (shared/bench-shapes.md), specialized against generic,
# with frank-jit bench. Extra arguments go to Google Benchmark, e.g. --benchmark_min_time=0.5.
# S4's positions are 0..127 and the expert ids of S9 are fixed (ids must lie in [0, 8));
# everything else is random.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
jit="${FRANK_JIT:-$here/build/bin/frank-jit}"
c="$here/components"
run() {
  local name="$1"; shift
  echo "=== $name"
  "$jit" bench "$c/$@" --benchmark_min_time=0.2 "${extra[@]}"
}
extra=("$@")
run "S1" normalization/rms_norm.mlir --function=rms_norm_linalg --input=32x4096xf32=random --input=4096xf32=random --input=f32=1e-6
run "S2" activation/swiglu.mlir --input=1x32x14336xf32=random --input=1x32x14336xf32=random
run "S3" embedding/embedding_lookup.mlir --function=embedding_lookup --input=32000x2048xf32=random --input=1x128xi64=random
run "S4" position/rope.mlir --function=rope --input=1x128x32x128xf32=random --input=1x128xi64="$(seq -s, 0 127)" --input=f32=10000 --input=f32=1
run "S5" attention/attention_gqa.mlir --function=attention_gqa --input=1x128x32x128xf32=random --input=1x128x8x128xf32=random --input=1x128x8x128xf32=random --input=f32=0.08838834764
run "S5 causal" attention/attention_gqa.mlir --function=attention_gqa_causal --input=1x128x32x128xf32=random --input=1x128x8x128xf32=random --input=1x128x8x128xf32=random --input=f32=0.08838834764
run "S6" attention/attention_gqa.mlir --function=attention_gqa_decode --input=1x1x32x128xf32=random --input=1x512x8x128xf32=random --input=1x512x8x128xf32=random --input=f32=0.08838834764
run "S7" linear/matmul.mlir --function=matmul --input=128x4096xf32=random --input=4096x4096xf32=random
run "S8" linear/matmul.mlir --function=matmul --input=1x4096xf32=random --input=4096x4096xf32=random
run "S9 T=1" moe/mul_mat_id.mlir --function=mul_mat_id --input=3584x1024x8xf32=random --input=1024x2x1xf32=random --input=2x1xi32=3,5
run "S9 T=32" moe/mul_mat_id.mlir --function=mul_mat_id --input=3584x1024x8xf32=random --input=1024x2x32xf32=random --input=2x32xi32=1,6,3,0,5,2,7,4,1,6,3,0,5,2,7,4,1,6,3,0,5,2,7,4,1,6,3,0,5,2,7,4,1,6,3,0,5,2,7,4,1,6,3,0,5,2,7,4,1,6,3,0,5,2,7,4,1,6,3,0,5,2,7,4
run "S10 T=1" moe/moe_ffn_block.mlir --function=moe_ffn_block --input=1x1024xf32=random --input=8x1024xf32=random --input=3584x1024x8xf32=random --input=3584x1024x8xf32=random --input=1024x3584x8xf32=random --input=index=8 --input=index=2 --input=index=1024 --input=index=3584 --input=i1=true
run "S10 T=32" moe/moe_ffn_block.mlir --function=moe_ffn_block --input=32x1024xf32=random --input=8x1024xf32=random --input=3584x1024x8xf32=random --input=3584x1024x8xf32=random --input=1024x3584x8xf32=random --input=index=8 --input=index=2 --input=index=1024 --input=index=3584 --input=i1=true
