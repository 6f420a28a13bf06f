// Dense projections: the matmuls of every linear layer.
//
//   matmul(x [M, K] f32, w [K, N] f32) -> [M, N] f32          y = x w
//   matmul_transpose_b(x [M, K] f32, w [N, K] f32) -> [M, N] f32  y = x w^T
//
// Dynamic dims: all of them. K must agree between the operands. matmul takes weights stored
// [in, out] (GGUF-converted and NumPy layouts); matmul_transpose_b takes them [out, in], as
// PyTorch's nn.Linear stores them. M is the token count: M = 1 is a matrix-vector product
// (decode), M > 1 a matrix product (prefill).
//
// Usage:
//   %y = util.call @linear_components.matmul(%x, %w)
//       : (tensor<?x?xf32>, tensor<?x?xf32>) -> tensor<?x?xf32>

#x_mk = affine_map<(m, n, k) -> (m, k)>
#w_nk = affine_map<(m, n, k) -> (n, k)>
#y_mn = affine_map<(m, n, k) -> (m, n)>

module @linear_components {

  util.func public @matmul(
      %x: tensor<?x?xf32>,  // [M, K]
      %w: tensor<?x?xf32>   // [K, N]
  ) -> tensor<?x?xf32> {    // [M, N]
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %zero = arith.constant 0.0 : f32
    %m = tensor.dim %x, %c0 : tensor<?x?xf32>
    %n = tensor.dim %w, %c1 : tensor<?x?xf32>
    %empty = tensor.empty(%m, %n) : tensor<?x?xf32>
    %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x?xf32>) -> tensor<?x?xf32>
    %y = linalg.matmul ins(%x, %w : tensor<?x?xf32>, tensor<?x?xf32>)
        outs(%acc : tensor<?x?xf32>) -> tensor<?x?xf32>
    util.return %y : tensor<?x?xf32>
  }

  util.func public @matmul_transpose_b(
      %x: tensor<?x?xf32>,  // [M, K]
      %w: tensor<?x?xf32>   // [N, K]
  ) -> tensor<?x?xf32> {    // [M, N]
    %c0 = arith.constant 0 : index
    %zero = arith.constant 0.0 : f32
    %m = tensor.dim %x, %c0 : tensor<?x?xf32>
    %n = tensor.dim %w, %c0 : tensor<?x?xf32>
    %empty = tensor.empty(%m, %n) : tensor<?x?xf32>
    %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<?x?xf32>) -> tensor<?x?xf32>
    %y = linalg.generic {indexing_maps = [#x_mk, #w_nk, #y_mn],
                         iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%x, %w : tensor<?x?xf32>, tensor<?x?xf32>)
        outs(%acc : tensor<?x?xf32>) {
    ^bb0(%a: f32, %b: f32, %sum: f32):
      %p = arith.mulf %a, %b : f32
      %s = arith.addf %sum, %p : f32
      linalg.yield %s : f32
    } -> tensor<?x?xf32>
    util.return %y : tensor<?x?xf32>
  }
}
