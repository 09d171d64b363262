// SE_GATE (gpu/kernels/squeeze_excite.py): the gate of a squeeze-excite block in one dispatch,
// OUTPUT_GROUPS workgroups per batch item (gl_WorkGroupID.z): each computes the mean and the
// first of two layers whole, and the last layer's output slices of its share (gl_WorkGroupID.y),
// so that the largest layer's sums spread over as many workgroups:
//   m = mean of x over H x W, per channel
//   LAYERS 2: h = hidden(W1 m + b1), gate = epilogue(activate(W2 h + b2))
//   LAYERS 1: gate = epilogue(activate(W1 m + b1))
// Every vector lives in shared memory (sh); the phases are separated by barriers, and each loops
// its lanes over the work, so the template is right for any workgroup size (LANES).
//
// Phases, in the unfused kernels' summation order:
//   1. lane (s, q) of the MEAN_LANES lanes of input slice s sums pixels q, q + MEAN_LANES, ...;
//      a tree folds them (reduce.glsl's parallel variant, which uses 128 lanes); the mean of slice
//      s is left in sh[MEAN_BASE + s * MEAN_LANES].
//   2. per layer, lane t of the K_SPLITk lanes of output slice o sums input chunks t,
//      t + K_SPLITk, ... (fully_connected.glsl's split), then one lane per output slice adds the
//      partial sums in order and the bias.
// Accumulation is highp (the template compiles with highp floats in every precision). Where the
// unfused graph stored a value (the mean, the hidden layer) ep_stored rounds it to half in half
// storage, as that store did.
//
// Defines: LAYERS; OUTPUT_GROUPS; MEAN_LANES; K_SPLIT1, K_SPLIT2; SHARED (vec4s of sh) and the regions of sh
//   MEAN_BASE, PARTIAL1_BASE, HIDDEN_BASE, PARTIAL2_BASE, LAST_BASE (the last layer's partial
//   sums); HIDDEN_ACT (an EP_OP_ code of the first layer's fused activation, -1 for none) and
//   H_COUNT, Hk_OP, Hk_SWAP, Hk_STORED (the first layer's epilogue steps, scalar operands
//   hk_value); ACTIVATION, CLAMP_FINITE and EP_* (the last layer's output stage and epilogue).
// Params: in_size, out_size (w, h, slices, batch); in_offset, out_offset (arena); out_channels;
//   mean_count (what the sum of x over H x W is divided by: H x W, or the pixels a depthwise
//   convolution's tile sums add up when x is them);
//   wk_offset, bk_offset (layer k's weights, packed as fully_connected.py packs them, and bias),
//   unitsk (its output channels).
// @highp in every precision: the mean and two layers' sums of a squeeze-excite gate.

#define LANES (WG_X * WG_Y * WG_Z)
shared highp vec4 sh[SHARED];

// Tree step of phase 1: every slice's slots [step, 2 step) fold into [0, step).
void mean_fold(int lane, int step) {
  memoryBarrierShared();
  barrier();
  for (int i = lane; i < in_size.z * step; i += LANES) {
    int j = MEAN_BASE + (i / step) * MEAN_LANES + i % step;
    sh[j] += sh[j + step];
  }
}

// Lane t's share of output slice o of a layer: input chunks (4 values each) t, t + split, ...
// of `chunks`, chunk k at sh[source + k * stride]; weights [out slice][chunk][4 rows].
highp vec4 dot_share(int weights, int chunks, int o, int t, int split, int source, int stride) {
  highp vec4 acc = vec4(0.0);
  int w = weights + (o * chunks + t) * 4;
  for (int k = t; k < chunks; k += split) {
    highp vec4 x = sh[source + k * stride];
    acc += x.x * weight(w) + x.y * weight(w + 1) + x.z * weight(w + 2) + x.w * weight(w + 3);
    w += 4 * split;
  }
  return acc;
}

// Output slice o of a layer: its `split` partial sums at sh[partials + o * split] added in order,
// plus the bias.
highp vec4 dot_total(int partials, int o, int split, int bias) {
  highp vec4 acc = sh[partials + o * split];
  for (int t = 1; t < split; ++t) acc += sh[partials + o * split + t];
  return acc + weight(bias + o);
}

#if LAYERS == 2
#define H_APPLY(OP, SWAP, STORED, value) v = ep_step(OP, SWAP == 1, STORED == 1 ? ep_stored(v) : v, vec4(value))

