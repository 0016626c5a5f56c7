"""Kubernetes label selectors in their string form, matched as the host's
cache matches them: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``,
``a notin (x,y)``, ``a`` (exists), ``!a`` (does not exist), joined by commas;
``""`` selects everything. A missing key satisfies ``!=`` and ``notin``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

_KEY = re.compile(r"[A-Za-z0-9._/-]{1,316}")
_VALUE = re.compile(r"[A-Za-z0-9._-]{0,63}")


class SelectorError(ValueError):
    pass


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Callable[[dict[str, str]], bool], ...] = ()

    @staticmethod
    def parse(selector: str) -> "LabelSelector":
        try:
            return LabelSelector(tuple(_parse_term(t) for t in _split_terms(selector)))
        except SelectorError as e:
            raise SelectorError(f"invalid label selector {selector!r}: {e}") from None

    def matches(self, labels: dict[str, str]) -> bool:
        return all(r(labels) for r in self.requirements)


def _split_terms(selector: str) -> list[str]:
    terms, depth, start = [], 0, 0
    for i, c in enumerate(selector):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError("unbalanced ')'")
        elif c == "," and depth == 0:
            terms.append(selector[start:i])
            start = i + 1
    if depth != 0:
        raise SelectorError("unbalanced '('")
    terms.append(selector[start:])
    if len(terms) == 1 and not terms[0].strip():
        return []
    return terms


def _key(text: str) -> str:
    key = text.strip()
    if not _KEY.fullmatch(key):
        raise SelectorError(f"{key!r} is not a valid label key")
    return key


def _value(text: str) -> str:
    value = text.strip()
    if not _VALUE.fullmatch(value):
        raise SelectorError(f"{value!r} is not a valid label value")
    return value


def _parse_term(term: str) -> Callable[[dict[str, str]], bool]:
    term = term.strip()
    if not term:
        raise SelectorError("empty requirement (stray comma?)")
    if term.startswith("!"):
        k = _key(term[1:])
        return lambda labels: k not in labels
    if "!=" in term:
        k, v = term.split("!=", 1)
        k, v = _key(k), _value(v)
        return lambda labels: labels.get(k) != v
    if "=" in term:
        k, v = term.split("==", 1) if "==" in term else term.split("=", 1)
        k, v = _key(k), _value(v)
        return lambda labels: labels.get(k) == v
    parts = term.split(None, 1)
    k = _key(parts[0])
    if len(parts) == 1:
        return lambda labels: k in labels
    rest = parts[1].lstrip()
    if rest.startswith("notin"):
        op, values = "notin", rest[5:]
    elif rest.startswith("in"):
        op, values = "in", rest[2:]
    else:
        raise SelectorError(f"expected '=', '!=', 'in' or 'notin' after {k!r}")
    values = values.strip()
    if not (values.startswith("(") and values.endswith(")")):
        raise SelectorError(f"'{op}' needs a parenthesised set of values, e.g. {k} {op} (a,b)")
    vs = frozenset(_value(v) for v in values[1:-1].split(","))
    if op == "in":
        return lambda labels: labels.get(k) in vs
    return lambda labels: labels.get(k) not in vs
