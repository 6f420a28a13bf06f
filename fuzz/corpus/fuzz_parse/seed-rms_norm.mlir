// RMS normalization over the last dim.
//
//   rms_norm_linalg(input [B, E] f32, weight [E] f32, eps f32) -> [B, E] f32
//   rms_norm_fused:  the same signature and maths, inside one flow.dispatch.region
//
// Dynamic dims: B (rows, e.g. tokens) and E (hidden size). weight's E must equal input's E.
//
// Maths, in this order (the order is part of the interface):
//   ss[b]   = sum_j x[b, j]^2                    (accumulated from 0)
//   rms[b]  = sqrt(ss[b] / float(E) + eps)       (E converted index -> i32 -> f32)
//   y[b, i] = x[b, i] / rms[b] * w[i]            (divided, not multiplied by an rsqrt)
//
// Usage:
//   %y = util.call @rms_norm_components.rms_norm_linalg(%x, %w, %eps)
//       : (tensor<?x?xf32>, tensor<?xf32>, f32) -> tensor<?x?xf32>

#row_elem = affine_map<(b, e) -> (b, e)>
#row      = affine_map<(b, e) -> (b)>
#col      = affine_map<(b, e) -> (e)>
#vec      = affine_map<(b) -> (b)>

module @rms_norm_components {

  util.func public @rms_norm_linalg(
      %input: tensor<?x?xf32>,   // [B, E]
      %weight: tensor<?xf32>,    // [E]
      %eps: f32
  ) -> tensor<?x?xf32> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %rows = tensor.dim %input, %c0 : tensor<?x?xf32>
    %hidden = tensor.dim %input, %c1 : tensor<?x?xf32>

    // Sum of squares per row.
    %zero = arith.constant 0.0 : f32
    %ss_empty = tensor.empty(%rows) : tensor<?xf32>
    %ss_init = linalg.fill ins(%zero : f32) outs(%ss_empty : tensor<?xf32>) -> tensor<?xf32>
    %ss = linalg.generic {indexing_maps = [#row_elem, #row],
                          iterator_types = ["parallel", "reduction"]}
        ins(%input : tensor<?x?xf32>) outs(%ss_init : tensor<?xf32>) {
    ^bb0(%x: f32, %acc: f32):
      %sq = arith.mulf %x, %x : f32
      %sum = arith.addf %acc, %sq : f32
      linalg.yield %sum : f32
    } -> tensor<?xf32>

    // rms = sqrt(mean + eps), with E converted through i32 as the interface fixes.
    %hidden_i32 = arith.index_cast %hidden : index to i32
    %hidden_f32 = arith.sitofp %hidden_i32 : i32 to f32
    %rms_empty = tensor.empty(%rows) : tensor<?xf32>
    %rms = linalg.generic {indexing_maps = [#vec, #vec], iterator_types = ["parallel"]}
        ins(%ss : tensor<?xf32>) outs(%rms_empty : tensor<?xf32>) {
    ^bb0(%s: f32, %unused: f32):
      %mean = arith.divf %s, %hidden_f32 : f32
      %shifted = arith.addf %mean, %eps : f32
      %root = math.sqrt %shifted : f32
      linalg.yield %root : f32
    } -> tensor<?xf32>

    // Normalize and scale.
    %out_empty = tensor.empty(%rows, %hidden) : tensor<?x?xf32>
    %out = linalg.generic {indexing_maps = [#row_elem, #row, #col, #row_elem],
                           iterator_types = ["parallel", "parallel"]}
        ins(%input, %rms, %weight : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>)
        outs(%out_empty : tensor<?x?xf32>) {
    ^bb0(%x: f32, %r: f32, %w: f32, %unused: f32):
      %normed = arith.divf %x, %r : f32
      %scaled = arith.mulf %normed, %w : f32
      linalg.yield %scaled : f32
    } -> tensor<?x?xf32>

    util.return %out : tensor<?x?xf32>
  }

  // The same maths, marked as one kernel for the compiler.
  util.func public @rms_norm_fused(
      %input: tensor<?x?xf32>,   // [B, E]
      %weight: tensor<?xf32>,    // [E]
      %eps: f32
  ) -> tensor<?x?xf32> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %rows = tensor.dim %input, %c0 : tensor<?x?xf32>
    %hidden = tensor.dim %input, %c1 : tensor<?x?xf32>
    %out = flow.dispatch.region -> (tensor<?x?xf32>{%rows, %hidden}) {
      %zero = arith.constant 0.0 : f32
      %ss_empty = tensor.empty(%rows) : tensor<?xf32>
      %ss_init = linalg.fill ins(%zero : f32) outs(%ss_empty : tensor<?xf32>) -> tensor<?xf32>
      %ss = linalg.generic {indexing_maps = [#row_elem, #row],
                            iterator_types = ["parallel", "reduction"]}
          ins(%input : tensor<?x?xf32>) outs(%ss_init : tensor<?xf32>) {
      ^bb0(%x: f32, %acc: f32):
        %sq = arith.mulf %x, %x : f32
        %sum = arith.addf %acc, %sq : f32
        linalg.yield %sum : f32
      } -> tensor<?xf32>
      %hidden_i32 = arith.index_cast %hidden : index to i32
      %hidden_f32 = arith.sitofp %hidden_i32 : i32 to f32
      %rms_empty = tensor.empty(%rows) : tensor<?xf32>
      %rms = linalg.generic {indexing_maps = [#vec, #vec], iterator_types = ["parallel"]}
          ins(%ss : tensor<?xf32>) outs(%rms_empty : tensor<?xf32>) {
      ^bb0(%s: f32, %unused: f32):
        %mean = arith.divf %s, %hidden_f32 : f32
        %shifted = arith.addf %mean, %eps : f32
        %root = math.sqrt %shifted : f32
        linalg.yield %root : f32
      } -> tensor<?xf32>
      %out_empty = tensor.empty(%rows, %hidden) : tensor<?x?xf32>
      %result = linalg.generic {indexing_maps = [#row_elem, #row, #col, #row_elem],
                                iterator_types = ["parallel", "parallel"]}
          ins(%input, %rms, %weight : tensor<?x?xf32>, tensor<?xf32>, tensor<?xf32>)
          outs(%out_empty : tensor<?x?xf32>) {
      ^bb0(%x: f32, %r: f32, %w: f32, %unused: f32):
        %normed = arith.divf %x, %r : f32
        %scaled = arith.mulf %normed, %w : f32
        linalg.yield %scaled : f32
      } -> tensor<?x?xf32>
      flow.return %result : tensor<?x?xf32>
    }
    util.return %out : tensor<?x?xf32>
  }

}
