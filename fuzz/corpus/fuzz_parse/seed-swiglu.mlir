// SwiGLU activation.
//
//   swiglu(gate [d0, d1, d2] f32, up [d0, d1, d2] f32) -> [d0, d1, d2] f32
//
// Dynamic dims: all three (batch, sequence, n_ff); both inputs must have equal extents.
//
// Maths: y = gate * silu(up), with silu(u) = u * 1 / (1 + exp(-u)).
// SiLU is applied to the second argument, `up`: that is the interface. Checkpoints that apply
// SiLU to their gate projection (Llama, Mixtral) pass it as `up`.
//
// Usage:
//   %y = util.call @activation_components.swiglu(%gate, %up)
//       : (tensor<?x?x?xf32>, tensor<?x?x?xf32>) -> tensor<?x?x?xf32>

#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>

module @activation_components {

  util.func public @swiglu(
      %gate: tensor<?x?x?xf32>,  // [d0, d1, d2]
      %up: tensor<?x?x?xf32>     // [d0, d1, d2]
  ) -> tensor<?x?x?xf32> {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %d0 = tensor.dim %gate, %c0 : tensor<?x?x?xf32>
    %d1 = tensor.dim %gate, %c1 : tensor<?x?x?xf32>
    %d2 = tensor.dim %gate, %c2 : tensor<?x?x?xf32>
    %empty = tensor.empty(%d0, %d1, %d2) : tensor<?x?x?xf32>
    %out = linalg.generic {indexing_maps = [#id3, #id3, #id3],
                           iterator_types = ["parallel", "parallel", "parallel"]}
        ins(%gate, %up : tensor<?x?x?xf32>, tensor<?x?x?xf32>)
        outs(%empty : tensor<?x?x?xf32>) {
    ^bb0(%g: f32, %u: f32, %unused: f32):
      %one = arith.constant 1.0 : f32
      %neg_u = arith.negf %u : f32
      %e = math.exp %neg_u : f32
      %denom = arith.addf %one, %e : f32
      %sigmoid = arith.divf %one, %denom : f32
      %silu = arith.mulf %u, %sigmoid : f32
      %y = arith.mulf %g, %silu : f32
      linalg.yield %y : f32
    } -> tensor<?x?x?xf32>
    util.return %out : tensor<?x?x?xf32>
  }

}
