// One time step t of a full-layout LSTM (no projection, no layer norm): 4 cells (slice j) of
// batch item b per output, i.e. per K_SPLIT invocations along x. Grid: (K_SPLIT, slices, batch).
//
// Gate z = pre[t, b, gate, j] (input contribution + bias, from lstm_input) + R_gate @ h[b]
// (+ peephole * c). forget = sigmoid(z_f); input = sigmoid(z_i), or 1 - forget with CIFG;
// c' = forget * c + input * act(z_c), clipped to +-cell_clip; output = sigmoid(z_o + peephole *
// c'); h' = output * act(c'). c' goes back into the cell state in place (each invocation reads
// and writes only its own vec4); h' goes to the output sequence at step t, where step t + 1
// reads the hidden state (step 0 reads the output state tensor).
// Split-K: lane l of the K_SPLIT lanes sums state chunks l, l + K_SPLIT, ... of the 4 recurrent
// matmuls; the workgroup adds the partial sums in shared memory. Accumulation and gate math are
// highp in every precision.
// Defines: CIFG, PEEPHOLE, DIAGONAL (recurrent weights are a diagonal [n_cell]), K_SPLIT (== WG_X),
//   CELL_ACTIVATION (TFLite's code: 1 relu, 2 relu_n1_to_1, 3 relu6, 4 tanh), CELL_CLIP.
// Params: t; n_cell; slices (ceil(n_cell / 4)); cell_clip; pre_offset (rows (t, b) of 4 gates x
//   slices vec4s); c_offset (cell state, b * slices + j); h_offset, h_base, h_strides (b, slice);
//   out_offset, out_base, out_strides (b, slice); w_<gate>_offset ([j][chunk][4 rows], or one row
//   per slice with DIAGONAL); peephole_<gate>_offset (one row per slice).

#if WG_X != K_SPLIT
#error "the workgroup must be exactly K_SPLIT invocations wide: its lanes share one output"
#endif

highp vec4 sigmoid(highp vec4 x) { return 1.0 / (1.0 + exp(-x)); }

// tanh saturates to +-1 in float32 well before 10; clamping keeps exp() in the formula a GPU
// may use far from overflow (Inf / Inf).
highp vec4 saturating_tanh(highp vec4 x) { return tanh(clamp(x, vec4(-10.0), vec4(10.0))); }

highp vec4 cell_activation(highp vec4 x) {
#if CELL_ACTIVATION == 1
  return max(x, vec4(0.0));
#elif CELL_ACTIVATION == 2
  return clamp(x, vec4(-1.0), vec4(1.0));
#elif CELL_ACTIVATION == 3
  return clamp(x, vec4(0.0), vec4(6.0));
#else
  return saturating_tanh(x);
#endif
}

// Weights of the 4 cells of block w (4 rows: one per state value) times 4 state values.
highp vec4 matvec(int w, highp vec4 h) {
  return h.x * weight(w) + h.y * weight(w + 1) + h.z * weight(w + 2) + h.w * weight(w + 3);
}

#if K_SPLIT > 1
shared highp vec4 partial[4 * WG_X * WG_Y];
#endif

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  int lane = int(gl_LocalInvocationID.x);
  int j = gid.y;
  int b = gid.z;
  // No early return before the barrier: every invocation of the workgroup must reach it.
  bool in_grid = all(lessThan(gid, grid));
  highp vec4 acc_i = vec4(0.0), acc_f = vec4(0.0), acc_c = vec4(0.0), acc_o = vec4(0.0);
  if (in_grid) {
    int state = h_offset + h_base + b * h_strides.x;
#if DIAGONAL
    highp vec4 h = load(state + j * h_strides.y);
#if !CIFG
    acc_i = weight(w_input_offset + j) * h;
#endif
    acc_f = weight(w_forget_offset + j) * h;
    acc_c = weight(w_cell_offset + j) * h;
    acc_o = weight(w_output_offset + j) * h;
#else
    for (int k = lane; k < slices; k += K_SPLIT) {
      highp vec4 h = load(state + k * h_strides.y);
      int w = (j * slices + k) * 4;
#if !CIFG
      acc_i += matvec(w_input_offset + w, h);
#endif
      acc_f += matvec(w_forget_offset + w, h);
      acc_c += matvec(w_cell_offset + w, h);
      acc_o += matvec(w_output_offset + w, h);
    }
#endif
  }
#if K_SPLIT > 1
  // The lanes of one output are adjacent in gl_LocalInvocationIndex (x varies fastest).
  int local = int(gl_LocalInvocationIndex);
  const int stride = WG_X * WG_Y;
  partial[local] = acc_i;
  partial[stride + local] = acc_f;
  partial[2 * stride + local] = acc_c;
  partial[3 * stride + local] = acc_o;
  memoryBarrierShared();
  barrier();
  if (lane != 0) return;
  for (int l = 1; l < K_SPLIT; ++l) {
    acc_i += partial[local + l];
    acc_f += partial[stride + local + l];
    acc_c += partial[2 * stride + local + l];
    acc_o += partial[3 * stride + local + l];
  }
#endif
  if (!in_grid) return;

  int row = pre_offset + (t * grid.z + b) * 4 * slices + j;
  int cell = c_offset + b * slices + j;
  highp vec4 c = load(cell);
  highp vec4 z_f = load(row + slices) + acc_f;
  highp vec4 z_c = load(row + 2 * slices) + acc_c;
  highp vec4 z_o = load(row + 3 * slices) + acc_o;
#if !CIFG
  highp vec4 z_i = load(row) + acc_i;
#endif
#if PEEPHOLE
  z_f += weight(peephole_forget_offset + j) * c;
#if !CIFG
  z_i += weight(peephole_input_offset + j) * c;
#endif
#endif
  highp vec4 forget = sigmoid(z_f);
#if CIFG
  highp vec4 input_gate = 1.0 - forget;
#else
  highp vec4 input_gate = sigmoid(z_i);
#endif
  c = forget * c + input_gate * cell_activation(z_c);
#if CELL_CLIP
  c = clamp(c, vec4(-cell_clip), vec4(cell_clip));
#endif
#if PEEPHOLE
  z_o += weight(peephole_output_offset + j) * c;  // the output gate looks at the new cell state
#endif
  highp vec4 hidden = sigmoid(z_o) * cell_activation(c);
  store(cell, keep_channels(c, n_cell, j));
  store(out_offset + out_base + b * out_strides.x + j * out_strides.y, keep_channels(hidden, n_cell, j));
}
