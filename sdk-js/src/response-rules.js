// What the host refuses in a response, refused by the native harness with
// the host's words, so a plugin's test fails where the host would.
//
// The rules kept here are the ones tests/conformance pins for every harness:
// the caps on Events, applies and deletes (the hints', else the host's
// defaults); every applied object an object with apiVersion, kind and
// metadata.name, of a kind the plugin owns or writes, not twice, setting no
// metadata the host or the API server owns, in the primary's namespace;
// deletes of owned kinds only; Event reasons in UpperCamelCase and messages
// of at most 1024 characters. The host checks more (label and annotation
// syntax, names as the API server checks them); its refusal is the word.

import { KindRef } from './contract.js';
import { ReconcileError } from './errors.js';

export const DEFAULT_MAX_EVENTS = 25;
export const DEFAULT_MAX_APPLIES = 500;
export const DEFAULT_MAX_DELETES = 500;

// Metadata the host or the API server sets, with who sets it, in the order
// the host checks them.
const HOST_OWNED = [
  ['ownerReferences', 'is set by the host (the controller reference of owned kinds)'],
  ['finalizers', "is set by the host (the plugin's declared finalizer, on its primary only)"],
  ['uid', 'is set by the API server'],
  ['resourceVersion', 'is set by the API server (in an apply it is a precondition that fails with a conflict)'],
  ['managedFields', 'is kept by the API server (which fields each field manager set)'],
  ['deletionTimestamp', 'is set by the API server when the object is deleted'],
  ['deletionGracePeriodSeconds', 'is set by the API server when the object is deleted'],
  ['generation', 'is set by the API server'],
  ['creationTimestamp', 'is set by the API server'],
  ['selfLink', 'is set by the API server'],
];

const UPPER_CAMEL = /^[A-Z][A-Za-z0-9]{0,62}$/;

const invalid = (item, reason) => new ReconcileError(`invalid response: ${item}: ${reason}`);

/** Throws `ReconcileError` with the host's message for the first rule `response` breaks. */
export function checkResponse(metadata, primaryNamespace, response) {
  const { hints } = metadata;
  for (const [what, count, hint, fallback, name] of [
    ['Events', response.events.length, hints.maxEvents, DEFAULT_MAX_EVENTS, 'maxEvents'],
    ['objects to apply', response.applied.length, hints.maxApplies, DEFAULT_MAX_APPLIES, 'maxApplies'],
    ['objects to delete', response.deleted.length, hints.maxDeletes, DEFAULT_MAX_DELETES, 'maxDeletes'],
  ]) {
    const limit = hint ?? fallback;
    if (count > limit) {
      throw new ReconcileError(
        `the response carries ${count} ${what}, over the limit of ${limit} per response (raise it with hints.${name})`,
      );
    }
  }
  const seen = new Set();
  response.applied.forEach((text, i) => {
    const { kind, namespace, name } = checkObject(metadata, primaryNamespace, i, JSON.parse(text));
    const key = JSON.stringify([kind.group, kind.version, kind.kind, namespace, name]);
    if (seen.has(key)) throw invalid(`apply[${i}] (${kind} ${name})`, 'the same object appears twice in apply');
    seen.add(key);
  });
  response.deleted.forEach((d, i) => {
    const item = `delete[${i}] (${d.apiVersion} ${d.kind} ${d.name})`;
    const kind = KindRef.fromApiVersion(d.apiVersion, d.kind);
    if (!metadata.owned.some((k) => k.equals(kind))) throw invalid(item, `${kind} is not a kind this plugin owns`);
    resolveNamespace(primaryNamespace, d.namespace ?? null, item);
  });
  response.events.forEach((e, i) => {
    if (!UPPER_CAMEL.test(e.reason) || e.reason.length > 128) {
      throw invalid(`events[${i}]`, `reason ${JSON.stringify(e.reason)} must be UpperCamelCase, at most 128 characters`);
    }
    if (e.message.length > 1024) throw invalid(`events[${i}]`, 'message is over 1024 characters');
  });
}

function checkObject(metadata, primaryNamespace, i, object) {
  const anonymous = `apply[${i}]`;
  if (object === null || typeof object !== 'object' || Array.isArray(object)) {
    throw invalid(anonymous, 'must be a JSON object');
  }
  const { apiVersion, kind: kindName, metadata: meta } = object;
  if (typeof apiVersion !== 'string' || !apiVersion || typeof kindName !== 'string' || !kindName) {
    throw invalid(anonymous, 'apiVersion and kind must be non-empty strings');
  }
  const kind = KindRef.fromApiVersion(apiVersion, kindName);
  if (meta === null || typeof meta !== 'object' || Array.isArray(meta)) {
    throw invalid(anonymous, `${kind}: metadata must be a JSON object`);
  }
  const { name } = meta;
  if (typeof name !== 'string' || !name) throw invalid(anonymous, `${kind} has no metadata.name`);
  const item = `apply[${i}] (${kind} ${name})`;
  const declared = [...metadata.owned, ...metadata.written].some((k) => k.equals(kind));
  if (!declared) throw invalid(item, `${kind} is not declared in owns or writes`);
  for (const [field, owner] of HOST_OWNED) {
    if (meta[field] != null) throw invalid(item, `metadata.${field} ${owner}; a plugin may not set it`);
  }
  return { kind, namespace: resolveNamespace(primaryNamespace, meta.namespace ?? null, item), name };
}

/** A namespaced primary confines its plugin to its own namespace; an absent namespace means the primary's. */
function resolveNamespace(primary, declared, item) {
  if (primary === null || declared === null) return declared ?? primary;
  if (declared !== primary) {
    throw invalid(item, `namespace ${JSON.stringify(declared)} is not the primary's namespace ${JSON.stringify(primary)}`);
  }
  return primary;
}