// The first layer's output stage, as fully_connected.glsl applies it (its fused activation and
// the clamp to the finite floats, then its epilogue), then the rounding of its store.
vec4 hidden(highp vec4 v, int o) {
  v = tfl_finite(ep_unary(HIDDEN_ACT, v, vec4(0.0)));
#if H_COUNT > 0
  H_APPLY(H0_OP, H0_SWAP, H0_STORED, h0_value);
#endif
#if H_COUNT > 1
  H_APPLY(H1_OP, H1_SWAP, H1_STORED, h1_value);
#endif
#if H_COUNT > 2
  H_APPLY(H2_OP, H2_SWAP, H2_STORED, h2_value);
#endif
#if H_COUNT > 3
  H_APPLY(H3_OP, H3_SWAP, H3_STORED, h3_value);
#endif
  return ep_stored(keep_channels(v, units1, o));
}
#endif

void main() {
  int lane = int(gl_LocalInvocationIndex);
  int b = int(gl_WorkGroupID.z);
  // A workgroup clamped below LANES wide leaves more than one along x: only the first works.
  // No early return: every invocation must reach the barriers.
  bool live = gl_WorkGroupID.x == 0u;
  int plane = in_size.x * in_size.y;
  int slices = in_size.z;
  // The last layer's output slices [out_first, out_last) are this workgroup's.
  int group_slices = (out_size.z + OUTPUT_GROUPS - 1) / OUTPUT_GROUPS;
  int out_first = int(gl_WorkGroupID.y) * group_slices;
  int out_last = min(out_size.z, out_first + group_slices);

  // 1. The mean of each input slice.
  for (int i = lane; i < slices * MEAN_LANES; i += LANES) {
    int first = in_offset + (b * slices + i / MEAN_LANES) * plane;
    highp vec4 acc = vec4(0.0);
    for (int q = i % MEAN_LANES; live && q < plane; q += MEAN_LANES) acc += load(first + q);
    sh[MEAN_BASE + i] = acc;
  }
#if MEAN_LANES > 64
  mean_fold(lane, 64);
#endif
#if MEAN_LANES > 32
  mean_fold(lane, 32);
#endif
#if MEAN_LANES > 16
  mean_fold(lane, 16);
#endif
#if MEAN_LANES > 8
  mean_fold(lane, 8);
#endif
#if MEAN_LANES > 4
  mean_fold(lane, 4);
#endif
#if MEAN_LANES > 2
  mean_fold(lane, 2);
#endif
#if MEAN_LANES > 1
  mean_fold(lane, 1);
#endif
  memoryBarrierShared();
  barrier();
  for (int s = lane; s < slices; s += LANES) {
    int j = MEAN_BASE + s * MEAN_LANES;
    sh[j] = ep_stored(sh[j] / float(mean_count));
  }
  memoryBarrierShared();
  barrier();

  // 2. The layers.
  int first_slices = (units1 + 3) / 4;
#if LAYERS == 2
  int first_begin = 0, first_end = first_slices;
#else
  int first_begin = out_first, first_end = out_last;
#endif
  for (int i = lane + first_begin * K_SPLIT1; i < first_end * K_SPLIT1; i += LANES) {
    sh[PARTIAL1_BASE + i] = dot_share(w1_offset, slices, i / K_SPLIT1, i % K_SPLIT1, K_SPLIT1, MEAN_BASE, MEAN_LANES);
  }
  memoryBarrierShared();
  barrier();
#if LAYERS == 2
  for (int o = lane; o < first_slices; o += LANES) {
    sh[HIDDEN_BASE + o] = hidden(dot_total(PARTIAL1_BASE, o, K_SPLIT1, b1_offset), o);
  }
  memoryBarrierShared();
  barrier();
  for (int i = lane + out_first * K_SPLIT2; i < out_last * K_SPLIT2; i += LANES) {
    sh[PARTIAL2_BASE + i] = dot_share(w2_offset, first_slices, i / K_SPLIT2, i % K_SPLIT2, K_SPLIT2, HIDDEN_BASE, 1);
  }
  memoryBarrierShared();
  barrier();
#define LAST_SPLIT K_SPLIT2
#define LAST_BIAS b2_offset
#else
#define LAST_SPLIT K_SPLIT1
#define LAST_BIAS b1_offset
#endif
  for (int o = out_first + lane; live && o < out_last; o += LANES) {
    vec4 v = epilogue(activate(dot_total(LAST_BASE, o, LAST_SPLIT, LAST_BIAS)), ivec4(0, 0, o, b));
    store(out_offset + b * out_size.z + o, keep_channels(v, out_channels, o));
  }
}
