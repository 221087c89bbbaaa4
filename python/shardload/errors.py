"""shardload's errors in Python: one class per family of C++ ErrorKind, each carrying where the error is
(file, tensor, field) and what was expected versus found, as shardload::Error does."""


class Error(Exception):
    """Every shardload error. `kind` is the C++ ErrorKind's name ("io", "config", ...)."""

    def __init__(self, message, *, kind="error", file="", tensor="", field="", expected="", found="", detail=""):
        super().__init__(message)
        self.kind = kind
        self.file = file
        self.tensor = tensor
        self.field = field
        self.expected = expected
        self.found = found
        self.detail = detail or message  # the message without the context


class IoError(Error):
    """A read or write failed (kind io)."""


class FormatError(Error):
    """A safetensors file or index that is not what the format requires (header_*, index, ...)."""


class ConfigError(Error):
    """config.json, a manifest or another description of the model is missing or malformed."""


class CheckpointError(Error):
    """The checkpoint's tensors do not fit its architecture: missing, unknown, mis-shaped or of a dtype
    shardload does not load."""


class InvalidArgumentError(Error, ValueError):
    """A layout or argument that does not fit the model (tp not dividing the heads, a bad expert map, ...)."""


class CancelledError(Error):
    """An update was cancelled before it changed anything."""


class ConflictError(Error):
    """An update does not fit the live weights (another layout, a file changed while read)."""


_BY_KIND = {
    "io": IoError,
    "config": ConfigError,
    "tensor_not_found": CheckpointError,
    "unknown_tensor": CheckpointError,
    "shape_mismatch": CheckpointError,
    "unsupported_dtype": CheckpointError,
    "invalid_argument": InvalidArgumentError,
    "cancelled": CancelledError,
    "conflict": ConflictError,
}


def from_native(kind, what, message, file, tensor, field, expected, found):
    """The exception for a C++ shardload::Error (called by the extension's translator)."""
    cls = _BY_KIND.get(kind, FormatError)
    return cls(what, kind=kind, file=file, tensor=tensor, field=field, expected=expected, found=found,
               detail=message)
