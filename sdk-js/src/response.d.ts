import type { EventTypeValue, KindRef } from './contract.js';

export interface ResponseEvent {
  type: EventTypeValue;
  reason: string;
  message: string;
}

export interface DeleteRef {
  apiVersion: string;
  kind: string;
  namespace: string | undefined;
  name: string;
}

/**
 * The desired state for one primary object. Return the full set of owned
 * children every time: the host prunes the ones left out.
 */
export class Response {
  constructor();
  /** The objects to apply, as JSON text. */
  readonly applied: string[];
  readonly deleted: DeleteRef[];
  readonly statusJson: string | undefined;
  readonly events: ResponseEvent[];
  readonly requeueAfterMs: number | undefined;
  readonly isFinalized: boolean;
  /** An object to create or update (owned or written), with apiVersion, kind and metadata.name. */
  apply(object: object): this;
  /** An owned child to delete now. */
  delete(kind: KindRef, namespace: string | null | undefined, name: string): this;
  /** The desired `.status` of the primary. */
  status(status: object): this;
  /** An Event on the primary. */
  event(type: EventTypeValue, reason: string, message: string): this;
  /** Reconcile again after this many milliseconds. */
  requeueAfter(ms: number): this;
  /** While deleting: cleanup is done, the host may drop the finalizer. */
  finalized(): this;
}
