// scf.for carrying a tensor (updated in place by insert_slice) and a scalar; a scalar result.
func.func @f(%x: tensor<?x4xf32>, %steps: index) -> (tensor<?x4xf32>, f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = tensor.dim %x, %c0 : tensor<?x4xf32>
  %zero = arith.constant 0.0 : f32
  // Row i of the result: row i of x plus i * 1.0, built by inserting one row per iteration.
  %r, %total = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %x, %sum = %zero) -> (tensor<?x4xf32>, f32) {
    %row = tensor.extract_slice %acc[%i, 0] [1, 4] [1, 1] : tensor<?x4xf32> to tensor<4xf32>
    %i32 = arith.index_cast %i : index to i32
    %fi = arith.sitofp %i32 : i32 to f32
    %e = tensor.empty() : tensor<4xf32>
    %shifted = linalg.generic {indexing_maps = [affine_map<(j) -> (j)>, affine_map<(j) -> (j)>], iterator_types = ["parallel"]}
        ins(%row : tensor<4xf32>) outs(%e : tensor<4xf32>) {
    ^bb0(%a: f32, %o: f32):
      %v = arith.addf %a, %fi : f32
      linalg.yield %v : f32
    } -> tensor<4xf32>
    %next = tensor.insert_slice %shifted into %acc[%i, 0] [1, 4] [1, 1] : tensor<4xf32> into tensor<?x4xf32>
    %s2 = arith.addf %sum, %fi : f32
    scf.yield %next, %s2 : tensor<?x4xf32>, f32
  }
  return %r, %total : tensor<?x4xf32>, f32
}
