"""The tool's exit codes and the one error type that reaches the user as a single line."""

from __future__ import annotations

# Exit codes, one place. Shells and schedulers read these, so they are part of the interface.
OK = 0
FAILED = 1  # an unexpected internal error (a bug): the only case that prints a traceback
USAGE = 2  # bad input: spec, flags, data, checkpoint (Click uses 2 for usage errors too)
DIVERGED = 3  # the loss turned NaN/Inf or exploded; the run directory says `diverged`
LOCKED = 4  # another process holds the run directory
INTERRUPTED_INT = 130  # SIGINT: 128 + 2, as a shell reports it
INTERRUPTED_TERM = 143  # SIGTERM: 128 + 15
BROKEN_PIPE = 141  # stdout closed under us (`| head -1`): 128 + SIGPIPE


class UserError(Exception):
    """Something the user can fix. Rendered as one line on stderr, never a traceback."""

    def __init__(self, message: str, code: int = USAGE):
        # One line, always: user-supplied text quoted into a message may carry its own newlines.
        message = message.replace("\r", "\\r").replace("\n", "\\n")
        super().__init__(message)
        self.message = message
        self.code = code

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.message


class PipeClosed(Exception):
    """stdout's reader went away (`resnet ... | head -1`)."""
