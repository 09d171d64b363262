"""The tf.Module models of tools/build_zoo.py's zoo (a streaming keyword spotter whose state is
resource variables, a classifier with its spectrogram in the graph, and a greedy tagger that reads
tf.argmax's int64 indices back), apart so that build_zoo.py
stays readable. Imports TensorFlow only when called: tools/build_zoo.py runs it in its zoo-tf venv;
nothing in the package imports it.
"""


def tf_modules(seed, features):
    """{class name: tf.Module subclass}; weights He-normal from tf.random.Generator.from_seed(seed);
    the keyword spotter takes frames of `features` values."""
    import tensorflow as tf

    def he(generator, shape, fan_in):
        return tf.Variable(generator.normal(shape, stddev=(2.0 / fan_in) ** 0.5), trainable=False)

    class StreamingKws(tf.Module):
        """A keyword spotter built as microWakeWord's streaming models are: each call takes one
        feature frame (1, 1, 40); ring buffers (resource variables, read and assigned each call) keep
        the frames each layer still needs. Conv 3 -> MixConv (channels split, depthwise 3 and 5) +
        pointwise -> depthwise 5 -> dense over the last 5 steps -> 2 logits. New states are slices
        of the concatenation (x[:, 1:]: STRIDED_SLICE; tf.split: SPLIT_V)."""
        def __init__(self):
            super().__init__()
            g = tf.random.Generator.from_seed(seed)
            self.conv, self.conv_bias = he(g, (3, 1, features, 32), 3 * features), he(g, (32,), 200)
            self.mix3, self.mix5 = he(g, (3, 1, 16, 1), 3), he(g, (5, 1, 16, 1), 5)
            self.point, self.point_bias = he(g, (1, 1, 32, 48), 32), he(g, (48,), 200)
            self.depth = he(g, (5, 1, 48, 1), 5)
            self.dense, self.dense_bias = he(g, (5 * 48, 2), 5 * 48), he(g, (2,), 200)
            self.states = [tf.Variable(tf.zeros((1, steps, 1, channels)), trainable=False, name=f"stream_{k}")
                           for k, (steps, channels) in enumerate(((2, features), (4, 32), (4, 48), (4, 48)))]

        def reset(self):
            for state in self.states:
                state.assign(tf.zeros_like(state))

        @tf.function(input_signature=[tf.TensorSpec((1, 1, features), tf.float32)])
        def __call__(self, frame):
            s0, s1, s2, s3 = self.states
            x = tf.concat([s0, tf.reshape(frame, (1, 1, 1, features))], axis=1)  # (1, 3, 1, 40)
            s0.assign(x[:, 1:])
            x = tf.nn.relu(tf.nn.conv2d(x, self.conv, 1, "VALID") + self.conv_bias)
            x = tf.concat([s1, x], axis=1)  # (1, 5, 1, 32)
            s1.assign(tf.split(x, [1, 4], axis=1)[1])
            a, b = tf.split(x, [16, 16], axis=3)
            a = tf.nn.depthwise_conv2d(a[:, 2:], self.mix3, [1, 1, 1, 1], "VALID")
            b = tf.nn.depthwise_conv2d(b, self.mix5, [1, 1, 1, 1], "VALID")
            x = tf.nn.relu(tf.nn.conv2d(tf.concat([a, b], axis=3), self.point, 1, "VALID") + self.point_bias)
            x = tf.concat([s2, x], axis=1)  # (1, 5, 1, 48)
            s2.assign(x[:, 1:])
            x = tf.nn.relu(tf.nn.depthwise_conv2d(x, self.depth, [1, 1, 1, 1], "VALID"))
            x = tf.concat([s3, x], axis=1)  # (1, 5, 1, 48)
            s3.assign(x[:, 1:])
            return tf.matmul(tf.reshape(x, (1, 5 * 48)), self.dense) + self.dense_bias

    class Spectrogram(tf.Module):
        """A log-mel spectrogram in the graph (tf.signal.stft: 256-sample Hann frames every 128
        samples, 256-point RFFT; |.|; a 32-bin mel matrix; log) and a small conv classifier (two
        3x3 stride-2 convs, flatten, dense to 12: a global mean would average white noise's spectra
        into nearly the same output for every random input)."""
        def __init__(self):
            super().__init__()
            g = tf.random.Generator.from_seed(seed)
            self.mel = tf.signal.linear_to_mel_weight_matrix(32, 129, 4000, 20.0, 2000.0)
            self.c1, self.c2, self.fc = he(g, (3, 3, 1, 16), 9), he(g, (3, 3, 16, 32), 144), he(g, (2048, 12), 2048)

        @tf.function(input_signature=[tf.TensorSpec((1, 4000), tf.float32)])
        def __call__(self, wave):
            magnitude = tf.abs(tf.signal.stft(wave, 256, 128, 256))  # (1, 30, 129): RFFT2D, COMPLEX_ABS
            x = tf.math.log(tf.matmul(magnitude, self.mel) + 1e-6)[..., None]
            x = tf.nn.relu(tf.nn.conv2d(x, self.c1, 2, "SAME"))
            x = tf.nn.relu(tf.nn.conv2d(x, self.c2, 2, "SAME"))
            return tf.matmul(tf.reshape(x, (1, 2048)), self.fc)  # x: (1, 8, 8, 32)

    class GreedyTagger(tf.Module):
        """A greedy tagging step over 16 frames of 32 features: logits over 64 tags (a dense layer),
        the best tag of each frame (tf.argmax: int64), its embedding (tf.gather) added to the frame
        and its one-hot (tf.one_hot) beside it, then a dense layer to 16. Outputs the tags
        (int64) and that projection: the readers of int64 indices a decoder's next step has."""
        def __init__(self):
            super().__init__()
            g = tf.random.Generator.from_seed(seed)
            self.logits, self.table, self.out = he(g, (32, 64), 32), he(g, (64, 32), 2), he(g, (96, 16), 96)

        @tf.function(input_signature=[tf.TensorSpec((1, 16, 32), tf.float32)])
        def __call__(self, frames):
            tags = tf.argmax(tf.matmul(frames, self.logits), -1)  # (1, 16) int64
            features = tf.concat([frames + tf.gather(self.table, tags), tf.one_hot(tags, 64)], -1)
            return tags, tf.matmul(features, self.out)

    return {"StreamingKws": StreamingKws, "Spectrogram": Spectrogram, "GreedyTagger": GreedyTagger}
