"""The project's error types. The CLI maps each to an exit code; nothing else is caught.

Faults of the *simulated* program are not errors: they are data in a RunResult.
"""

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_VALIDATION_FAILED = 3
EXIT_INVALID_INPUT = 65
EXIT_FAULT = 139
EXIT_INTERRUPTED = 130  # Ctrl-C (the shell's code for SIGINT)


class NpusimError(Exception):
    """Base of every error npusim raises on purpose. `exit_code` is the CLI's code."""

    exit_code = EXIT_INTERNAL


class UsageError(NpusimError):
    """Bad command-line usage or API arguments."""

    exit_code = EXIT_USAGE


class InvalidInputError(NpusimError):
    """An input file (blob, model, profile, data) is invalid."""

    exit_code = EXIT_INVALID_INPUT


class ProfileError(InvalidInputError):
    """A hardware profile is invalid; the message names the key."""


class IsaSpecError(InvalidInputError):
    """The ISA spec file is inconsistent."""


class BlobError(InvalidInputError):
    """A blob file is malformed, truncated, corrupted or unsupported."""


class AssemblyError(InvalidInputError):
    """A text assembly file cannot be assembled; the message names the line."""


class ModelError(InvalidInputError):
    """An ONNX model cannot be compiled (unsupported op, dynamic shape, too big...)."""


class DataError(InvalidInputError):
    """An input array or calibration file does not fit the model."""


class StImportError(InvalidInputError):
    """An ST Edge AI Core output cannot be read (missing companion, malformed C, unknown field...)."""


class ModelNote(UserWarning):
    """Something the compiler decided for the user about the model (a default it applied); the CLI prints
    it as one `npusim: note:` line."""
