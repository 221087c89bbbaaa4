"""shardload from Python: checkpoints, plans and rank tensors without copies (DLPack), live models
updated in place, exports, the weight server's client, engine hooks and a numerical check of sharded
weights (python3 -m shardload.verify). docs/python.md shows each."""

from . import engines, errors
from ._shardload import (Checkpoint, LiveModel, LoadedModel, Tensor, cuda_unavailable_reason, export, load,
                         load_export, plan, resolve_model_path)
from .client import Client, connect
from .errors import (CancelledError, ConfigError, ConflictError, DeviceError, Error, FormatError,
                     InvalidArgumentError, IoError, StaleReadError)
from .hooks import iter_weights, load_into, load_state_dict_into
from .tensors import as_float8, to_numpy, to_torch

__version__ = "0.1.0"
