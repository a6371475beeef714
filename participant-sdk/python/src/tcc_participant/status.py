"""Status codes and errors (the gRPC codes), and how they travel over HTTP.

The one place this SDK maps a call's error to an HTTP status, as
proto/tcc/v1/participant.proto (OUTCOMES AND ERRORS) states: only
INVALID_ARGUMENT (400) and FAILED_PRECONDITION (412) are definite for tccd;
every other error leaves the outcome unknown (tccd asks or re-sends).
"""

import enum


class Code(enum.IntEnum):
    """gRPC status codes (absl's are the same numbers)."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class CallError(Exception):
    """A call that did not produce an outcome: its code and why."""

    def __init__(self, code, message):
        super().__init__(f"{Code(code).name}: {message}")
        self.code = Code(code)
        self.message = message


def unavailable(message):
    return CallError(Code.UNAVAILABLE, message)


def invalid_argument(message):
    return CallError(Code.INVALID_ARGUMENT, message)


def failed_precondition(message):
    return CallError(Code.FAILED_PRECONDITION, message)


# Code -> the HTTP status a participant answers with it (DESIGN.md section
# 15). Codes not listed answer 500 (unknown for tccd).
_HTTP_STATUS = {
    Code.INVALID_ARGUMENT: 400,
    Code.FAILED_PRECONDITION: 412,
    Code.RESOURCE_EXHAUSTED: 429,
    Code.UNAVAILABLE: 503,
    Code.DEADLINE_EXCEEDED: 504,
    Code.UNIMPLEMENTED: 501,
    Code.NOT_FOUND: 404,
}


def http_status_of(code):
    """The HTTP status an error with `code` is answered with."""
    return _HTTP_STATUS.get(Code(code), 500)


def is_definite_refusal(code):
    """True for the codes tccd takes as "nothing ran" (participant.proto)."""
    return Code(code) in (Code.INVALID_ARGUMENT, Code.FAILED_PRECONDITION)
