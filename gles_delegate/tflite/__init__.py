"""Reading and writing .tflite flatbuffers."""
from .model import (DimensionMetadata, ModelDef, OperatorDef, Quantization, SignatureDef, Sparsity,
                    SubgraphDef, TensorDef)
from .reader import read_model
from .writer import ModelBuilder, write_model

__all__ = ["DimensionMetadata", "ModelDef", "OperatorDef", "Quantization", "SignatureDef", "Sparsity",
           "SubgraphDef", "TensorDef", "read_model", "write_model", "ModelBuilder"]
