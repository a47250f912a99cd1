"""Typed stub of mentored._core_testing (cpp/testing.cpp): test hooks, not used by the package."""

from typing import overload

import numpy as np
import numpy.typing as npt

@overload
def bucket_keys(target: npt.NDArray[np.float64], draft: npt.NDArray[np.float64], exact: bool) -> npt.NDArray[np.uint16]: ...
@overload
def bucket_keys(target: npt.NDArray[np.float32], draft: npt.NDArray[np.float32], exact: bool) -> npt.NDArray[np.uint16]: ...
def generator_names() -> list[str]: ...
