// Admission from the same plugin that reconciles the kind (WIT `admission`,
// 0.2.1), in JavaScript.
//
// A plugin opts in by giving `plugin()` a `validate` function, an
// `applyDefaults` function, or both:
//
//   function validate(request) {
//     if ((request.object.spec.size ?? 0) < 0) return Verdict.deny('spec.size cannot be negative');
//     return Verdict.allow();
//   }
//   function applyDefaults(object, request) { object.spec.size ??= 1; }
//   export default plugin(METADATA, reconcile, { validate, applyDefaults });
//
// bin/build-plugin.js then builds the `plugin-with-admission` world. The
// compiled export and the native harness both go through `dispatchValidate`
// and `dispatchDefaults`, so a plugin tested with `node --test` parses and
// answers exactly as it does in the host. Admission cannot read the cache:
// decide from the request alone.

import { ReconcileError } from './errors.js';

/** What the API server is doing to the object (AdmissionReview's names). */
export const Operation = Object.freeze({
  CREATE: 'CREATE',
  UPDATE: 'UPDATE',
  DELETE: 'DELETE',
  CONNECT: 'CONNECT',
});
const OPERATIONS = Object.values(Operation);

/**
 * What the host does when a call fails (a thrown error, a timeout, an invalid
 * answer): `FAIL` denies naming the failure, `IGNORE` admits unchanged.
 */
export const FailurePolicy = Object.freeze({ FAIL: 'Fail', IGNORE: 'Ignore' });

/**
 * A plugin's declaration that it serves admission. `plugin()` derives one from
 * the functions it is given (creates and updates, mutating when there is
 * `applyDefaults`, failing closed); pass one as `admission` for other
 * operations, `FailurePolicy.IGNORE` or another deadline (`timeoutMs`; the
 * host's default is 2000).
 */
export class AdmissionSettings {
  constructor({ operations = [], mutating = false, failurePolicy = FailurePolicy.FAIL, timeoutMs } = {}) {
    for (const op of operations) {
      if (!OPERATIONS.includes(op)) throw new TypeError(`unknown admission operation ${JSON.stringify(op)}`);
    }
    if (!Object.values(FailurePolicy).includes(failurePolicy)) {
      throw new TypeError(`unknown failure policy ${JSON.stringify(failurePolicy)}`);
    }
    this.operations = [...operations];
    this.mutating = mutating;
    this.failurePolicy = failurePolicy;
    this.timeoutMs = timeoutMs;
    Object.freeze(this);
  }

  /** The operations the plugin is called for; empty means create and update. */
  effectiveOperations() {
    if (this.operations.length === 0) return [Operation.CREATE, Operation.UPDATE];
    return OPERATIONS.filter((op) => this.operations.includes(op));
  }
}

/** The answer to one request. Deny with `Verdict.deny(message)`; throwing instead is a failed call. */
export class Verdict {
  constructor(allowed, message = undefined, warnings = []) {
    this.allowed = allowed;
    this.message = message;
    this.warnings = [...warnings];
  }

  static allow() {
    return new Verdict(true);
  }

  /** Denies; kubectl shows `message` (at most 4 KiB). */
  static deny(message) {
    return new Verdict(false, message);
  }

  /** Adds a warning kubectl shows whether allowed or not (at most 16, each at most 256 bytes). */
  warn(warning) {
    this.warnings.push(warning);
    return this;
  }
}

/**
 * What a plugin serves: `{settings, validate, applyDefaults}`, or null when it
 * serves none. Throws for a declaration that could never work as meant.
 */
export function declareAdmission({ validate, applyDefaults, admission } = {}) {
  if (validate === undefined && applyDefaults === undefined) {
    if (admission !== undefined) {
      throw new TypeError('admission needs validate, applyDefaults or both: there is nothing to call');
    }
    return null;
  }
  for (const [what, fn] of [['validate', validate], ['applyDefaults', applyDefaults]]) {
    if (fn !== undefined && typeof fn !== 'function') throw new TypeError(`${what} must be a function`);
  }
  const settings = admission ?? new AdmissionSettings({ mutating: applyDefaults !== undefined });
  if (!(settings instanceof AdmissionSettings)) throw new TypeError('admission must be an AdmissionSettings');
  if (settings.mutating && applyDefaults === undefined) {
    throw new TypeError('the admission settings say mutating: true but there is no applyDefaults to call');
  }
  if (applyDefaults !== undefined && !settings.mutating) {
    throw new TypeError(
      'applyDefaults is given but the admission settings say mutating: false, so it would never be called',
    );
  }
  return Object.freeze({ settings, validate, applyDefaults });
}

function parse(call) {
  const typed = (text, what) => {
    if (text === undefined || text === null) return null;
    try {
      return JSON.parse(text);
    } catch (e) {
      throw new ReconcileError(`cannot parse ${what}: ${e.message}`);
    }
  };
  return {
    operation: call.operation,
    object: typed(call.object, 'the admitted object'),
    oldObject: typed(call.oldObject, 'the admitted old object'),
    userInfo: call.userInfo ?? { username: '', uid: '', groups: [], extra: {} },
    dryRun: call.dryRun ?? false,
  };
}

/**
 * `validate` from wire form (`{operation, object, oldObject, userInfo,
 * dryRun}`, objects as JSON text) to a Verdict; allow when the plugin only
 * defaults.
 */
export function dispatchValidate(served, call) {
  const request = parse(call);
  if (served.validate === undefined) return Verdict.allow();
  const verdict = served.validate(request);
  if (!(verdict instanceof Verdict)) {
    throw new ReconcileError(`validate returned ${verdict === null ? 'null' : typeof verdict}, not a Verdict`);
  }
  return verdict;
}

/**
 * `applyDefaults` from wire form to wire form: the defaulted object as JSON,
 * or undefined when nothing changed (or there is no object). The function may
 * change the object in place or return a new one.
 */
export function dispatchDefaults(served, call) {
  if (call.object === undefined || call.object === null || served.applyDefaults === undefined) return undefined;
  const request = parse(call);
  const returned = served.applyDefaults(request.object, request);
  const object = returned === undefined ? request.object : returned;
  if (object === null || typeof object !== 'object' || Array.isArray(object)) {
    throw new ReconcileError('applyDefaults returned something other than the object (or nothing)');
  }
  const text = JSON.stringify(object);
  return text === call.object || sameJson(object, JSON.parse(call.object)) ? undefined : text;
}

/** Whether two parsed JSON values are equal (object keys in any order). */
function sameJson(a, b) {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  return keys.every((k) => Object.hasOwn(b, k) && sameJson(a[k], b[k]));
}
