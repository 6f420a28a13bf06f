// Attention block: QKV projections, rotary embedding, grouped-query attention, output projection.
//
//   attention_block(input [B, S, E], positions [B, S] i64,
//                   wq [E, E], wk [E, Ekv], wv [E, Ekv], wo [E, E],
//                   bq [E], bk [Ekv], bv [Ekv], bo [E],
//                   use_bias i1, n_head index, n_head_kv index, n_embd index,
//                   rope_freq_base f32, rope_freq_scale f32) -> [B, S, E]
//
// Dynamic dims: B, S, E and Ekv. Ekv is wk's dim 1. The weights are stored [in, out], so every
// projection is x @ W. The biases are read only when use_bias is true; otherwise their extents
// are not checked (pass any, e.g. empty, tensors).
//
// Maths, in this order:
//   x2     = input viewed as [B*S, E]
//   q      = x2 @ wq (+ bq),  k = x2 @ wk (+ bk),  v = x2 @ wv (+ bv)      (bias only if use_bias)
//   D      = n_embd / n_head (the index argument),  Dkv = Ekv / n_head_kv
//   q      -> [B, S, n_head, D];  k, v -> [B, S, n_head_kv, Dkv]
//   q', k' = rope(q, positions), rope(k, positions)                      (v is not roped)
//   a      = attention_gqa(q', k', v, rsqrt(float(int32(D))))           [B, S, n_head, Dkv]
//   out    = a viewed as [B*S, E] @ wo (+ bo), viewed as [B, S, E]
//
// Composition (resolved by the linker through the module symbols):
//   @position_components.rope        (components/position/rope.mlir)
//   @attention_components.attention_gqa (components/attention/attention_gqa.mlir)
//
// Usage:
//   %y = util.call @attention_block_components.attention_block(%x, %pos, %wq, %wk, %wv, %wo,
//            %bq, %bk, %bv, %bo, %use_bias, %n_head, %n_head_kv, %n_embd, %base, %freq_scale)
//       : (tensor<?x?x?xf32>, tensor<?x?xi64>, tensor<?x?xf32>, tensor<?x?xf32>,
//          tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>, tensor<?xf32>,
//          tensor<?xf32>, i1, index, index, index, f32, f32) -> tensor<?x?x?xf32>

#rows_cols = affine_map<(t, n) -> (t, n)>
#cols      = affine_map<(t, n) -> (n)>

