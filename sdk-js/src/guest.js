// The Wasm side of the boundary: the component's imports of
// `wit/reconciler.wit` and the glue between its values and the SDK's types.
// Only a componentize-js build can load this module (the `reconciler:plugin`
// imports exist only there); bin/build-plugin.js imports it into the entry.

import * as cache from 'reconciler:plugin/cache@0.2.3';
import { now } from 'reconciler:plugin/clock@0.2.3';
import { current as currentCluster } from 'reconciler:plugin/cluster@0.2.3';
import { log } from 'reconciler:plugin/log@0.2.3';

import { dispatchDefaults, dispatchValidate, FailurePolicy } from './admission.js';
import { ClusterInfo, EventType } from './contract.js';
import { ReconcileError } from './errors.js';
import { dispatch } from './plugin.js';

const witKind = (k) => ({ group: k.group, version: k.version, kind: k.kind });

/** The host API backed by the imports; a refused call throws with the host's message as `payload`. */
const witHost = {
  get: (kind, namespace, name) => cache.get(witKind(kind), namespace, name),
  list: (kind, namespace, selector) => cache.list(witKind(kind), namespace, selector),
  nowMillis: () => now(),
  cluster: () => {
    const { name, labels } = currentCluster();
    return new ClusterInfo(name, Object.fromEntries(labels));
  },
  log: (level, message, fields) => log(level, message, fields),
};

const witMapRule = ({ rule, key }) => (key === undefined ? { tag: rule } : { tag: rule, val: key });

function metadataToWit(m) {
  return {
    name: m.name,
    version: m.version,
    primary: witKind(m.primary),
    owns: m.owned.map(witKind),
    reads: m.reads.map((r) => ({
      kind: witKind(r.kind),
      mapsBy: witMapRule(r.mapsBy),
      metadataOnly: r.metadataOnly,
      sameNamespace: r.sameNamespace,
    })),
    writes: m.written.map(witKind),
    finalizer: m.finalizer,
    hints: { ...m.hints },
  };
}

function responseToWit(r) {
  return {
    apply: r.applied,
    delete: r.deleted,
    status: r.statusJson,
    events: r.events.map((e) => ({
      eventType: e.type === EventType.NORMAL ? 'normal' : 'warning',
      reason: e.reason,
      message: e.message,
    })),
    requeueAfterMs: r.requeueAfterMs === undefined ? undefined : BigInt(r.requeueAfterMs),
    finalized: r.isFinalized,
  };
}

const witChange = (c) => (c.change === 'fields' ? { tag: 'fields', val: [...c.paths] } : { tag: c.change });

/** The component's `triggers` export (0.2.3): what `PluginMetadata.wakeOn` declared; none means every change wakes. */
export function exportTriggers({ metadata }) {
  return {
    triggers: () => metadata.triggers.map((t) => ({ kind: witKind(t.kind), wakeOn: t.wakeOn.map(witChange) })),
  };
}

/** The component's `reconciler` export for a plugin made with `plugin()`. */
export function exportPlugin({ metadata, reconcile }) {
  return {
    metadata: () => metadataToWit(metadata),
    reconcile(request) {
      // The message of a failure goes to the Warning Event.
      return answer(() => responseToWit(dispatch(reconcile, request, witHost)));
    },
  };
}

/**
 * The WIT result of `call`: ok with its value, or err with the plugin's own
 * error message, or a bug's name and message (its stack goes to stderr,
 * which the host logs under the object).
 */
function answer(call) {
  try {
    return { tag: 'ok', val: call() };
  } catch (e) {
    if (!(e instanceof ReconcileError)) {
      console.error(e instanceof Error ? `${e.name}: ${e.message}\n${e.stack}` : String(e));
    }
    const message = e instanceof ReconcileError ? e.message : `${e?.name ?? 'Error'}: ${e?.message ?? String(e)}`;
    return { tag: 'err', val: message };
  }
}

const witOperation = (op) => op.toLowerCase();

function callFromWit(r) {
  return {
    operation: r.operation.toUpperCase(),
    object: r.object,
    oldObject: r.oldObject,
    userInfo: {
      username: r.userInfo.username,
      uid: r.userInfo.uid,
      groups: [...r.userInfo.groups],
      extra: Object.fromEntries(r.userInfo.extra),
    },
    dryRun: r.dryRun,
  };
}

/** The component's `admission` export for a plugin made with `plugin(..., { validate, applyDefaults })`. */
export function exportAdmission({ admission: served }) {
  const { settings } = served;
  return {
    settings: () => ({
      operations: settings.operations.map(witOperation),
      mutating: settings.mutating,
      failurePolicy: settings.failurePolicy === FailurePolicy.IGNORE ? 'ignore' : 'fail',
      timeoutMs: settings.timeoutMs,
    }),
    validate: (request) =>
      answer(() => {
        const v = dispatchValidate(served, callFromWit(request));
        return { allowed: v.allowed, message: v.message, warnings: [...v.warnings] };
      }),
    applyDefaults: (request) => answer(() => dispatchDefaults(served, callFromWit(request))),
  };
}
