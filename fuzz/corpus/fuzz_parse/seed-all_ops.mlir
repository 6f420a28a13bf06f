// Every op form of the Tier-1 subset in one function: parsed, printed, re-parsed.
#q = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>
#k = affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d2)>
#v = affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d4)>
#s = affine_map<(d0, d1, d2, d3, d4) -> ()>
#o = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4)>
module @m {
  util.func public @f(%x: tensor<?x?xf32>, %i: tensor<?xi64>, %w: tensor<?x?xf32>, %b: i1, %q: tensor<?x?x?xf32>, %n: index) -> (tensor<?x2x?xf32>, tensor<?x?xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %n2 = util.assume.int %n<umin = 1, umax = 4096, udiv = 2> : index
    %d0 = tensor.dim %x, %c0 : tensor<?x?xf32>
    %d1 = tensor.dim %x, %c1 : tensor<?x?xf32>
    %h = arith.divui %d1, %c2 : index
    %e = tensor.expand_shape %x [[0], [1, 2]] output_shape [%d0, 2, %h] : tensor<?x?xf32> into tensor<?x2x?xf32>
    %cl = tensor.collapse_shape %e [[0], [1, 2]] : tensor<?x2x?xf32> into tensor<?x?xf32>
    %sl = tensor.extract_slice %cl[0, %c1] [%d0, 4] [1, 1] : tensor<?x?xf32> to tensor<?x4xf32>
    %ins = tensor.insert_slice %sl into %x[0, 0] [%d0, 4] [1, 1] : tensor<?x4xf32> into tensor<?x?xf32>
    %cast = tensor.cast %ins : tensor<?x?xf32> to tensor<?x?xf32>
    %empty = tensor.empty(%d0, %d0) : tensor<?x?xf32>
    %mm = linalg.matmul ins(%cast, %w : tensor<?x?xf32>, tensor<?x?xf32>) outs(%empty : tensor<?x?xf32>) -> tensor<?x?xf32>
    %tr = linalg.transpose ins(%mm : tensor<?x?xf32>) outs(%empty : tensor<?x?xf32>) permutation = [1, 0]
    %sm = linalg.softmax dimension(1) ins(%tr : tensor<?x?xf32>) outs(%empty : tensor<?x?xf32>) -> tensor<?x?xf32>
    %re = tensor.empty(%d0) : tensor<?xf32>
    %red = linalg.reduce ins(%sm : tensor<?x?xf32>) outs(%re : tensor<?xf32>) dimensions = [1] (%in: f32, %acc: f32) {
      %s = arith.addf %in, %acc : f32
      linalg.yield %s : f32
    }
    %bc = linalg.broadcast ins(%red : tensor<?xf32>) outs(%empty : tensor<?x?xf32>) dimensions = [1]
    %ni = tensor.dim %i, %c0 : tensor<?xi64>
    %ge = tensor.empty(%ni, %d1) : tensor<?x?xf32>
    %g = iree_linalg_ext.gather dimension_map = [0] ins(%x, %i : tensor<?x?xf32>, tensor<?xi64>) outs(%ge : tensor<?x?xf32>) -> tensor<?x?xf32>
    %tv = tensor.empty(%c2, %d1) : tensor<?x?xf32>
    %ti = tensor.empty(%c2, %d1) : tensor<?x?xi32>
    %vals, %idxs = iree_linalg_ext.topk dimension(0) ins(%x : tensor<?x?xf32>) outs(%tv, %ti : tensor<?x?xf32>, tensor<?x?xi32>) {
    ^bb0(%l: f32, %r: f32):
      %c = arith.cmpf ogt, %l, %r : f32
      iree_linalg_ext.yield %c : i1
    } -> tensor<?x?xf32>, tensor<?x?xi32>
    %scale = arith.constant 0.125 : f32
    %att = iree_linalg_ext.attention {indexing_maps = [#q, #k, #v, #s, #o]} ins(%q, %q, %q, %scale : tensor<?x?x?xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>, f32) outs(%q : tensor<?x?x?xf32>) {
    ^bb0(%sc: f32):
      iree_linalg_ext.yield %sc : f32
    } -> tensor<?x?x?xf32>
    %sel = scf.if %b -> (tensor<?x?xf32>) {
      scf.yield %bc : tensor<?x?xf32>
    } else {
      scf.yield %g : tensor<?x?xf32>
    }
    %acc = scf.for %it = %c0 to %n2 step %c1 iter_args(%a = %sel) -> (tensor<?x?xf32>) {
      scf.yield %a : tensor<?x?xf32>
    }
    %cst = arith.constant dense<[[1.0, 2.0], [3.0, 0xFF800000]]> : tensor<2x2xf32>
    %spl = arith.constant dense<0.5> : tensor<4xf32>
    %xe = tensor.extract %x[%c0, %c1] : tensor<?x?xf32>
    util.return %e, %acc : tensor<?x2x?xf32>, tensor<?x?xf32>
  }
}
