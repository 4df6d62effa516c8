"""Readable kernel names (issue 22): demangled with LLVM's demangler, template arguments
shortened for display; the raw name is untouched elsewhere.

Expected demanglings are written by hand from the Itanium C++ ABI rules (``N...E``
nested name, ``I...E`` template arguments, ``Li4E`` the literal 4, ``S_`` the first
substitution, ``v`` void, ``P`` pointer, ``T_`` the first template parameter); the
property test renders random templates twice, in full and cut at a depth, with its
own recursive printer."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceatlas.advisor.base import short_name
from traceatlas.names import demangle, display_name, shorten
from traceatlas.report.html import _short


@pytest.mark.parametrize(("mangled", "expected"), [
    ("_ZN3foo3barEv", "foo::bar()"),
    ("_ZN2ns6kernelIiLi4EEEvPT_", "void ns::kernel<int, 4>(int*)"),
    ("_ZN2ns6kernelINS_3BoxIiEEEEvv", "void ns::kernel<ns::Box<int>>()"),
    ("__ZN3foo3barEv", "foo::bar()"),  # macOS: one more leading underscore
])
def test_demangle(mangled: str, expected: str) -> None:
    assert demangle(mangled).replace("> >", ">>") == expected


@pytest.mark.parametrize("name", ["_Zgarbage", "_Z", "aten::mm", "nvjet_sm90_tst_256x128",
                                  ""])
def test_not_demangled_stays(name: str) -> None:
    assert demangle(name) == name


@pytest.mark.parametrize(("name", "depth", "expected"), [
    ("_ZN2ns6kernelINS_3BoxIiEEEEvv", 1, "ns::kernel<ns::Box<...>>"),
    ("_ZN2ns6kernelINS_3BoxIiEEEEvv", 2, "ns::kernel<ns::Box<int>>"),
    ("_ZN2ns6kernelINS_3BoxIiEEEEvv", 0, "ns::kernel<...>"),
    ("_ZN2ns6kernelIiLi4EEEvPT_", 1, "ns::kernel<int, 4>"),
    # already demangled by CUPTI: the lambda's parentheses and braces are cut too
    ("void at::native::vectorized_elementwise_kernel<8, at::native::copy_kernel_cuda("
     "at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >(int, "
     "std::array<char*, 2ul>)", 1,
     "at::native::vectorized_elementwise_kernel<8, at::native::copy_kernel_cuda(...)::{...}"
     ", std::array<...>>"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 1,
     "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
    ("void foo::operator()<int>(int) const", 1, "foo::operator()<int>"),
    ("a::(anonymous namespace)::k<b<c>>(int)", 1, "a::(anonymous namespace)::k<b<...>>"),
    # not C++ signatures: phrases, op and annotation names stay as written
    ("Memcpy HtoD (Pageable -> Device)", 1, "Memcpy HtoD (Pageable -> Device)"),
    ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 1,
     "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"),
    ("ProfilerStep#3", 1, "ProfilerStep#3"),
    ("a<b", 1, "a<b"),  # unbalanced: as is
])
def test_display_name(name: str, depth: int, expected: str) -> None:
    assert display_name(name, depth=depth) == expected


def test_width_and_the_renderers() -> None:
    name = "_ZN2ns6kernelINS_3BoxIiEEEEvv"
    assert display_name(name, width=10) == "ns::ker..."
    assert short_name(name) == "ns::kernel<ns::Box<...>>"  # advisor statements
    assert _short(name) == "ns::kernel<ns::Box<...>>"  # HTML report cells
    assert short_name("x" * 70) == "x" * 57 + "..."


@dataclass(frozen=True)
class _Node:
    name: str
    args: tuple[_Node, ...] = ()

    def full(self) -> str:
        return self.name + (f"<{', '.join(a.full() for a in self.args)}>" if self.args
                            else "")

    def cut(self, depth: int) -> str:
        if not self.args:
            return self.name
        if depth == 0:
            return self.name + "<...>"
        return self.name + "<" + ", ".join(a.cut(depth - 1) for a in self.args) + ">"


_idents = st.from_regex(r"[a-z_][a-z0-9_]{0,5}(::[a-z_][a-z0-9_]{0,5})?", fullmatch=True)
_trees = st.recursive(st.builds(_Node, _idents),
                      lambda kids: st.builds(_Node, _idents,
                                             st.lists(kids, min_size=1, max_size=3)
                                             .map(tuple)),
                      max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(tree=_trees, depth=st.integers(0, 4), params=st.booleans())
def test_shorten_matches_a_recursive_printer(tree: _Node, depth: int, params: bool) -> None:
    """Random templates (with a parameter list and a ``void`` now and then): the cut
    equals the tree printed to ``depth`` levels of arguments."""
    text = ("void " if params else "") + tree.full() + ("(int, float*)" if params else "")
    assert shorten(text, depth) == tree.cut(depth)
