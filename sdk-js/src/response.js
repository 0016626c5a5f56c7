// Building a plugin's answer.

import { EventType } from './contract.js';

/**
 * The desired state for one primary object. Return the full set of owned
 * children every time: the host prunes the ones left out. Objects and status
 * are serialised here, so a value that is not JSON fails the reconcile.
 */
export class Response {
  constructor() {
    this.applied = [];
    this.deleted = [];
    this.statusJson = undefined;
    this.events = [];
    this.requeueAfterMs = undefined;
    this.isFinalized = false;
  }

  /** An object to create or update (owned or written), with apiVersion, kind and metadata.name. */
  apply(object) {
    this.applied.push(dump(object, 'an object to apply'));
    return this;
  }

  /** An owned child to delete now. */
  delete(kind, namespace, name) {
    this.deleted.push({ apiVersion: kind.apiVersion, kind: kind.kind, namespace: namespace ?? undefined, name });
    return this;
  }

  /** The desired `.status` of the primary (an object). */
  status(status) {
    if (status === null || typeof status !== 'object' || Array.isArray(status)) {
      throw new TypeError('the status must be an object');
    }
    this.statusJson = dump(status, 'the status');
    return this;
  }

  /** An Event on the primary: `EventType.NORMAL` (`'Normal'`) or `'Warning'`. */
  event(type, reason, message) {
    if (type !== EventType.NORMAL && type !== EventType.WARNING) {
      throw new TypeError(`an event type is 'Normal' or 'Warning', not ${JSON.stringify(type)}`);
    }
    this.events.push({ type, reason, message });
    return this;
  }

  /** Reconcile again after this many milliseconds. */
  requeueAfter(ms) {
    this.requeueAfterMs = Math.max(0, Math.round(ms));
    return this;
  }

  /** While deleting: cleanup is done, the host may drop the finalizer. */
  finalized() {
    this.isFinalized = true;
    return this;
  }
}

function dump(value, what) {
  let text;
  try {
    text = JSON.stringify(value);
  } catch (e) {
    throw new TypeError(`cannot serialise ${what}: ${e.message}`);
  }
  if (text === undefined) throw new TypeError(`cannot serialise ${what}: not a JSON value`);
  return text;
}
