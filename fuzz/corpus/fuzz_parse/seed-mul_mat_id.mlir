// Indirect (expert-selected) matrix-vector products: ggml's mul_mat_id for mixture-of-experts.
//
//   mul_mat_id(weights [n_out, n_in, X] f32, input [n_in, k, T] f32, ids [k, T] i32)
//       -> [n_out, k, T] f32
//
// Dynamic dims: n_out, n_in, X (experts), k (experts used per token) and T (tokens). input's
// n_in must equal weights' n_in, and ids' [k, T] must equal input's.
//
// Maths: for every token t and slot e, with x = ids[e, t] in [0, X) (a debug check):
//   out[o, e, t] = sum_i weights[o, i, x] * input[i, e, t]      (accumulated from 0)
//
// Written as IREE model code does it: the expert dim is moved to the front, the selected
// experts' [n_out, n_in] matrices are gathered per (slot, token) by iree_linalg_ext.gather,
// and one contraction over n_in multiplies each with its input column and stores the result
// as [n_out, k, T]. The compiler is expected to fuse the permutation and the gather into the
// contraction so that no gathered copy is materialized.
//
// Usage:
//   %y = util.call @moe_components.mul_mat_id(%weights, %x, %ids)
//       : (tensor<?x?x?xf32>, tensor<?x?x?xf32>, tensor<?x?xi32>) -> tensor<?x?x?xf32>

#w_src  = affine_map<(x, o, i) -> (o, i, x)>
#w_dst  = affine_map<(x, o, i) -> (x, o, i)>
#mm_w   = affine_map<(o, e, t, i) -> (e, t, o, i)>
#mm_in  = affine_map<(o, e, t, i) -> (i, e, t)>
#mm_out = affine_map<(o, e, t, i) -> (o, e, t)>

module @moe_components {

  util.func public @mul_mat_id(
      %weights: tensor<?x?x?xf32>,  // [n_out, n_in, X]
      %input: tensor<?x?x?xf32>,    // [n_in, k, T]
      %ids: tensor<?x?xi32>         // [k, T], expert ids in [0, X)
  ) -> tensor<?x?x?xf32> {          // [n_out, k, T]
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %n_out = tensor.dim %weights, %c0 : tensor<?x?x?xf32>
    %n_in = tensor.dim %weights, %c1 : tensor<?x?x?xf32>
    %n_expert = tensor.dim %weights, %c2 : tensor<?x?x?xf32>
    %n_used = tensor.dim %ids, %c0 : tensor<?x?xi32>
    %n_tokens = tensor.dim %ids, %c1 : tensor<?x?xi32>

    // Experts first: weights_x[x, o, i] = weights[o, i, x].
    %wx_empty = tensor.empty(%n_expert, %n_out, %n_in) : tensor<?x?x?xf32>
    %weights_x = linalg.generic {indexing_maps = [#w_src, #w_dst],
                                 iterator_types = ["parallel", "parallel", "parallel"]}
        ins(%weights : tensor<?x?x?xf32>) outs(%wx_empty : tensor<?x?x?xf32>) {
    ^bb0(%w: f32, %unused: f32):
      linalg.yield %w : f32
    } -> tensor<?x?x?xf32>

    // The selected matrix per slot and token: selected[e, t, o, i] = weights_x[ids[e, t], o, i].
    %sel_empty = tensor.empty(%n_used, %n_tokens, %n_out, %n_in) : tensor<?x?x?x?xf32>
    %selected = iree_linalg_ext.gather dimension_map = [0]
        ins(%weights_x, %ids : tensor<?x?x?xf32>, tensor<?x?xi32>)
        outs(%sel_empty : tensor<?x?x?x?xf32>) -> tensor<?x?x?x?xf32>

    // out[o, e, t] = sum_i selected[e, t, o, i] * input[i, e, t], stored as [n_out, k, T].
    %zero = arith.constant 0.0 : f32
    %out_empty = tensor.empty(%n_out, %n_used, %n_tokens) : tensor<?x?x?xf32>
    %out_zero = linalg.fill ins(%zero : f32) outs(%out_empty : tensor<?x?x?xf32>)
        -> tensor<?x?x?xf32>
    %out = linalg.generic {indexing_maps = [#mm_w, #mm_in, #mm_out],
                           iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
        ins(%selected, %input : tensor<?x?x?x?xf32>, tensor<?x?x?xf32>)
        outs(%out_zero : tensor<?x?x?xf32>) {
    ^bb0(%w: f32, %x: f32, %acc: f32):
      %prod = arith.mulf %w, %x : f32
      %sum = arith.addf %acc, %prod : f32
      linalg.yield %sum : f32
    } -> tensor<?x?x?xf32>
    util.return %out : tensor<?x?x?xf32>
  }

}
