"""Admission from the same plugin that reconciles the kind (WIT
``admission``, 0.2.1), in Python.

A plugin opts in by giving ``plugin()`` a ``validate`` function, an
``apply_defaults`` function, or both::

    def validate(request: AdmissionRequest) -> Verdict:
        if request.object["spec"].get("size", 0) < 0:
            return Verdict.deny("spec.size cannot be negative")
        return Verdict.allow()

    def apply_defaults(obj: dict, request: AdmissionRequest) -> None:
        obj.setdefault("spec", {}).setdefault("size", 1)

    Reconciler = plugin(METADATA, reconcile, validate=validate, apply_defaults=apply_defaults)

The builder (``python -m reconciler_sdk.build``) then builds the
``plugin-with-admission`` world. The compiled export and the native harness
both go through ``dispatch_validate`` and ``dispatch_defaults``, so a plugin
tested with pytest parses and answers exactly as it does in the host.
Admission cannot read the cache: decide from the request alone.
"""

from __future__ import annotations

import copy
import enum
import json
from dataclasses import dataclass, field
from typing import Callable

from .errors import ReconcileError


class Operation(enum.Enum):
    """What the API server is doing to the object (AdmissionReview's names)."""

    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    CONNECT = "CONNECT"


class FailurePolicy(enum.Enum):
    """What the host does when a call fails (an exception, a timeout, an
    invalid answer): ``FAIL`` denies naming the failure, ``IGNORE`` admits
    the request unchanged."""

    FAIL = "Fail"
    IGNORE = "Ignore"


@dataclass(frozen=True)
class UserInfo:
    """Who asked (AdmissionReview ``userInfo``)."""

    username: str = ""
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass
class AdmissionSettings:
    """A plugin's declaration that it serves admission. ``plugin()`` derives
    one from the functions it is given (validation of creates and updates,
    mutating when there is ``apply_defaults``, failing closed); pass one as
    ``admission=`` for other operations, ``FailurePolicy.IGNORE`` or another
    deadline."""

    operations: list[Operation] = field(default_factory=list)
    """Empty means create and update."""
    mutating: bool = False
    failure_policy: FailurePolicy = FailurePolicy.FAIL
    timeout_ms: int | None = None
    """Deadline of one call; ``None`` is the host's 2000 ms."""

    def effective_operations(self) -> list[Operation]:
        if not self.operations:
            return [Operation.CREATE, Operation.UPDATE]
        return sorted(set(self.operations), key=list(Operation).index)


@dataclass
class Verdict:
    """The answer to one request. Deny with ``Verdict.deny(message)``;
    raising an exception instead is a failed call, which the failure policy
    decides."""

    allowed: bool
    message: str | None = None
    warnings: list[str] = field(default_factory=list)

    @staticmethod
    def allow() -> "Verdict":
        return Verdict(True)

    @staticmethod
    def deny(message: str) -> "Verdict":
        """Denies; kubectl shows ``message`` (at most 4 KiB)."""
        return Verdict(False, message)

    def warn(self, warning: str) -> "Verdict":
        """Adds a warning kubectl shows whether allowed or not (at most 16,
        each at most 256 bytes)."""
        self.warnings.append(warning)
        return self


@dataclass
class AdmissionRequest:
    """One request with its objects parsed: ``object`` for create and
    update, ``old_object`` for update and delete."""

    operation: Operation
    object: dict | None
    old_object: dict | None
    user_info: UserInfo = field(default_factory=UserInfo)
    dry_run: bool = False
    """Nothing will be persisted (``kubectl --dry-run=server``)."""


@dataclass
class AdmissionCall:
    """One request in wire form (objects as JSON text), as in WIT."""

    operation: Operation
    object: str | None
    old_object: str | None
    user_info: UserInfo = field(default_factory=UserInfo)
    dry_run: bool = False

    @staticmethod
    def of(request: AdmissionRequest) -> "AdmissionCall":
        dump = lambda obj: None if obj is None else json.dumps(obj)  # noqa: E731
        return AdmissionCall(
            request.operation, dump(request.object), dump(request.old_object), request.user_info, request.dry_run
        )


ValidateFn = Callable[[AdmissionRequest], Verdict]
DefaultsFn = Callable[[dict, AdmissionRequest], "dict | None"]


@dataclass(frozen=True)
class Admission:
    """What a plugin serves: its settings and the functions behind them."""

    settings: AdmissionSettings
    validate: ValidateFn | None
    apply_defaults: DefaultsFn | None

    @staticmethod
    def declare(
        validate: ValidateFn | None, apply_defaults: DefaultsFn | None, settings: AdmissionSettings | None
    ) -> "Admission | None":
        """The plugin's admission, or ``None`` when it serves none; raises
        ``ValueError`` for a declaration that could never work as meant."""
        if validate is None and apply_defaults is None:
            if settings is not None:
                raise ValueError("admission= needs validate=, apply_defaults= or both: there is nothing to call")
            return None
        if settings is None:
            settings = AdmissionSettings(mutating=apply_defaults is not None)
        if settings.mutating and apply_defaults is None:
            raise ValueError("admission settings say mutating=True but there is no apply_defaults= to call")
        if apply_defaults is not None and not settings.mutating:
            raise ValueError(
                "apply_defaults= is given but the admission settings say mutating=False, so it would never "
                "be called: set mutating=True"
            )
        return Admission(settings, validate, apply_defaults)


def parse(call: AdmissionCall) -> AdmissionRequest:
    def typed(text: str | None, what: str) -> dict | None:
        if text is None:
            return None
        try:
            return json.loads(text)
        except ValueError as e:
            raise ReconcileError(f"cannot parse {what}: {e}") from None

    return AdmissionRequest(
        call.operation,
        typed(call.object, "the admitted object"),
        typed(call.old_object, "the admitted old object"),
        call.user_info,
        call.dry_run,
    )


def dispatch_validate(admission: Admission, call: AdmissionCall) -> Verdict:
    """``validate`` from wire form to a ``Verdict`` (allow when the plugin
    only defaults)."""
    request = parse(call)
    if admission.validate is None:
        return Verdict.allow()
    verdict = admission.validate(request)
    if not isinstance(verdict, Verdict):
        raise ReconcileError(f"validate returned {type(verdict).__name__}, not a Verdict")
    return verdict


def dispatch_defaults(admission: Admission, call: AdmissionCall) -> str | None:
    """``apply_defaults`` from wire form to wire form: the defaulted object
    as JSON, or ``None`` when nothing changed (or there is no object). The
    function may change the object in place or return a new one."""
    if call.object is None or admission.apply_defaults is None:
        return None
    request = parse(call)
    original = copy.deepcopy(request.object)
    returned = admission.apply_defaults(request.object, request)
    obj = request.object if returned is None else returned
    if not isinstance(obj, dict):
        raise ReconcileError(f"apply_defaults returned {type(obj).__name__}, not the object (a dict) or None")
    if obj == original:
        return None
    try:
        return json.dumps(obj)
    except (TypeError, ValueError) as e:
        raise ReconcileError(f"cannot serialise the defaulted object: {e}") from None
