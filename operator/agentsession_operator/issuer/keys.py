"""``python -m agentsession_operator.issuer.keys SIGNING.pem [...]``: the router's verification key set (JSON)
for the operator's signing keys, public halves only. Several keys: a rotation (the router accepts each kid)."""

from __future__ import annotations

import sys
from pathlib import Path

from agentsession_operator.issuer.tokens import SigningKey, verification_keys


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m agentsession_operator.issuer.keys SIGNING.pem [SIGNING.pem ...]", file=sys.stderr)
        return 2
    print(verification_keys([SigningKey.load(Path(path)) for path in argv]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
