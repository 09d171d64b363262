"""Plain-data view of a .tflite file: what the reader produces and the writer consumes."""
import hashlib
import threading
from dataclasses import dataclass, field

import numpy as np

from .schema import NUMPY_DTYPES

_DTYPES = {name: np.dtype(np_type) for name, np_type in NUMPY_DTYPES.items()}  # TensorDef.dtype asks thousands


@dataclass
class Quantization:
    """Affine quantization: real = scale * (q - zero_point), per tensor or per channel.

    scales: float32 [n]; zero_points: int64 [n]; n == 1 per tensor, else the size of
    `quantized_dimension`. min / max are the optional float ranges some converters record.
    """
    scales: np.ndarray
    zero_points: np.ndarray
    quantized_dimension: int = 0
    min: np.ndarray | None = None
    max: np.ndarray | None = None

    @property
    def per_channel(self):
        return self.scales.size > 1


@dataclass
class DimensionMetadata:
    """One dimension of a sparse tensor: DENSE (dense_size) or SPARSE_CSR (segments, indices)."""
    format: str
    dense_size: int = 0
    array_segments: np.ndarray | None = None
    array_indices: np.ndarray | None = None


@dataclass
class Sparsity:
    """TFLite sparsity parameters (the input of DENSIFY)."""
    traversal_order: tuple
    block_map: tuple
    dim_metadata: list


@dataclass
class TensorDef:
    """A tensor as the file declares it. `type_name` is the TFLite type ('FLOAT32', 'INT8', ...)."""
    name: str
    shape: tuple
    type_name: str
    buffer: int = 0
    quantization: Quantization | None = None
    sparsity: Sparsity | None = None
    shape_signature: tuple | None = None
    is_variable: bool = False

    @property
    def dtype(self):
        """numpy dtype of the tensor, or None for types numpy cannot hold (STRING, RESOURCE, INT4...)."""
        return _DTYPES.get(self.type_name)


@dataclass
class OperatorDef:
    """One operator. `op` is the builtin name ('CONV_2D') or, when `custom`, the custom code.

    inputs / outputs are tensor indices into the subgraph; -1 marks an omitted optional input.
    options: the builtin options as a dict of snake_case field -> value.
    """
    op: str
    inputs: tuple
    outputs: tuple
    version: int = 1
    options: dict = field(default_factory=dict)
    custom: bool = False
    custom_options: bytes | None = None
    intermediates: tuple = ()


@dataclass
class SubgraphDef:
    name: str
    tensors: list
    inputs: tuple
    outputs: tuple
    operators: list


@dataclass
class SignatureDef:
    """A signature: its key, subgraph, and input/output names mapped to tensor indices."""
    key: str
    subgraph_index: int
    inputs: dict
    outputs: dict


class BackgroundDigest(threading.Thread):
    """sha256 (hex) of some bytes, computed in a thread (hashlib releases the GIL, so on a CPU
    with a free core it costs no wall time); result() waits for it."""

    def __init__(self, data):
        super().__init__(name="gles_delegate model sha256", daemon=True)
        self._data, self._value = data, None
        self.start()

    def run(self):
        self._value = hashlib.sha256(self._data).hexdigest()

    def result(self):
        self.join()
        return self._value


@dataclass
class ModelDef:
    """A whole model. buffers[i] is a read-only uint8 array (empty when the buffer holds nothing).
    digest: sha256 (hex) of the file's bytes when read by read_model, else None."""
    subgraphs: list
    buffers: list
    version: int = 3
    description: str = ""
    signature_defs: list = field(default_factory=list)
    metadata: dict = field(default_factory=dict)
    # Not fields (the writer and equality ignore them): read_model keeps the bytes it read (the
    # buffers are views into them anyway); their sha256 is computed once, on first use (only the
    # serialization cache asks: 10 ms for a 17 MB model is not spent by those who do not), or by
    # a BackgroundDigest that read_model(background_digest=True) starts before it parses.
    source_bytes = None
    digest_job = None
    _digest = None

    @property
    def digest(self):
        """sha256 (hex) of the bytes read_model read, or None for a model built in memory."""
        if self._digest is None:
            if self.digest_job is not None:
                self._digest = self.digest_job.result()
            elif self.source_bytes is not None:
                self._digest = hashlib.sha256(self.source_bytes).hexdigest()
        return self._digest

    @property
    def digest_ready(self):
        """Whether `digest` has been computed already (reading it then costs nothing)."""
        return self._digest is not None

    def start_digest(self):
        """Compute `digest` in a BackgroundDigest, unless it is known or under way already."""
        if not self.digest_ready and self.digest_job is None and self.source_bytes is not None:
            self.digest_job = BackgroundDigest(self.source_bytes)

    def tensor_data(self, subgraph_index, tensor_index):
        """The constant contents of a tensor as a read-only, zero-copy numpy array of its
        dtype and shape; None when the tensor has no data (an activation or input)."""
        tensor = self.subgraphs[subgraph_index].tensors[tensor_index]
        raw = self.buffers[tensor.buffer] if tensor.buffer < len(self.buffers) else None
        if tensor.buffer > 0 and tensor.dtype is not None and 0 in tensor.shape:
            # A zero-element constant (an empty axis list) is written with an empty buffer.
            empty = np.zeros(tensor.shape, tensor.dtype)
            empty.flags.writeable = False
            return empty
        if raw is None or raw.size == 0 or tensor.dtype is None:
            return None
        data = raw.view(tensor.dtype)
        if tensor.sparsity is None:
            data = data.reshape(tensor.shape)
        return data
