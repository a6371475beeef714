"""Identities (DESIGN.md section 3): gid, branch id, action, participant name.

Every id is 1..N bytes of [A-Za-z0-9._:-]. The functions raise
CallError(INVALID_ARGUMENT) naming the field and the rule it breaks.
"""

import re

from .status import invalid_argument

MAX_GID_BYTES = 128
MAX_BRANCH_ID_BYTES = 64
MAX_ACTION_BYTES = 128
MAX_PARTICIPANT_NAME_BYTES = 64

_ID = re.compile(r"[A-Za-z0-9._:-]+\Z")


def _validate(field, value, limit):
    if not isinstance(value, str):
        raise invalid_argument(f"{field}: must be a string")
    raw = value.encode("utf-8", "surrogatepass")
    if not raw:
        raise invalid_argument(f"{field}: required (1-{limit} bytes of [A-Za-z0-9._:-])")
    if len(raw) > limit:
        raise invalid_argument(f"{field}: {len(raw)} bytes; at most {limit} allowed")
    if not _ID.match(value) or len(raw) != len(value):
        raise invalid_argument(f"{field}: {value!r} has a byte outside [A-Za-z0-9._:-]")


def validate_gid(gid):
    _validate("gid", gid, MAX_GID_BYTES)


def validate_branch_id(branch_id):
    _validate("branch_id", branch_id, MAX_BRANCH_ID_BYTES)


def validate_action(action):
    _validate("action", action, MAX_ACTION_BYTES)


def validate_participant_name(name):
    _validate("participant", name, MAX_PARTICIPANT_NAME_BYTES)
