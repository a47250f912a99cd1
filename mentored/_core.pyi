"""Typed stub of the compiled module mentored._core (cpp/bindings.cpp); keep the two equal."""

import enum
from typing import Any, Callable, overload

import numpy as np
import numpy.typing as npt

_F64 = npt.NDArray[np.float64]
_F32 = npt.NDArray[np.float32]

@overload
def solve(target: _F64, draft: _F64, code: int, mode: int, values: _F64, threads: int, rtol_p: float = ..., rtol_q: float = ..., out: _F64 | None = None) -> tuple[_F64, _F64, npt.NDArray[np.int32], _F64]: ...
@overload
def solve(target: _F32, draft: _F32, code: int, mode: int, values: _F64, threads: int, rtol_p: float = ..., rtol_q: float = ..., out: _F32 | None = None) -> tuple[_F32, _F64, npt.NDArray[np.int32], _F64]: ...
@overload
def solve_custom(
    target: _F64, draft: _F64, program: Program, mode: int, values: _F64, threads: int, rtol_p: float = ..., rtol_q: float = ...,
    out: _F64 | None = None,
) -> tuple[_F64, _F64, npt.NDArray[np.int32], _F64]: ...
@overload
def solve_custom(
    target: _F32, draft: _F32, program: Program, mode: int, values: _F64, threads: int, rtol_p: float = ..., rtol_q: float = ...,
    out: _F32 | None = None,
) -> tuple[_F32, _F64, npt.NDArray[np.int32], _F64]: ...
@overload
def solve_custom(
    target: _F64, draft: _F64, f_vec: Callable[[_F64], _F64], f_scalar: Callable[[float], float], f_inf: float, mode: int, values: _F64,
    rtol_p: float = ..., rtol_q: float = ..., out: _F64 | None = None,
) -> tuple[_F64, _F64, npt.NDArray[np.int32], _F64]: ...
@overload
def solve_custom(
    target: _F32, draft: _F32, f_vec: Callable[[_F64], _F64], f_scalar: Callable[[float], float], f_inf: float, mode: int, values: _F64,
    rtol_p: float = ..., rtol_q: float = ..., out: _F32 | None = None,
) -> tuple[_F32, _F64, npt.NDArray[np.int32], _F64]: ...
def solve_to_float32(target: _F64, draft: _F64, code: int, mode: int, values: _F64, threads: int, rtol_p: float = ..., rtol_q: float = ..., out: _F32 | None = None) -> tuple[_F32, _F64, npt.NDArray[np.int32], _F64]: ...
@overload
def solve_custom_to_float32(
    target: _F64, draft: _F64, program: Program, mode: int, values: _F64, threads: int, rtol_p: float = ..., rtol_q: float = ...,
    out: _F32 | None = None,
) -> tuple[_F32, _F64, npt.NDArray[np.int32], _F64]: ...
@overload
def solve_custom_to_float32(
    target: _F64, draft: _F64, f_vec: Callable[[_F64], _F64], f_scalar: Callable[[float], float], f_inf: float, mode: int, values: _F64,
    rtol_p: float = ..., rtol_q: float = ..., out: _F32 | None = None,
) -> tuple[_F32, _F64, npt.NDArray[np.int32], _F64]: ...
@overload
def verify(
    target: _F64, draft_probs: _F64 | None, draft_token_ids: npt.NDArray[np.integer], num_draft_tokens: npt.NDArray[np.int64] | list[int] | tuple[int, ...],
    bonus_token_ids: npt.NDArray[np.integer], uniforms: _F64, budgets: _F64, divergences: list[int | Program | None],
    which: npt.NDArray[np.int32] | None = None, greedy: npt.NDArray[np.bool_] | None = None, pi: _F64 | None = None, pi_x: _F64 | None = None,
    keep: bool = False, extra: int = 0, placeholders: bool = False, threads: int = 0, int32: bool = False, rtol_p: float = ..., rtol_q: float = ..., lenient: bool = False, block: bool = False, notes: bool = False,
) -> tuple[Any, ...]: ...
@overload
def verify(
    target: _F32, draft_probs: _F32 | None, draft_token_ids: npt.NDArray[np.integer], num_draft_tokens: npt.NDArray[np.int64] | list[int] | tuple[int, ...],
    bonus_token_ids: npt.NDArray[np.integer], uniforms: _F64, budgets: _F64, divergences: list[int | Program | None],
    which: npt.NDArray[np.int32] | None = None, greedy: npt.NDArray[np.bool_] | None = None, pi: _F32 | None = None, pi_x: _F64 | None = None,
    keep: bool = False, extra: int = 0, placeholders: bool = False, threads: int = 0, int32: bool = False, rtol_p: float = ..., rtol_q: float = ..., lenient: bool = False, block: bool = False, notes: bool = False,
) -> tuple[Any, ...]: ...
def onehot(px: _F64, budgets: _F64, divergence: int | Program, keep: bool) -> _F64: ...
@overload
def tree(
    target: _F64, tokens: npt.NDArray[np.integer], parents: npt.NDArray[np.integer], num_nodes: npt.NDArray[np.int64] | list[int] | tuple[int, ...],
    uniforms: _F64, budgets: _F64, divergences: list[int | None], which: npt.NDArray[np.int32] | None = None, greedy: npt.NDArray[np.bool_] | None = None,
    given: _F64 | None = None, keep: bool = True, length: bool = True, threads: int = 0, rtol: float = ...,
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int64], _F64, _F64, int, int, int, _F64]: ...
@overload
def tree(
    target: _F32, tokens: npt.NDArray[np.integer], parents: npt.NDArray[np.integer], num_nodes: npt.NDArray[np.int64] | list[int] | tuple[int, ...],
    uniforms: _F64, budgets: _F64, divergences: list[int | None], which: npt.NDArray[np.int32] | None = None, greedy: npt.NDArray[np.bool_] | None = None,
    given: _F64 | None = None, keep: bool = True, length: bool = True, threads: int = 0, rtol: float = ...,
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int64], _F64, _F64, int, int, int, _F64]: ...
def tree_layout(parents: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]: ...
def tree_node_masses(P: _F64, w: _F64, budgets: _F64, code: int, keep: bool) -> _F64: ...
@overload
def row_stats(x: _F64, threads: int = 0) -> _F64: ...
@overload
def row_stats(x: _F32, threads: int = 0) -> _F64: ...
class Generator(enum.IntEnum):
    tv = 0
    kl = 1
    reverse_kl = 2
    chi2 = 3
    neyman_chi2 = 4
    hellinger = 5
    js = 6

