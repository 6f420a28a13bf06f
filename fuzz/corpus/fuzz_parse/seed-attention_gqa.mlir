// Grouped-query attention (GQA) over [batch, seq, head, head_dim] tensors.
//
//   attention_gqa(query [B, S, H, D], key [B, Skv, Hkv, D], value [B, Skv, Hkv, D], scale f32)
//       -> [B, S, H, D]
//   attention_gqa_causal: the same signature; query position i sees key positions
//       j <= i + (Skv - S) (the queries are the last S of Skv positions)
//   attention_gqa_decode: the same signature for one query position (S = 1) against Skv keys
//
// Dynamic dims: all of them. B, S and H come from query; Skv and Hkv from key; the output's last
// dim from value (the interface has it equal to D). Hkv divides H; S and Skv may differ.
//
// Maths, with G = H / Hkv query heads per KV head and g(h) = floor(h / G), so that KV heads are
// repeated contiguously (H0, H0, H1, H1, ... for G = 2, not tiled):
//   logit[b,s,h,j] = scale * sum_d Q[b,s,h,d] * K[b,j,g(h),d]
//   out[b,s,h,:]   = sum_j softmax_j(logit[b,s,h,j] [+ mask]) * V[b,j,g(h),:]
// The softmax runs over key positions. attention_gqa has no mask at all; the causal form masks
// j > i + (Skv - S) out (a query row with no visible key is undefined: it needs Skv >= S).
// `scale` is an argument: callers pass 1/sqrt(D).
//
// KV heads are never repeated in memory. The G query heads that share a KV head are folded into
// the attention's query dim instead:
//   Q [B,S,H,D] -expand-> [B,S,Hkv,G,D] -transpose-> [B,Hkv,G,S,D] -collapse-> [B*Hkv, G*S, D]
//   K [B,Skv,Hkv,D] -transpose-> [B,Hkv,Skv,D] -collapse-> [B*Hkv, Skv, D]   (V likewise)
//   attention -> [B*Hkv, G*S, D] -expand-> [B,Hkv,G,S,D] -transpose-> [B,S,Hkv,G,D]
//             -collapse-> [B,S,H,D]
// Every temporary is sized from the operand it describes (Skv from key, never from query), so
// the functions are well defined for Skv != S.
//
// Usage:
//   util.func private @attention_components.attention_gqa(
//       tensor<?x?x?x?xf32>, tensor<?x?x?x?xf32>, tensor<?x?x?x?xf32>, f32) -> tensor<?x?x?x?xf32>
//   %out = util.call @attention_components.attention_gqa(%q, %k, %v, %scale)
//       : (tensor<?x?x?x?xf32>, tensor<?x?x?x?xf32>, tensor<?x?x?x?xf32>, f32)
//       -> tensor<?x?x?x?xf32>

// iree_linalg_ext.attention over (batch, query, head_dim, key, value_dim).
#att_q     = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>
#att_k     = affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d2)>
#att_v     = affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d4)>
#att_scale = affine_map<(d0, d1, d2, d3, d4) -> ()>
#att_mask  = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3)>
#att_out   = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4)>

// The causal mask in the grouped layout [B*Hkv, G, S, Skv].
#mask_4d = affine_map<(bh, g, s, j) -> (bh, g, s, j)>

