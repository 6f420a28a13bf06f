// Mixture-of-experts feed-forward block: router, top-k selection, SwiGLU experts, weighted sum.
//
//   moe_ffn_block(input [T, E], gate_inp_w [X, E], up_exps_w [F, E, X], gate_exps_w [F, E, X],
//                 down_exps_w [E, F, X], n_expert index, n_expert_used index, n_embd index,
//                 n_ff index, normalize_weights i1) -> [T, E]
//
// Dynamic dims: T (tokens, batch * sequence flattened), E, X, F. k = n_expert_used (at most X,
// checked by topk) sizes the top-k. n_expert and n_embd restate X and E: the temporaries they
// size meet input and gate_inp_w in the router, whose extent checks reject a disagreement.
// n_ff restates F, which comes with the expert weights (mul_mat_id checks that they agree): a
// view of the activations as [n_ff, k, T] checks it.
//
// Maths, in this order:
//   1. logits[x,t] = sum_e Wr[x,e] * in[t,e]                         [X, T]  (router matmul)
//      probs       = softmax over x (dim 0), per token
//   2. w, ids      = top-k of probs over dim 0, best first, ties to the lower expert index
//                    (w [k, T] f32 are the probabilities over all X experts; ids [k, T] i32)
//   3. if normalize_weights: w[j,t] /= sum_j w[j,t]       (otherwise no renormalization)
//   4. rep[e,j,t]  = in[t,e]                                           [E, k, T]
//      up          = mul_mat_id(up_exps_w, rep, ids)                   [F, k, T]
//      gate        = mul_mat_id(gate_exps_w, rep, ids)                 [F, k, T]
//   5. act         = swiglu(gate, up) = gate * silu(up)                (SiLU on up, as §8.2)
//   6. dn          = mul_mat_id(down_exps_w, act, ids)                 [E, k, T]
//      out[t,e]    = sum_j dn[e,j,t] * w[j,t]        (middle-dim reduction, transposed store)
//
// Composition (resolved by the linker through the module symbols):
//   @moe_components.mul_mat_id     (components/moe/mul_mat_id.mlir)
//   @activation_components.swiglu  (components/activation/swiglu.mlir)
//
// Usage:
//   %y = util.call @moe_ffn_components.moe_ffn_block(%x, %router, %up, %gate, %down,
//            %n_expert, %n_expert_used, %n_embd, %n_ff, %normalize)
//       : (tensor<?x?xf32>, tensor<?x?xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>,
//          tensor<?x?x?xf32>, index, index, index, index, i1) -> tensor<?x?xf32>

#kt_kt  = affine_map<(j, t) -> (j, t)>
#kt_t   = affine_map<(j, t) -> (t)>
#ekt    = affine_map<(e, j, t) -> (e, j, t)>
#ekt_kt = affine_map<(e, j, t) -> (j, t)>
#ekt_te = affine_map<(e, j, t) -> (t, e)>

