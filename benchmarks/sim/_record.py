"""The one way the sim benchmarks write their record: indented JSON with a final newline, only when asked."""

from __future__ import annotations

import json
from typing import Optional


def write_json(path: Optional[str], record: dict) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(record, f, indent=2)
            f.write("\n")
