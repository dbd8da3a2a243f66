"""Errors mdmem raises, each with the CLI exit code it maps to."""
from __future__ import annotations


class MdmemError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with."""

    exit_code = 1
    kind = "error"

    def to_dict(self) -> dict:
        return {"error": self.kind, "message": str(self)}


class BadInput(MdmemError):
    """An argument, file or field is wrong; says which and what would be right."""

    exit_code = 2
    kind = "bad_input"


class NoteInvalid(BadInput):
    """A note on disk does not parse or breaks the schema."""

    kind = "invalid_note"

    def __init__(self, path: str, field: str, reason: str):
        self.path, self.field, self.reason = path, field, reason
        super().__init__(f"{path}: {field}: {reason}")

    def to_dict(self) -> dict:
        return {**super().to_dict(), "path": self.path, "field": self.field, "reason": self.reason}


class Refused(MdmemError):
    """The write gate (or the delete capability) refused; nothing was written."""

    exit_code = 3
    kind = "refused"

    def __init__(self, reason: str, existing_keys: list[str] | None = None):
        self.reason = reason
        self.existing_keys = list(existing_keys or [])
        msg = reason
        if self.existing_keys:
            msg += " Existing keys: " + ", ".join(self.existing_keys)
        super().__init__(msg)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "reason": self.reason, "existing_keys": self.existing_keys}


class Conflict(MdmemError):
    """The note changed since the version the caller read."""

    exit_code = 5
    kind = "conflict"


class NotFound(MdmemError):
    """No such note, or the acting user may not see it (indistinguishable on purpose)."""

    exit_code = 6
    kind = "not_found"


class ProofFailed(MdmemError):
    """prove-gone found a needle somewhere it checks."""

    exit_code = 7
    kind = "proof_failed"


class EmbedderError(MdmemError):
    """An embedding backend could not be reached or answered wrongly."""

    exit_code = 8
    kind = "embedder"


HELD_EXIT_CODE = 4
