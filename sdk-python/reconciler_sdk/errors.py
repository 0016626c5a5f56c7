class ReconcileError(Exception):
    """The plugin's own judgement that an object cannot be reconciled now.

    The message becomes a Warning Event on the object; the host retries with
    backoff and applies nothing of the call. Any other exception escaping
    ``reconcile`` is reported the same way, prefixed with its type.
    """


class HostError(ReconcileError):
    """The host refused a cache call (an undeclared kind, another namespace)."""
