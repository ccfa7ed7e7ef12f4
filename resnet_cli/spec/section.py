"""The base of every spec section: strict types, no unknown keys, frozen, numbers the run can hold."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator
from pydantic_core import PydanticCustomError

# Every number of a spec ends up in a torch float32 tensor or a C int64 (an lr, a seed): one beyond
# them is refused here, naming its field, rather than overflowing in the optimizer's first step
# ("value cannot be converted to type float without overflow") or in torch.manual_seed.
FLOAT_MAX = 3.4028234663852886e38  # float32's largest finite value
INT_MAX = 2**63 - 1  # int64's


def check_number(value: Any) -> None:
    """Refuse inf, NaN and numbers beyond float32 / int64 (1e400 reads as inf; YAML .inf and .nan are
    floats): a PydanticCustomError naming the valid range, which pydantic places at the field."""
    if isinstance(value, (list, tuple)):
        for item in value:
            check_number(item)
    elif isinstance(value, float) and not math.isfinite(value):
        raise PydanticCustomError("number_range", "not a finite number; valid: a finite number, |x| <= 3.4e38 "
                                                  "(float32; 1e400 reads as inf)")
    elif isinstance(value, float) and abs(value) > FLOAT_MAX:
        raise PydanticCustomError("number_range", "beyond float32's range; valid: |x| <= 3.4e38")
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT_MAX:
        raise PydanticCustomError("number_range", "beyond int64's range; valid: |x| <= 9223372036854775807 (2^63 - 1)")


class _Section(BaseModel):
    # strict: "20" is not an int and 20.5 is not a depth; extra: a misspelt key is an error;
    # allow_inf_nan: no float field takes inf or NaN (also checked, with the range, below).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _representable(cls, value: Any) -> Any:
        check_number(value)
        return value
