"""The errors shardload raises from Python.

Every error is a `shardload.Error` carrying what the C++ library's `shardload::Error` carries
(include/shardload/error.h): `kind` (the C++ kind's name, e.g. "io", "invalid_argument"), `file`,
`tensor`, `field`, `expected`, `found` (empty strings when unknown) and the bare `message`.
`str(e)` is the one line the command-line tool prints: "<file>: tensor '<t>': <field>: <message>
(expected <e>, found <f>)". The classes group kinds by what a caller does about them; `kind` keeps
the exact one. `error_class(kind)` maps a kind to its class, for code that turns C++ errors into
Python ones.
"""

import builtins


class Error(Exception):
    """Base of every shardload error."""

    kind = "error"

    def __init__(self, message, *, kind=None, file="", tensor="", field="", expected="", found=""):
        super().__init__(message)
        self.message = str(message)
        if kind is not None:
            self.kind = kind
        self.file = str(file)
        self.tensor = str(tensor)
        self.field = str(field)
        self.expected = str(expected)
        self.found = str(found)

    def __str__(self):
        out = ""
        if self.file:
            out += self.file + ": "
        if self.tensor:
            out += f"tensor '{self.tensor}': "
        if self.field:
            out += self.field + ": "
        out += self.message
        # Only what is known, as the C++ errors say it: a "-" for the other half reads as a value.
        if self.expected and self.found:
            out += f" (expected {self.expected}, found {self.found})"
        elif self.expected:
            out += f" (expected {self.expected})"
        elif self.found:
            out += f" (found {self.found})"
        return out

    def __reduce__(self):
        # Picklable (multiprocessing, Ray) with its details, which the default would drop.
        details = {k: getattr(self, k) for k in ("kind", "file", "tensor", "field", "expected", "found")}
        return (_rebuild, (type(self), self.message, details))


def _rebuild(cls, message, details):
    return cls(message, **details)


class IoError(Error):
    """A file or mapping could not be opened, read, written or mapped, or was refused because
    someone else could have planted it (a symbolic link, another owner, a mode others may write)."""

    kind = "io"


class FormatError(Error):
    """A file's bytes are not what its format requires (a safetensors header, an index, the weight
    server's manifest). The message never quotes the offending bytes."""

    kind = "format"


class ConfigError(Error):
    """The model does not fit what shardload loads: config.json, or a tensor missing, unknown,
    of the wrong shape or of an unsupported dtype."""

    kind = "config"


class InvalidArgumentError(Error, ValueError):
    """The caller asked for something that does not exist or does not fit (a rank past the layout,
    an unknown tensor, a target tensor of the wrong shape or dtype, a bad option)."""

    kind = "invalid_argument"


class ConflictError(Error):
    """The live weights changed under the request: an update that does not fit them, or a weight
    server that was restarted or stopped since the client mapped it (call `refresh()`)."""

    kind = "conflict"


class CancelledError(Error):
    """An update was cancelled before it changed anything."""

    kind = "cancelled"


class DeviceError(Error):
    """A GPU destination could not be used: no CUDA driver or GPU on this machine, a device index
    past the GPUs visible, or a CUDA call that failed (the message names the call and its error)."""

    kind = "device"


class StaleReadError(Error, builtins.TimeoutError):
    """No consistent snapshot could be read in the time or tries allowed: an update kept the
    shared memory busy (also a builtin `TimeoutError`)."""

    kind = "stale_read"


# The C++ kinds (error_kind_name in src/core/error.cc) and the class each maps to.
_KIND_CLASSES = {
    "io": IoError,
    "config": ConfigError,
    "tensor_not_found": ConfigError,
    "unknown_tensor": ConfigError,
    "shape_mismatch": ConfigError,
    "unsupported_dtype": ConfigError,
    "invalid_argument": InvalidArgumentError,
    "cancelled": CancelledError,
    "conflict": ConflictError,
    "stale_read": StaleReadError,
    "format": FormatError,
    "device": DeviceError,
}
for _kind in ("header_too_small", "header_too_large", "header_length", "header_utf8", "header_json",
              "header_structure", "duplicate_tensor", "unknown_dtype", "invalid_shape",
              "shape_overflow", "invalid_offsets", "size_mismatch", "file_size",
              "invalid_metadata", "index"):
    _KIND_CLASSES[_kind] = FormatError


def error_class(kind):
    """The class of errors of `kind` (a C++ ErrorKind name); `Error` for a kind not listed."""
    return _KIND_CLASSES.get(kind, Error)


def make_error(kind, message, **details):
    """An error of the class `kind` maps to, with `kind` kept exactly (e.g. "header_json")."""
    return error_class(kind)(message, kind=kind, **details)


__all__ = ["Error", "IoError", "FormatError", "ConfigError", "InvalidArgumentError",
           "ConflictError", "CancelledError", "StaleReadError", "error_class", "make_error"]
