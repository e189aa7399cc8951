"""A typed result as JSON values: dataclasses and `to_dict` records to dicts, NaN and
infinities to null (they are not JSON)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any


def to_jsonable(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return to_jsonable(obj.to_dict())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):  # NaN and infinities are not JSON
        return None
    return obj