# The int values of solve's per-row statuses (path.hpp), of verify's status (speculative.hpp) and of
# solve's mode (solve.hpp): the core returns and takes ints; Python compares with member.value.
class Status(enum.IntEnum):
    ok = 0
    zero_row = 1
    bad_value = 2
    unreachable = 3
    off_sum = 4

class StepStatus(enum.IntEnum):
    ok = 0
    bad_token = 1
    zero_row = 2
    bad_value = 3
    unreachable = 4
    bad_bonus = 5
    off_sum = 6
    bad_parent = 7
    duplicate_token = 8

class Mode(enum.IntEnum):
    budget = 0
    acceptance = 1
    price = 2

def generator_f(code: int, t: float) -> float: ...
def generator_f_array(code: int, t: _F64) -> _F64: ...
def generator_f_inf(code: int) -> float: ...
def generator_constants(code: int) -> tuple[float, float, float]: ...
def generator_df_array(code: int, t: _F64, side: int = 1) -> _F64: ...
def generator_dfinv_array(code: int, y: _F64) -> _F64: ...
def dual(code: int, t_lo: _F64, t_hi: _F64, binding: npt.NDArray[np.bool_]) -> tuple[_F64, _F64]: ...
def has_openmp() -> bool: ...

class Op(enum.IntEnum):
    constant = 0
    t = 1
    add = 2
    sub = 3
    mul = 4
    div = 5
    pow = 6
    maximum = 7
    minimum = 8
    less = 9
    less_equal = 10
    greater = 11
    greater_equal = 12
    equal = 13
    not_equal = 14
    logical_and = 15
    logical_or = 16
    where = 17
    neg = 18
    square = 19
    sqrt = 20
    abs = 21
    sign = 22
    exp = 23
    expm1 = 24
    log = 25
    log1p = 26
    log2 = 27
    log10 = 28
    sin = 29
    cos = 30
    tan = 31
    arcsin = 32
    arccos = 33
    arctan = 34
    sinh = 35
    cosh = 36
    tanh = 37
    arcsinh = 38
    arccosh = 39
    arctanh = 40

class Program:
    """A user generator's f̃ as a postfix program (cpp/mentored/program.hpp; built by mentored._program)."""
    def __init__(
        self, ops: npt.NDArray[np.int32] | list[int], values: _F64 | list[float], f0: float, f_at_inf: float, tilt: float,
        f_inf: float, series: _F64 | list[float], radius: float,
    ) -> None: ...
    @property
    def f_inf(self) -> float: ...
    def f_tilde(self, t: _F64) -> _F64: ...

class Table:
    @property
    def f_inf(self) -> float: ...

class Path:
    def __init__(self, target: _F64, draft: _F64) -> None: ...
    @property
    def tv(self) -> float: ...
    @property
    def q0(self) -> float: ...
    @property
    def s_end(self) -> float: ...
    def at(self, s: float) -> tuple[float, float, float]: ...
    def pi(self, s: float) -> tuple[_F64, float]: ...
    def divergence_at(self, code: int, s: float) -> float: ...
    def frontier(self, code: int, budgets: _F64, acceptance: bool = False, price: bool = False) -> _F64: ...
    def acceptance_at(self, s: float) -> float: ...
    def s_max_for(self, f_inf: float) -> float: ...
    @overload
    def table_custom(self, program: Program) -> Table: ...
    @overload
    def table_custom(self, f_vec: Callable[[_F64], _F64], f_inf: float) -> Table: ...
    @overload
    def divergence_custom(self, table: Table, program: Program, s: float) -> float: ...
    @overload
    def divergence_custom(self, table: Table, f_scalar: Callable[[float], float], s: float) -> float: ...
    @overload
    def frontier_custom(self, table: Table, program: Program, budgets: _F64, acceptance: bool = False, price: bool = False) -> _F64: ...
    @overload
    def frontier_custom(self, table: Table, f_scalar: Callable[[float], float], budgets: _F64, acceptance: bool = False, price: bool = False) -> _F64: ...
