/**
 * The plugin's own judgement that an object cannot be reconciled now (or, in
 * admission, that the call failed). The message becomes a Warning Event; the
 * host retries with backoff and applies nothing of the call.
 */
export class ReconcileError extends Error {
  constructor(message: string);
}

/** The host refused a cache call (an undeclared kind, another namespace). */
export class HostError extends ReconcileError {}
