/**
 * The plugin's own judgement that an object cannot be reconciled now. The
 * message becomes a Warning Event on the object; the host retries with
 * backoff and applies nothing of the call. Any other error escaping
 * `reconcile` is reported the same way, prefixed with its name.
 */
export class ReconcileError extends Error {
  constructor(message) {
    super(message);
    this.name = 'ReconcileError';
  }
}

/** The host refused a cache call (an undeclared kind, another namespace). */
export class HostError extends ReconcileError {
  constructor(message) {
    super(message);
    this.name = 'HostError';
  }
}
