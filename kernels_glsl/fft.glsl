// A radix-2 FFT of N = 2^LOG2N points per line, one workgroup of WG_X invocations per line, in
// shared memory (gpu/kernels/spectral.py). Line l = (group y) + (group z) * grid.y starts at pixel
// a * in_outer + b * in_inner of the source (a = l / line_div, b = l % line_div):
//   REAL_INPUT 1: a real line, the channels of that pixel (a PHWC4 tensor of size in_size);
//   REAL_INPUT 0: a complex line of a pair view [..., 2], value i at pixel + i * in_step.
// Its first in_count values are loaded in bit-reversed order (zeros past them: the padding), the
// log2(N) stages of butterflies run with twiddles e^(-2 pi i k / N) read from the constants as
// (hi, lo) parts, and bins k < out_count are stored as (re, im, 0, 0) at pixel
// a * out_outer + b * out_inner + k * out_step of the target. Highp throughout
// (its @highp line below); the barriers stay outside control flow (GLSL ES 3.10): the
// stages are unrolled (up to N = 2048, spectral.MAX_FFT_LENGTH), and a workgroup past the last
// line runs them on zeros.
// @highp in every precision: twiddles and butterflies of up to 2^LOG2N points, whose sums fp16
//  would round at every stage.

#define N (1 << LOG2N)
shared vec2 values[N];

vec2 cmul(vec2 a, vec2 b) { return vec2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x); }

int bit_reversed(int i) {
#if LOG2N > 0
  return int(bitfieldReverse(uint(i)) >> uint(32 - LOG2N));
#else
  return i;
#endif
}

vec2 source_value(int first, int i) {
  if (i >= in_count) return vec2(0.0);
#if REAL_INPUT
  int plane = in_size.x * in_size.y;
  int element = ((first / plane) * in_size.z + i / 4) * plane + first % plane;
  return vec2(load(in_offset + element)[i % 4], 0.0);
#else
  return load(in_offset + first + i * in_step).xy;
#endif
}

// Butterflies of span `span` (its twiddles step N / (2 span) through the table).
void stage(int lane, int span) {
  memoryBarrierShared();
  barrier();
  for (int j = lane; j < N / 2; j += WG_X) {
    int k = j % span;
    int a = (j / span) * 2 * span + k;
    vec4 w = weight(twiddles + k * (N / (2 * span)));
    vec2 t = cmul(w.xy + w.zw, values[a + span]);
    vec2 u = values[a];
    values[a] = u + t;
    values[a + span] = u - t;
  }
}

void main() {
  int lane = int(gl_LocalInvocationID.x);
  int l = int(gl_WorkGroupID.z) * grid.y + int(gl_WorkGroupID.y);
  // Only the first workgroup along x (a device whose workgroups are narrower than asked gets more).
  bool live = l < lines && gl_WorkGroupID.x == 0u;
  int a = l / line_div, b = l % line_div;
  int first = a * in_outer + b * in_inner;
  for (int i = lane; i < N; i += WG_X) values[bit_reversed(i)] = live ? source_value(first, i) : vec2(0.0);
#if LOG2N > 0
  stage(lane, 1);
#endif
#if LOG2N > 1
  stage(lane, 2);
#endif
#if LOG2N > 2
  stage(lane, 4);
#endif
#if LOG2N > 3
  stage(lane, 8);
#endif
#if LOG2N > 4
  stage(lane, 16);
#endif
#if LOG2N > 5
  stage(lane, 32);
#endif
#if LOG2N > 6
  stage(lane, 64);
#endif
#if LOG2N > 7
  stage(lane, 128);
#endif
#if LOG2N > 8
  stage(lane, 256);
#endif
#if LOG2N > 9
  stage(lane, 512);
#endif
#if LOG2N > 10
  stage(lane, 1024);
#endif
  memoryBarrierShared();
  barrier();
  if (!live) return;
  int target = out_offset + a * out_outer + b * out_inner;
  for (int k = lane; k < out_count; k += WG_X) store(target + k * out_step, vec4(values[k], 0.0, 0.0));
}