module @moe_ffn_components {

  util.func private @moe_components.mul_mat_id(
      tensor<?x?x?xf32>,  // weights [n_out, n_in, X]
      tensor<?x?x?xf32>,  // input [n_in, k, T]
      tensor<?x?xi32>     // ids [k, T]
  ) -> tensor<?x?x?xf32>  // [n_out, k, T]

  util.func private @activation_components.swiglu(
      tensor<?x?x?xf32>,  // gate
      tensor<?x?x?xf32>   // up
  ) -> tensor<?x?x?xf32>

  util.func public @moe_ffn_block(
      %input: tensor<?x?xf32>,          // [T, E]
      %gate_inp_w: tensor<?x?xf32>,     // router [X, E]
      %up_exps_w: tensor<?x?x?xf32>,    // [F, E, X]
      %gate_exps_w: tensor<?x?x?xf32>,  // [F, E, X]
      %down_exps_w: tensor<?x?x?xf32>,  // [E, F, X]
      %n_expert: index,                 // X
      %n_expert_used: index,            // k
      %n_embd: index,                   // E
      %n_ff: index,                     // F
      %normalize_weights: i1
  ) -> tensor<?x?xf32> {                // [T, E]
    %c0 = arith.constant 0 : index
    %zero = arith.constant 0.0 : f32
    %tokens = tensor.dim %input, %c0 : tensor<?x?xf32>

    // 1. Router: logits [X, T] = Wr [X, E] @ input^T [E, T], then softmax over the experts.
    %input_t_init = tensor.empty(%n_embd, %tokens) : tensor<?x?xf32>
    %input_t = linalg.transpose ins(%input : tensor<?x?xf32>)
        outs(%input_t_init : tensor<?x?xf32>) permutation = [1, 0]
    %logits_empty = tensor.empty(%n_expert, %tokens) : tensor<?x?xf32>
    %logits_zero = linalg.fill ins(%zero : f32) outs(%logits_empty : tensor<?x?xf32>)
        -> tensor<?x?xf32>
    %logits = linalg.matmul ins(%gate_inp_w, %input_t : tensor<?x?xf32>, tensor<?x?xf32>)
        outs(%logits_zero : tensor<?x?xf32>) -> tensor<?x?xf32>
    %probs_init = tensor.empty(%n_expert, %tokens) : tensor<?x?xf32>
    %probs = linalg.softmax dimension(0) ins(%logits : tensor<?x?xf32>)
        outs(%probs_init : tensor<?x?xf32>) -> tensor<?x?xf32>

    // 2. The k most probable experts per token, best first.
    %weights_init = tensor.empty(%n_expert_used, %tokens) : tensor<?x?xf32>
    %ids_init = tensor.empty(%n_expert_used, %tokens) : tensor<?x?xi32>
    %weights, %ids = iree_linalg_ext.topk dimension(0)
        ins(%probs : tensor<?x?xf32>)
        outs(%weights_init, %ids_init : tensor<?x?xf32>, tensor<?x?xi32>) {
    ^bb0(%lhs: f32, %rhs: f32):
      %better = arith.cmpf ogt, %lhs, %rhs : f32
      iree_linalg_ext.yield %better : i1
    } -> tensor<?x?xf32>, tensor<?x?xi32>

    // 3. Optional renormalization of the selected weights per token (an outer-dim reduction).
    %mix = scf.if %normalize_weights -> (tensor<?x?xf32>) {
      %sum_empty = tensor.empty(%tokens) : tensor<?xf32>
      %sum_zero = linalg.fill ins(%zero : f32) outs(%sum_empty : tensor<?xf32>)
          -> tensor<?xf32>
      %sum = linalg.generic {indexing_maps = [#kt_kt, #kt_t],
                             iterator_types = ["reduction", "parallel"]}
          ins(%weights : tensor<?x?xf32>) outs(%sum_zero : tensor<?xf32>) {
      ^bb0(%w: f32, %acc: f32):
        %next = arith.addf %acc, %w : f32
        linalg.yield %next : f32
      } -> tensor<?xf32>
      %normed_empty = tensor.empty(%n_expert_used, %tokens) : tensor<?x?xf32>
      %normed = linalg.generic {indexing_maps = [#kt_kt, #kt_t, #kt_kt],
                                iterator_types = ["parallel", "parallel"]}
          ins(%weights, %sum : tensor<?x?xf32>, tensor<?xf32>)
          outs(%normed_empty : tensor<?x?xf32>) {
      ^bb0(%w: f32, %s: f32, %unused: f32):
        %q = arith.divf %w, %s : f32
        linalg.yield %q : f32
      } -> tensor<?x?xf32>
      scf.yield %normed : tensor<?x?xf32>
    } else {
      scf.yield %weights : tensor<?x?xf32>
    }

    // 4. Each token's input, once per selected expert: rep [E, k, T] from input^T [E, T].
    %rep_init = tensor.empty(%n_embd, %n_expert_used, %tokens) : tensor<?x?x?xf32>
    %rep = linalg.broadcast ins(%input_t : tensor<?x?xf32>)
        outs(%rep_init : tensor<?x?x?xf32>) dimensions = [1]
    %up = util.call @moe_components.mul_mat_id(%up_exps_w, %rep, %ids)
        : (tensor<?x?x?xf32>, tensor<?x?x?xf32>, tensor<?x?xi32>) -> tensor<?x?x?xf32>
    %gate = util.call @moe_components.mul_mat_id(%gate_exps_w, %rep, %ids)
        : (tensor<?x?x?xf32>, tensor<?x?x?xf32>, tensor<?x?xi32>) -> tensor<?x?x?xf32>

    // 5. SwiGLU: gate * silu(up).
    %act_any = util.call @activation_components.swiglu(%gate, %up)
        : (tensor<?x?x?xf32>, tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
    %act = tensor.expand_shape %act_any [[0], [1], [2]]
        output_shape [%n_ff, %n_expert_used, %tokens] : tensor<?x?x?xf32> into tensor<?x?x?xf32>

    // 6. Down projection, then the weighted sum over the k experts, stored as [T, E].
    %down = util.call @moe_components.mul_mat_id(%down_exps_w, %act, %ids)
        : (tensor<?x?x?xf32>, tensor<?x?x?xf32>, tensor<?x?xi32>) -> tensor<?x?x?xf32>
    %out_empty = tensor.empty(%tokens, %n_embd) : tensor<?x?xf32>
    %out_zero = linalg.fill ins(%zero : f32) outs(%out_empty : tensor<?x?xf32>)
        -> tensor<?x?xf32>
    %out = linalg.generic {indexing_maps = [#ekt, #ekt_kt, #ekt_te],
                           iterator_types = ["parallel", "reduction", "parallel"]}
        ins(%down, %mix : tensor<?x?x?xf32>, tensor<?x?xf32>)
        outs(%out_zero : tensor<?x?xf32>) {
    ^bb0(%d: f32, %w: f32, %acc: f32):
      %weighted = arith.mulf %d, %w : f32
      %next = arith.addf %acc, %weighted : f32
      linalg.yield %next : f32
    } -> tensor<?x?xf32>
    util.return %out : tensor<?x?xf32>
  }

}