module @attention_block_components {

  util.func private @position_components.rope(
      tensor<?x?x?x?xf32>,  // input [B, S, H, D]
      tensor<?x?xi64>,      // positions [B, S]
      f32,                  // freq_base
      f32                   // freq_scale
  ) -> tensor<?x?x?x?xf32>

  util.func private @attention_components.attention_gqa(
      tensor<?x?x?x?xf32>,  // query [B, S, H, D]
      tensor<?x?x?x?xf32>,  // key [B, Skv, Hkv, D]
      tensor<?x?x?x?xf32>,  // value [B, Skv, Hkv, D]
      f32                   // scale
  ) -> tensor<?x?x?x?xf32>

  // y = x @ w (+ b if use_bias) for x [T, K], w [K, N], b [N].
  util.func private @project(
      %x: tensor<?x?xf32>,   // [T, K]
      %w: tensor<?x?xf32>,   // [K, N]
      %b: tensor<?xf32>,     // [N], read only if use_bias
      %use_bias: i1
  ) -> tensor<?x?xf32> {     // [T, N]
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %tokens = tensor.dim %x, %c0 : tensor<?x?xf32>
    %n_out = tensor.dim %w, %c1 : tensor<?x?xf32>
    %zero = arith.constant 0.0 : f32
    %y_empty = tensor.empty(%tokens, %n_out) : tensor<?x?xf32>
    %y_zero = linalg.fill ins(%zero : f32) outs(%y_empty : tensor<?x?xf32>) -> tensor<?x?xf32>
    %y = linalg.matmul ins(%x, %w : tensor<?x?xf32>, tensor<?x?xf32>)
        outs(%y_zero : tensor<?x?xf32>) -> tensor<?x?xf32>
    %result = scf.if %use_bias -> (tensor<?x?xf32>) {
      %biased_empty = tensor.empty(%tokens, %n_out) : tensor<?x?xf32>
      %biased = linalg.generic {indexing_maps = [#rows_cols, #cols, #rows_cols],
                                iterator_types = ["parallel", "parallel"]}
          ins(%y, %b : tensor<?x?xf32>, tensor<?xf32>)
          outs(%biased_empty : tensor<?x?xf32>) {
      ^bb0(%acc: f32, %bias: f32, %unused: f32):
        %sum = arith.addf %acc, %bias : f32
        linalg.yield %sum : f32
      } -> tensor<?x?xf32>
      scf.yield %biased : tensor<?x?xf32>
    } else {
      scf.yield %y : tensor<?x?xf32>
    }
    util.return %result : tensor<?x?xf32>
  }

  util.func public @attention_block(
      %input: tensor<?x?x?xf32>,     // [B, S, E]
      %positions: tensor<?x?xi64>,   // [B, S]
      %wq: tensor<?x?xf32>,          // [E, E]
      %wk: tensor<?x?xf32>,          // [E, Ekv]
      %wv: tensor<?x?xf32>,          // [E, Ekv]
      %wo: tensor<?x?xf32>,          // [E, E]
      %bq: tensor<?xf32>,            // [E]
      %bk: tensor<?xf32>,            // [Ekv]
      %bv: tensor<?xf32>,            // [Ekv]
      %bo: tensor<?xf32>,            // [E]
      %use_bias: i1,
      %n_head: index,
      %n_head_kv: index,
      %n_embd: index,
      %rope_freq_base: f32,
      %rope_freq_scale: f32
  ) -> tensor<?x?x?xf32> {           // [B, S, E]
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %batch = tensor.dim %input, %c0 : tensor<?x?x?xf32>
    %seq_len = tensor.dim %input, %c1 : tensor<?x?x?xf32>
    %n_embd_kv = tensor.dim %wk, %c1 : tensor<?x?xf32>

    // Projections over all B*S tokens at once.
    %x = tensor.collapse_shape %input [[0, 1], [2]] : tensor<?x?x?xf32> into tensor<?x?xf32>
    %q = util.call @project(%x, %wq, %bq, %use_bias)
        : (tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xf32>, i1) -> tensor<?x?xf32>
    %k = util.call @project(%x, %wk, %bk, %use_bias)
        : (tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xf32>, i1) -> tensor<?x?xf32>
    %v = util.call @project(%x, %wv, %bv, %use_bias)
        : (tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xf32>, i1) -> tensor<?x?xf32>

    // Split the heads: D from the n_embd argument, Dkv from wk's output width. The expand
    // checks n_head * D against q's width and n_head_kv * Dkv against k's.
    %head_dim = arith.divsi %n_embd, %n_head : index
    %head_dim_kv = arith.divsi %n_embd_kv, %n_head_kv : index
    %q_heads = tensor.expand_shape %q [[0, 1], [2, 3]]
        output_shape [%batch, %seq_len, %n_head, %head_dim]
        : tensor<?x?xf32> into tensor<?x?x?x?xf32>
    %k_heads = tensor.expand_shape %k [[0, 1], [2, 3]]
        output_shape [%batch, %seq_len, %n_head_kv, %head_dim_kv]
        : tensor<?x?xf32> into tensor<?x?x?x?xf32>
    %v_heads = tensor.expand_shape %v [[0, 1], [2, 3]]
        output_shape [%batch, %seq_len, %n_head_kv, %head_dim_kv]
        : tensor<?x?xf32> into tensor<?x?x?x?xf32>

    // Rotary embedding on q and k with the same positions; v is not rotated.
    %q_rope = util.call @position_components.rope(%q_heads, %positions, %rope_freq_base,
                                                  %rope_freq_scale)
        : (tensor<?x?x?x?xf32>, tensor<?x?xi64>, f32, f32) -> tensor<?x?x?x?xf32>
    %k_rope = util.call @position_components.rope(%k_heads, %positions, %rope_freq_base,
                                                  %rope_freq_scale)
        : (tensor<?x?x?x?xf32>, tensor<?x?xi64>, f32, f32) -> tensor<?x?x?x?xf32>

    // scale = 1/sqrt(D), with D converted index -> i32 -> f32.
    %head_dim_i32 = arith.index_cast %head_dim : index to i32
    %head_dim_f32 = arith.sitofp %head_dim_i32 : i32 to f32
    %scale = math.rsqrt %head_dim_f32 : f32
    %attn = util.call @attention_components.attention_gqa(%q_rope, %k_rope, %v_heads, %scale)
        : (tensor<?x?x?x?xf32>, tensor<?x?x?x?xf32>, tensor<?x?x?x?xf32>, f32)
        -> tensor<?x?x?x?xf32>

    // Merge the heads and project back to E.
    %merged = tensor.collapse_shape %attn [[0, 1], [2, 3]]
        : tensor<?x?x?x?xf32> into tensor<?x?xf32>
    %o = util.call @project(%merged, %wo, %bo, %use_bias)
        : (tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xf32>, i1) -> tensor<?x?xf32>
    // n_embd restates the output width: as an output_shape entry it is checked against it.
    %out = tensor.expand_shape %o [[0, 1], [2]] output_shape [%batch, %seq_len, %n_embd]
        : tensor<?x?xf32> into tensor<?x?x?xf32>
    util.return %out : tensor<?x?x?xf32>
  }

}
