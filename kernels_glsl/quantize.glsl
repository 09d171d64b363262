// QUANTIZE, DEQUANTIZE and QUANTIZE_AND_DEQUANTIZE on the float view of quantized tensors
// (gles_delegate/quant.py): every tensor is float, and a tensor of integer values (a partition's
// quantized input or output) holds them as floats. One vec4 (4 channels) per invocation.
//
// OP: 0 quantize   real x -> clamp(round(x / scale) + zero_point, qmin, qmax)     (integer values)
//     1 dequantize integer values q -> (q - zero_point) * scale                    (real)
//     2 fake-quant real x -> (quantize(x) - zero_point) * scale                    (real, on the grid)
//     3 requantize real x on a source grid -> (table[q] - zero_point) * scale      (real, on the grid)
//       q: x's integer on the source grid (source_scale, source_zero_point), from source_qmin;
//       table: TFLite's fixed-point Requantize of each (ops/quantize.py requantize_table), four
//       integers a constant row from table_offset, table_last + 1 of them.
// round() is half away from zero, as TFLite's CPU QUANTIZE rounds (its GPU delegate's
// QuantizeAndDequantize rounds halves up); NaN quantizes to the zero point, +-inf saturate.
// PER_CHANNEL: 0 one scale and zero point (params q_scale, q_zero_point); 1 one per channel (the
// last axis) from the constants at `quant_offset`, four vec4 rows per slice: the scales' float32
// bits in three integer pieces (bits 0-10, 11-21, 22-31: integers below 2048, so exact in half
// storage too), then the zero points.
// The arithmetic is highp in every precision mode: integer values up to 2048 and the scales stay
// exact. Params: size (w, h, slices, batch), channels, in_offset, out_offset; qmin, qmax (OP 0, 2).

void quant_params(int s, out highp vec4 scale, out highp vec4 zero_point) {
#if PER_CHANNEL
  int row = quant_offset + 4 * s;
  // highp variables before the shifts: a conversion takes its operand's precision (mediump in
  // fp16 mode), and a mediump integer may have only 16 bits.
  highp uvec4 low = uvec4(weight(row)), middle = uvec4(weight(row + 1)), high = uvec4(weight(row + 2));
  scale = uintBitsToFloat(low | (middle << 11) | (high << 22));
  zero_point = weight(row + 3);
#else
  scale = vec4(q_scale);
  zero_point = vec4(q_zero_point);
#endif
}

#if OP != 1
highp vec4 quantize4(highp vec4 x, highp vec4 scale, highp vec4 zero_point) {
  highp vec4 t = x / scale;
  t = mix(t, vec4(0.0), isnan(t));
  return clamp(sign(t) * floor(abs(t) + 0.5) + zero_point, vec4(qmin), vec4(qmax));
}
#endif

#if OP == 3
highp vec4 requantize4(highp vec4 x) {
  highp vec4 t = x / source_scale;
  t = mix(t, vec4(0.0), isnan(t));
  highp ivec4 k = ivec4(clamp(sign(t) * floor(abs(t) + 0.5) + source_zero_point - source_qmin,
                              0.0, float(table_last)));
  highp vec4 q;
  for (int c = 0; c < 4; ++c) q[c] = weight(table_offset + k[c] / 4)[k[c] % 4];
  return q;
}
#endif

void main() {
  ivec3 gid = ivec3(gl_GlobalInvocationID);
  if (any(greaterThanEqual(gid, grid))) return;
  int s = gid.z % size.z;
  int i = phwc4_index(size, gid.x, gid.y, gid.z);
  highp vec4 scale, zero_point;
  quant_params(s, scale, zero_point);
  highp vec4 x = load(in_offset + i);
#if OP == 0
  highp vec4 r = quantize4(x, scale, zero_point);
#elif OP == 1
  highp vec4 r = (x - zero_point) * scale;
#elif OP == 2
  highp vec4 r = (quantize4(x, scale, zero_point) - zero_point) * scale;
#else
  highp vec4 r = (requantize4(x) - zero_point) * scale;
#endif
  // Padded channels hold 0, and a zero point is not 0.
  store(out_offset + i, keep_channels(r, channels, s));
}
