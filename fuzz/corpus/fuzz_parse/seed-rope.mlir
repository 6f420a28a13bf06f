// Rotary position embedding (RoPE), adjacent-pair ("normal", GPT-J / llama.cpp) mode.
//
//   rope(input [B, S, H, D] f32, positions [B, S] i64, freq_base f32, freq_scale f32)
//       -> [B, S, H, D] f32
//
// Dynamic dims: B (batch), S (sequence), H (heads) and D (head dim, even). positions' B and S
// must equal input's; the positions are shared by every head.
//
// Maths, in this order, all in f32 (the order is part of the interface):
//   theta[i] = powf(freq_base, -(2 * float(i) / float(D))) * freq_scale     for i < D/2
//              (i and D converted index -> i32 -> f32)
//   a        = float(int32(pos[b, s])) * theta[i]     (the i64 position truncated to i32 first)
//   y[.., 2i]   = x[.., 2i] * cos(a) - x[.., 2i+1] * sin(a)
//   y[.., 2i+1] = x[.., 2i] * sin(a) + x[.., 2i+1] * cos(a)
// The pairs are adjacent elements (2i, 2i+1), not the NeoX halves (i, i + D/2). Position 0
// returns the input.
//
// The head dim is viewed as [D/2, 2] so that one generic reads both elements of a pair through
// the constant map results 0 and 1 and writes element k of the pair it is at.
//
// Usage:
//   %y = util.call @position_components.rope(%x, %pos, %freq_base, %freq_scale)
//       : (tensor<?x?x?x?xf32>, tensor<?x?xi64>, f32, f32) -> tensor<?x?x?x?xf32>

#pair_id     = affine_map<(b, s, h, i, k) -> (b, s, h, i, k)>
#pair_first  = affine_map<(b, s, h, i, k) -> (b, s, h, i, 0)>
#pair_second = affine_map<(b, s, h, i, k) -> (b, s, h, i, 1)>
#pair_pos    = affine_map<(b, s, h, i, k) -> (b, s)>
#pair_theta  = affine_map<(b, s, h, i, k) -> (i)>
#half        = affine_map<(i) -> (i)>

module @position_components {

  util.func public @rope(
      %input: tensor<?x?x?x?xf32>,   // [B, S, H, D]
      %positions: tensor<?x?xi64>,   // [B, S]
      %freq_base: f32,               // e.g. 10000.0
      %freq_scale: f32               // e.g. 1.0
  ) -> tensor<?x?x?x?xf32> {         // [B, S, H, D]
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c3 = arith.constant 3 : index
    %batch = tensor.dim %input, %c0 : tensor<?x?x?x?xf32>
    %seq = tensor.dim %input, %c1 : tensor<?x?x?x?xf32>
    %heads = tensor.dim %input, %c2 : tensor<?x?x?x?xf32>
    %head_dim = tensor.dim %input, %c3 : tensor<?x?x?x?xf32>
    %half_dim = arith.divui %head_dim, %c2 : index

    // [B, S, H, D] viewed as [B, S, H, D/2, 2]: element k of pair i is x[.., 2i + k].
    %pairs = tensor.expand_shape %input [[0], [1], [2], [3, 4]]
        output_shape [%batch, %seq, %heads, %half_dim, 2]
        : tensor<?x?x?x?xf32> into tensor<?x?x?x?x2xf32>

    // theta[i] = powf(freq_base, -(2 * float(i) / float(D))) * freq_scale.
    %head_dim_i32 = arith.index_cast %head_dim : index to i32
    %head_dim_f32 = arith.sitofp %head_dim_i32 : i32 to f32
    %theta_empty = tensor.empty(%half_dim) : tensor<?xf32>
    %theta = linalg.generic {indexing_maps = [#half], iterator_types = ["parallel"]}
        outs(%theta_empty : tensor<?xf32>) {
    ^bb0(%unused: f32):
      %i = linalg.index 0 : index
      %i_i32 = arith.index_cast %i : index to i32
      %i_f32 = arith.sitofp %i_i32 : i32 to f32
      %two = arith.constant 2.0 : f32
      %twice = arith.mulf %two, %i_f32 : f32
      %ratio = arith.divf %twice, %head_dim_f32 : f32
      %exponent = arith.negf %ratio : f32
      %inv_freq = math.powf %freq_base, %exponent : f32
      %scaled = arith.mulf %inv_freq, %freq_scale : f32
      linalg.yield %scaled : f32
    } -> tensor<?xf32>

    // Rotate each pair by a = float(int32(pos)) * theta[i]; element k of the pair is written.
    %rot_empty = tensor.empty(%batch, %seq, %heads, %half_dim) : tensor<?x?x?x?x2xf32>
    %rotated = linalg.generic {
        indexing_maps = [#pair_first, #pair_second, #pair_pos, #pair_theta, #pair_id],
        iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]}
        ins(%pairs, %pairs, %positions, %theta
            : tensor<?x?x?x?x2xf32>, tensor<?x?x?x?x2xf32>, tensor<?x?xi64>, tensor<?xf32>)
        outs(%rot_empty : tensor<?x?x?x?x2xf32>) {
    ^bb0(%x0: f32, %x1: f32, %pos: i64, %th: f32, %unused: f32):
      %pos_i32 = arith.trunci %pos : i64 to i32
      %pos_f32 = arith.sitofp %pos_i32 : i32 to f32
      %angle = arith.mulf %pos_f32, %th : f32
      %cos = math.cos %angle : f32
      %sin = math.sin %angle : f32
      %k = linalg.index 4 : index
      %is_first = arith.cmpi eq, %k, %c0 : index
      %y = scf.if %is_first -> (f32) {
        // y[2i] = x[2i] * cos(a) - x[2i+1] * sin(a)
        %a0 = arith.mulf %x0, %cos : f32
        %b0 = arith.mulf %x1, %sin : f32
        %y0 = arith.subf %a0, %b0 : f32
        scf.yield %y0 : f32
      } else {
        // y[2i+1] = x[2i] * sin(a) + x[2i+1] * cos(a)
        %a1 = arith.mulf %x0, %sin : f32
        %b1 = arith.mulf %x1, %cos : f32
        %y1 = arith.addf %a1, %b1 : f32
        scf.yield %y1 : f32
      }
      linalg.yield %y : f32
    } -> tensor<?x?x?x?x2xf32>

    // Back to [B, S, H, D].
    %out = tensor.collapse_shape %rotated [[0], [1], [2], [3, 4]]
        : tensor<?x?x?x?x2xf32> into tensor<?x?x?x?xf32>
    util.return %out : tensor<?x?x?x?xf32>
  }

}
