// Basic LSTM kernel (TFLite's LstmCell) gates, 4 cells (slice j) of batch item b per invocation:
// the pre-activations [b, 4 * depth] hold the blocks input, new input, forget, output;
// state = sigmoid(i) * tanh(n) + sigmoid(f) * prev_state, activation = sigmoid(o) * tanh(state),
// written to both outputs and, in place, to prev_state and prev_activation (the next invoke's
// state). Grid: (slices, batch). Gate math is highp in every precision.
// Params: depth; slices (ceil(depth / 4)); pre_offset, pre_slices; prev_state_offset,
//   prev_activation_offset, activation_offset, state_offset ([B, depth]: b * slices + j).

highp vec4 sigmoid(highp vec4 x) { return 1.0 / (1.0 + exp(-x)); }

highp vec4 saturating_tanh(highp vec4 x) { return tanh(clamp(x, vec4(-10.0), vec4(10.0))); }

highp float pre_activation(int b, int channel) {
  return load(pre_offset + b * pre_slices + channel / 4)[channel % 4];
}

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int j = gid.x, b = gid.y;
  highp vec4 gate_i, gate_n, gate_f, gate_o;
  for (int k = 0; k < 4; ++k) {
    int d = min(4 * j + k, depth - 1);  // padded cells repeat the last one; keep_channels zeroes them
    gate_i[k] = pre_activation(b, d);
    gate_n[k] = pre_activation(b, depth + d);
    gate_f[k] = pre_activation(b, 2 * depth + d);
    gate_o[k] = pre_activation(b, 3 * depth + d);
  }
  int element = b * slices + j;
  highp vec4 state = sigmoid(gate_i) * saturating_tanh(gate_n) + sigmoid(gate_f) * load(prev_state_offset + element);
  highp vec4 activation = sigmoid(gate_o) * saturating_tanh(state);
  state = keep_channels(state, depth, j);
  activation = keep_channels(activation, depth, j);
  store(state_offset + element, state);
  store(activation_offset + element, activation);
  store(prev_state_offset + element, state);
  store(prev_activation_offset + element, activation);
}