module @attention_components {

  util.func public @attention_gqa(
      %query: tensor<?x?x?x?xf32>,   // [B, S, H, D]
      %key: tensor<?x?x?x?xf32>,     // [B, Skv, Hkv, D]
      %value: tensor<?x?x?x?xf32>,   // [B, Skv, Hkv, D]
      %scale: f32                    // 1/sqrt(D)
  ) -> tensor<?x?x?x?xf32> {         // [B, S, H, D]
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c3 = arith.constant 3 : index
    %batch = tensor.dim %query, %c0 : tensor<?x?x?x?xf32>
    %seq_len = tensor.dim %query, %c1 : tensor<?x?x?x?xf32>
    %n_head = tensor.dim %query, %c2 : tensor<?x?x?x?xf32>
    %head_dim = tensor.dim %query, %c3 : tensor<?x?x?x?xf32>
    %kv_len = tensor.dim %key, %c1 : tensor<?x?x?x?xf32>
    %n_head_kv = tensor.dim %key, %c2 : tensor<?x?x?x?xf32>
    %v_dim = tensor.dim %value, %c3 : tensor<?x?x?x?xf32>
    %group = arith.divui %n_head, %n_head_kv : index

    // Q: split each head into (KV head, member of its group), then move the sequence next to
    // the group so that the group and the sequence form the attention's query dim.
    %q_split = tensor.expand_shape %query [[0], [1], [2, 3], [4]]
        output_shape [%batch, %seq_len, %n_head_kv, %group, %head_dim]
        : tensor<?x?x?x?xf32> into tensor<?x?x?x?x?xf32>
    %q_t_init = tensor.empty(%batch, %n_head_kv, %group, %seq_len, %head_dim)
        : tensor<?x?x?x?x?xf32>
    %q_t = linalg.transpose ins(%q_split : tensor<?x?x?x?x?xf32>)
        outs(%q_t_init : tensor<?x?x?x?x?xf32>) permutation = [0, 2, 3, 1, 4]
    %q_3d = tensor.collapse_shape %q_t [[0, 1], [2, 3], [4]]
        : tensor<?x?x?x?x?xf32> into tensor<?x?x?xf32>

    // K and V: [B, Skv, Hkv, D] -> [B, Hkv, Skv, D] -> [B*Hkv, Skv, D], sized from key/value.
    %k_t_init = tensor.empty(%batch, %n_head_kv, %kv_len, %head_dim) : tensor<?x?x?x?xf32>
    %k_t = linalg.transpose ins(%key : tensor<?x?x?x?xf32>)
        outs(%k_t_init : tensor<?x?x?x?xf32>) permutation = [0, 2, 1, 3]
    %k_3d = tensor.collapse_shape %k_t [[0, 1], [2], [3]]
        : tensor<?x?x?x?xf32> into tensor<?x?x?xf32>
    %v_t_init = tensor.empty(%batch, %n_head_kv, %kv_len, %v_dim) : tensor<?x?x?x?xf32>
    %v_t = linalg.transpose ins(%value : tensor<?x?x?x?xf32>)
        outs(%v_t_init : tensor<?x?x?x?xf32>) permutation = [0, 2, 1, 3]
    %v_3d = tensor.collapse_shape %v_t [[0, 1], [2], [3]]
        : tensor<?x?x?x?xf32> into tensor<?x?x?xf32>

    %batch_heads_kv = arith.muli %batch, %n_head_kv : index
    %queries = arith.muli %group, %seq_len : index
    %o_init = tensor.empty(%batch_heads_kv, %queries, %v_dim) : tensor<?x?x?xf32>
    %o_3d = iree_linalg_ext.attention
        {indexing_maps = [#att_q, #att_k, #att_v, #att_scale, #att_out]}
        ins(%q_3d, %k_3d, %v_3d, %scale
            : tensor<?x?x?xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>, f32)
        outs(%o_init : tensor<?x?x?xf32>) {
    ^bb0(%score: f32):
      iree_linalg_ext.yield %score : f32
    } -> tensor<?x?x?xf32>

    // Back to [B, S, H, D]: undo the grouping, then merge (KV head, group member) into H.
    %o_5d = tensor.expand_shape %o_3d [[0, 1], [2, 3], [4]]
        output_shape [%batch, %n_head_kv, %group, %seq_len, %v_dim]
        : tensor<?x?x?xf32> into tensor<?x?x?x?x?xf32>
    %o_t_init = tensor.empty(%batch, %seq_len, %n_head_kv, %group, %v_dim)
        : tensor<?x?x?x?x?xf32>
    %o_t = linalg.transpose ins(%o_5d : tensor<?x?x?x?x?xf32>)
        outs(%o_t_init : tensor<?x?x?x?x?xf32>) permutation = [0, 3, 1, 2, 4]
    %out = tensor.collapse_shape %o_t [[0], [1], [2, 3], [4]]
        : tensor<?x?x?x?x?xf32> into tensor<?x?x?x?xf32>
    util.return %out : tensor<?x?x?x?xf32>
  }

  // Causal prefill: the S queries are the last S of the Skv positions, so query i sees keys
  // j <= i + (Skv - S). With Skv == S this is the usual lower-triangular mask.
  util.func public @attention_gqa_causal(
      %query: tensor<?x?x?x?xf32>,   // [B, S, H, D]
      %key: tensor<?x?x?x?xf32>,     // [B, Skv, Hkv, D]
      %value: tensor<?x?x?x?xf32>,   // [B, Skv, Hkv, D]
      %scale: f32                    // 1/sqrt(D)
  ) -> tensor<?x?x?x?xf32> {         // [B, S, H, D]
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c3 = arith.constant 3 : index
    %batch = tensor.dim %query, %c0 : tensor<?x?x?x?xf32>
    %seq_len = tensor.dim %query, %c1 : tensor<?x?x?x?xf32>
    %n_head = tensor.dim %query, %c2 : tensor<?x?x?x?xf32>
    %head_dim = tensor.dim %query, %c3 : tensor<?x?x?x?xf32>
    %kv_len = tensor.dim %key, %c1 : tensor<?x?x?x?xf32>
    %n_head_kv = tensor.dim %key, %c2 : tensor<?x?x?x?xf32>
    %v_dim = tensor.dim %value, %c3 : tensor<?x?x?x?xf32>
    %group = arith.divui %n_head, %n_head_kv : index

    %q_split = tensor.expand_shape %query [[0], [1], [2, 3], [4]]
        output_shape [%batch, %seq_len, %n_head_kv, %group, %head_dim]
        : tensor<?x?x?x?xf32> into tensor<?x?x?x?x?xf32>
    %q_t_init = tensor.empty(%batch, %n_head_kv, %group, %seq_len, %head_dim)
        : tensor<?x?x?x?x?xf32>
    %q_t = linalg.transpose ins(%q_split : tensor<?x?x?x?x?xf32>)
        outs(%q_t_init : tensor<?x?x?x?x?xf32>) permutation = [0, 2, 3, 1, 4]
    %q_3d = tensor.collapse_shape %q_t [[0, 1], [2, 3], [4]]
        : tensor<?x?x?x?x?xf32> into tensor<?x?x?xf32>

    %k_t_init = tensor.empty(%batch, %n_head_kv, %kv_len, %head_dim) : tensor<?x?x?x?xf32>
    %k_t = linalg.transpose ins(%key : tensor<?x?x?x?xf32>)
        outs(%k_t_init : tensor<?x?x?x?xf32>) permutation = [0, 2, 1, 3]
    %k_3d = tensor.collapse_shape %k_t [[0, 1], [2], [3]]
        : tensor<?x?x?x?xf32> into tensor<?x?x?xf32>
    %v_t_init = tensor.empty(%batch, %n_head_kv, %kv_len, %v_dim) : tensor<?x?x?x?xf32>
    %v_t = linalg.transpose ins(%value : tensor<?x?x?x?xf32>)
        outs(%v_t_init : tensor<?x?x?x?xf32>) permutation = [0, 2, 1, 3]
    %v_3d = tensor.collapse_shape %v_t [[0, 1], [2], [3]]
        : tensor<?x?x?x?xf32> into tensor<?x?x?xf32>

    // The i1 mask (true keeps the key) in the grouped query layout: row (g, s) of batch-head bh
    // keeps key j when j <= s + (Skv - S). Index values are signed, so Skv < S is well formed.
    %batch_heads_kv = arith.muli %batch, %n_head_kv : index
    %offset = arith.subi %kv_len, %seq_len : index
    %mask_init = tensor.empty(%batch_heads_kv, %group, %seq_len, %kv_len) : tensor<?x?x?x?xi1>
    %mask_4d = linalg.generic {indexing_maps = [#mask_4d],
                               iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
        outs(%mask_init : tensor<?x?x?x?xi1>) {
    ^bb0(%unused: i1):
      %s = linalg.index 2 : index
      %j = linalg.index 3 : index
      %last_visible = arith.addi %s, %offset : index
      %keep = arith.cmpi sle, %j, %last_visible : index
      linalg.yield %keep : i1
    } -> tensor<?x?x?x?xi1>
    %mask = tensor.collapse_shape %mask_4d [[0], [1, 2], [3]]
        : tensor<?x?x?x?xi1> into tensor<?x?x?xi1>

    %queries = arith.muli %group, %seq_len : index
    %o_init = tensor.empty(%batch_heads_kv, %queries, %v_dim) : tensor<?x?x?xf32>
    %o_3d = iree_linalg_ext.attention
        {indexing_maps = [#att_q, #att_k, #att_v, #att_scale, #att_mask, #att_out]}
        ins(%q_3d, %k_3d, %v_3d, %scale, %mask
            : tensor<?x?x?xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>, f32, tensor<?x?x?xi1>)
        outs(%o_init : tensor<?x?x?xf32>) {
    ^bb0(%score: f32):
      iree_linalg_ext.yield %score : f32
    } -> tensor<?x?x?xf32>

    %o_5d = tensor.expand_shape %o_3d [[0, 1], [2, 3], [4]]
        output_shape [%batch, %n_head_kv, %group, %seq_len, %v_dim]
        : tensor<?x?x?xf32> into tensor<?x?x?x?x?xf32>
    %o_t_init = tensor.empty(%batch, %seq_len, %n_head_kv, %group, %v_dim)
        : tensor<?x?x?x?x?xf32>
    %o_t = linalg.transpose ins(%o_5d : tensor<?x?x?x?x?xf32>)
        outs(%o_t_init : tensor<?x?x?x?x?xf32>) permutation = [0, 3, 1, 2, 4]
    %out = tensor.collapse_shape %o_t [[0], [1], [2, 3], [4]]
        : tensor<?x?x?x?x?xf32> into tensor<?x?x?x?xf32>
    util.return %out : tensor<?x?x?x?xf32>
  }

  // Decode: one query position (S = 1) against Skv keys, no mask (the new token sees every key).
  // With S = 1 the query heads of a group are already adjacent, so Q and the output need no
  // transpose: [B, 1, H, D] is viewed as [B*1*Hkv, G, D]. For S != 1 the attention's batch dim
  // would be B*S*Hkv against key's B*Hkv, which the extent check reports.
  util.func public @attention_gqa_decode(
      %query: tensor<?x?x?x?xf32>,   // [B, 1, H, D]
      %key: tensor<?x?x?x?xf32>,     // [B, Skv, Hkv, D]
      %value: tensor<?x?x?x?xf32>,   // [B, Skv, Hkv, D]
      %scale: f32                    // 1/sqrt(D)
  ) -> tensor<?x?x?x?xf32> {         // [B, 1, H, D]
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c3 = arith.constant 3 : index
    %batch = tensor.dim %query, %c0 : tensor<?x?x?x?xf32>
    %seq_len = tensor.dim %query, %c1 : tensor<?x?x?x?xf32>
    %n_head = tensor.dim %query, %c2 : tensor<?x?x?x?xf32>
    %head_dim = tensor.dim %query, %c3 : tensor<?x?x?x?xf32>
    %kv_len = tensor.dim %key, %c1 : tensor<?x?x?x?xf32>
    %n_head_kv = tensor.dim %key, %c2 : tensor<?x?x?x?xf32>
    %v_dim = tensor.dim %value, %c3 : tensor<?x?x?x?xf32>
    %group = arith.divui %n_head, %n_head_kv : index

    %q_split = tensor.expand_shape %query [[0], [1], [2, 3], [4]]
        output_shape [%batch, %seq_len, %n_head_kv, %group, %head_dim]
        : tensor<?x?x?x?xf32> into tensor<?x?x?x?x?xf32>
    %q_3d = tensor.collapse_shape %q_split [[0, 1, 2], [3], [4]]
        : tensor<?x?x?x?x?xf32> into tensor<?x?x?xf32>

    %k_t_init = tensor.empty(%batch, %n_head_kv, %kv_len, %head_dim) : tensor<?x?x?x?xf32>
    %k_t = linalg.transpose ins(%key : tensor<?x?x?x?xf32>)
        outs(%k_t_init : tensor<?x?x?x?xf32>) permutation = [0, 2, 1, 3]
    %k_3d = tensor.collapse_shape %k_t [[0, 1], [2], [3]]
        : tensor<?x?x?x?xf32> into tensor<?x?x?xf32>
    %v_t_init = tensor.empty(%batch, %n_head_kv, %kv_len, %v_dim) : tensor<?x?x?x?xf32>
    %v_t = linalg.transpose ins(%value : tensor<?x?x?x?xf32>)
        outs(%v_t_init : tensor<?x?x?x?xf32>) permutation = [0, 2, 1, 3]
    %v_3d = tensor.collapse_shape %v_t [[0, 1], [2], [3]]
        : tensor<?x?x?x?xf32> into tensor<?x?x?xf32>

    %rows = arith.muli %batch, %seq_len : index
    %batch_heads_kv = arith.muli %rows, %n_head_kv : index
    %o_init = tensor.empty(%batch_heads_kv, %group, %v_dim) : tensor<?x?x?xf32>
    %o_3d = iree_linalg_ext.attention
        {indexing_maps = [#att_q, #att_k, #att_v, #att_scale, #att_out]}
        ins(%q_3d, %k_3d, %v_3d, %scale
            : tensor<?x?x?xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>, f32)
        outs(%o_init : tensor<?x?x?xf32>) {
    ^bb0(%score: f32):
      iree_linalg_ext.yield %score : f32
    } -> tensor<?x?x?xf32>

    %o_5d = tensor.expand_shape %o_3d [[0, 1, 2], [3], [4]]
        output_shape [%batch, %seq_len, %n_head_kv, %group, %v_dim]
        : tensor<?x?x?xf32> into tensor<?x?x?x?x?xf32>
    %out = tensor.collapse_shape %o_5d [[0], [1], [2, 3], [4]]
        : tensor<?x?x?x?x?xf32> into tensor<?x?x?x?xf32>
    util.return %out : tensor<?x?x?x?xf32>
  }

}
