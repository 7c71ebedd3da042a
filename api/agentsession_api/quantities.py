"""Storage quantities (``10Gi``, ``500Mi``, ``1G``, ``1073741824``) as the CRD admits them.

Only the non-negative, exponent-free subset of Kubernetes quantities is accepted (the schema pattern
:data:`QUANTITY_PATTERN`): storage sizes never need ``m`` (milli) or ``1e9``, and a narrow pattern gives a
clear admission error instead of a surprising value.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Final

BINARY_SUFFIXES: Final[dict[str, int]] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
DECIMAL_SUFFIXES: Final[dict[str, int]] = {
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
QUANTITY_PATTERN: Final = r"^([0-9]+(\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"
QUANTITY_MAX_LENGTH: Final = 32
ALLOWED_TEXT: Final = (
    "a size such as 10Gi, 500Mi, 1G or a plain number of bytes (suffixes Ki Mi Gi Ti Pi Ei k M G T P E)"
)

_QUANTITY = re.compile(QUANTITY_PATTERN)


def parse_quantity(text: str) -> int:
    """Bytes in ``text``, rounded up to a whole byte; ValueError (saying what is allowed) when invalid."""
    match = _QUANTITY.fullmatch(text) if isinstance(text, str) and len(text) <= QUANTITY_MAX_LENGTH else None
    if match is None:
        raise ValueError(f"invalid quantity {text!r}: expected {ALLOWED_TEXT}")
    number, _, suffix = match.groups(default="")
    multiplier = BINARY_SUFFIXES.get(suffix) or DECIMAL_SUFFIXES.get(suffix) or 1
    return math.ceil(Decimal(number) * multiplier)


def format_quantity(num_bytes: int) -> str:
    """The largest binary suffix that divides ``num_bytes`` exactly (``10Gi``), else plain bytes."""
    for suffix, size in sorted(BINARY_SUFFIXES.items(), key=lambda item: -item[1]):
        if num_bytes and num_bytes % size == 0:
            return f"{num_bytes // size}{suffix}"
    return str(num_bytes)
