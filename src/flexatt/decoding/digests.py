"""Digests of the model's members that the kernel restates.

The kernel (``csrc/kernel.cpp``) restates, in C++, equations whose definition lives in the
model's Python modules: the concat score, g_t, the vision span, the penalty, the softmax, c_t,
p_t, the LSTMs and the readout. A researcher who edits one of those in place trains with the
edit; the kernel must then not decode with the old equations. So the kernel records, per
class or function, a digest of the members it re-implements (:data:`RESTATED`)
as they were when it was written, and :func:`stale` compares them with the members as they are
now — the code that runs, monkeypatched members included.

A digest covers the syntax tree of each member's source with its docstrings removed: comments,
docstrings and formatting do not count, any change to the code does. After the kernel is
brought in line with an edited member, :func:`main` prints the new table for
``flexatt.decoding.kernel.RESTATED_DIGESTS``::

    python -c "from flexatt.decoding import digests; digests.main()"
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
import textwrap
from typing import Callable, Optional

#: what the kernel re-implements: ``module:name`` -> the members of that class whose equations it
#: restates (``()`` for a function)
RESTATED: dict[str, tuple[str, ...]] = {
    "flexatt.attention:masked_softmax": (),
    "flexatt.attention.flexible:span_radius": (),
    "flexatt.attention.flexible:window_bounds": (),
    "flexatt.attention:ConcatScore": ("precompute", "project_query", "forward"),
    "flexatt.attention:_AdditiveScore": ("forward",),
    "flexatt.attention:Attention": ("precompute", "init_state", "score_dense", "softmax_source", "score_window",
                                    "content_logits", "expected_position", "context_dense", "window_to_full"),
    "flexatt.attention:GlobalAttention": ("forward",),
    "flexatt.attention:FlexibleAttention": ("__init__", "strength", "penalty", "span_radius", "vision_span",
                                            "flexible_logits", "forward"),
    "flexatt.encoders:RecurrentEncoder": ("forward", "output"),
    "flexatt.decoders:RecurrentDecoder": ("init_state", "lstm_weights", "input_gates", "lstm", "_recur",
                                          "readout", "step"),
    "flexatt.model:Seq2Seq": ("encode", "decode_step"),
}


def _functions(member) -> list[Callable]:
    """The plain functions behind a class attribute (a method, static or class method, property)."""
    if isinstance(member, (staticmethod, classmethod)):
        return [member.__func__]
    if isinstance(member, property):
        return [f for f in (member.fget, member.fset, member.fdel) if f is not None]
    return [member]


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return tree


def source_digest(fn: Callable) -> str:
    """The digest of one function's code: its syntax tree without docstrings, under whatever name
    it was defined (the attribute it is reached by is what names it; a function whose source
    cannot be read digests as such, so it never matches a recorded digest)."""
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):  # a lambda inside an expression, a builtin
        try:
            source = inspect.getsource(fn).strip()
        except (OSError, TypeError):
            return "no source"
        return hashlib.sha256(source.encode()).hexdigest()[:12]
    for node in tree.body[:1]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.name = "_"
    return hashlib.sha256(ast.dump(_strip_docstrings(tree)).encode()).hexdigest()[:12]


def resolve(key: str):
    """The object ``module:name`` names."""
    module, _, name = key.partition(":")
    return getattr(importlib.import_module(module), name)


def digest(key: str, members: tuple[str, ...]) -> str:
    """The digest of ``key``'s members as they are now (the attributes the class resolves, so a
    monkeypatched or inherited member counts as it runs)."""
    obj = resolve(key)
    if not members:
        return source_digest(obj)
    h = hashlib.sha256()
    for name in members:
        raw = inspect.getattr_static(obj, name, None)
        if raw is None:
            h.update(f"{name}: missing\n".encode())
            continue
        for fn in _functions(raw):
            h.update(f"{name}: {source_digest(fn)}\n".encode())
    return h.hexdigest()[:12]


def current(restated: dict[str, tuple[str, ...]] = RESTATED) -> dict[str, str]:
    """The current digest of every entry of ``restated``."""
    return {key: digest(key, members) for key, members in restated.items()}


def stale(recorded: dict[str, str], restated: dict[str, tuple[str, ...]] = RESTATED) -> Optional[str]:
    """``None`` when every entry of ``restated`` digests as ``recorded``; else a one-line reason
    naming the changed classes and functions."""
    changed = [key.partition(":")[2] for key, now in current(restated).items() if recorded.get(key) != now]
    if not changed:
        return None
    return (f"{', '.join(changed)} changed since the kernel was written (the kernel restates "
            f"{'its' if len(changed) == 1 else 'their'} equations; see flexatt.decoding.digests)")


def main() -> None:
    """Print the current table, to paste as ``flexatt.decoding.kernel.RESTATED_DIGESTS``."""
    print("RESTATED_DIGESTS = {")
    for key, value in current().items():
        print(f'    "{key}": "{value}",')
    print("}")
