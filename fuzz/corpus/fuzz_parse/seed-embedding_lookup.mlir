// Token embedding lookup: one row of the embedding table per token id.
//
//   embedding_lookup(weight [V, E] f32, indices [B, S] i64) -> [B, S, E] f32
//   embedding_lookup_1d(weight [V, E] f32, indices [B] i64) -> [B, E] f32
//
// Dynamic dims: V (vocabulary), E (n_embd), B (batch) and S (sequence). The output's E comes
// from weight, its batch dims from indices.
//
// Maths: y[b, s, :] = weight[indices[b, s], :] (or y[b, :] = weight[indices[b], :]), an exact
// copy of the row: no arithmetic touches the values. Indices lie in [0, V); an index outside
// is undefined (a debug check).
//
// Each function is one iree_linalg_ext.gather of depth 1 along the vocabulary dim: the index
// tensor's dims are the gather's batch dims and each E-row is the slice.
//
// Usage:
//   %y = util.call @embedding_components.embedding_lookup(%weight, %ids)
//       : (tensor<?x?xf32>, tensor<?x?xi64>) -> tensor<?x?x?xf32>
//   %y = util.call @embedding_components.embedding_lookup_1d(%weight, %ids)
//       : (tensor<?x?xf32>, tensor<?xi64>) -> tensor<?x?xf32>

module @embedding_components {

  util.func public @embedding_lookup(
      %weight: tensor<?x?xf32>,   // [V, E]
      %indices: tensor<?x?xi64>   // [B, S], token ids in [0, V)
  ) -> tensor<?x?x?xf32> {        // [B, S, E]
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %batch = tensor.dim %indices, %c0 : tensor<?x?xi64>
    %seq = tensor.dim %indices, %c1 : tensor<?x?xi64>
    %embd = tensor.dim %weight, %c1 : tensor<?x?xf32>

    // out[b, s, e] = weight[indices[b, s], e]: batch dims (b, s), slice dim e.
    %init = tensor.empty(%batch, %seq, %embd) : tensor<?x?x?xf32>
    %rows = iree_linalg_ext.gather dimension_map = [0]
        ins(%weight, %indices : tensor<?x?xf32>, tensor<?x?xi64>)
        outs(%init : tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
    util.return %rows : tensor<?x?x?xf32>
  }

  util.func public @embedding_lookup_1d(
      %weight: tensor<?x?xf32>,   // [V, E]
      %indices: tensor<?xi64>     // [B], token ids in [0, V)
  ) -> tensor<?x?xf32> {          // [B, E]
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %batch = tensor.dim %indices, %c0 : tensor<?xi64>
    %embd = tensor.dim %weight, %c1 : tensor<?x?xf32>

    // out[b, e] = weight[indices[b], e].
    %init = tensor.empty(%batch, %embd) : tensor<?x?xf32>
    %rows = iree_linalg_ext.gather dimension_map = [0]
        ins(%weight, %indices : tensor<?x?xf32>, tensor<?xi64>)
        outs(%init : tensor<?x?xf32>) -> tensor<?x?xf32>
    util.return %rows : tensor<?x?xf32>
  }

}
