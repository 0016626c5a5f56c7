// A native test harness: run a plugin's reconcile under `node --test`, no Wasm.
//
// The harness stands in for the host with its rules: an in-memory cache
// answers `get` and `list` for declared kinds only (same-namespace read kinds
// only in the primary's namespace, metadata-only read kinds projected to
// apiVersion, kind and metadata, label selectors, order by namespace then
// name); the request is assembled as the host assembles it (children: objects
// of owned kinds in the primary's namespace whose controller ownerReference is
// the primary; `deleting` from the deletionTimestamp); the clock is whatever
// the test sets. The call crosses the same JSON boundary as the compiled plugin:
//
//   const outcome = new Harness(podset).withObjects(pod).reconcile(podSet);
//   assert.equal(outcome.appliedOf(DEPLOYMENT)[0].spec.replicas, 3);

import { dispatchDefaults, dispatchValidate, Operation, Verdict } from './admission.js';
import { ClusterInfo, KindRef, LOCAL_CLUSTER, changeHappened, cmp } from './contract.js';
import { labels, name, namespace } from './objects.js';
import { dispatch } from './plugin.js';
import { checkResponse } from './response-rules.js';
import { parseSelector } from './selector.js';

/** The clock of a test that sets none, 2024-01-01T00:00:00Z: the same as `reconciler-host test`. */
export const DEFAULT_NOW_MILLIS = 1_704_067_200_000;

/** What a metadata-only read returns: apiVersion, kind and metadata without managedFields. */
export function metadataOnly(object) {
  const { managedFields, ...metadata } = object.metadata ?? {};
  return { apiVersion: object.apiVersion, kind: object.kind, metadata };
}

/** Whether `object`'s controller ownerReference points at `owner` (by uid when both have one, else kind and name). */
export function isControlledBy(object, owner) {
  const ownerUid = owner.metadata?.uid;
  return (object.metadata?.ownerReferences ?? []).some((ref) => {
    if (ref.controller !== true) return false;
    if (ref.uid != null && ownerUid != null) return ref.uid === ownerUid;
    return ref.kind === owner.kind && ref.name === name(owner);
  });
}

function order(a, b) {
  return (
    KindRef.compare(a.kind, b.kind) ||
    (a.namespace === null) - (b.namespace === null) ||
    // a namespace of null sorts first, as the host's Option does
    (a.namespace === null ? 0 : (b.namespace === null ? 0 : cmp(a.namespace, b.namespace))) ||
    cmp(a.name, b.name)
  );
}

export class Harness {
  #objects = new Map();

  /** `plugin` is what `plugin(metadata, reconcile)` returned. */
  constructor(plugin, { now } = {}) {
    this.metadata = plugin.metadata;
    this.reconcileFn = plugin.reconcile;
    this.admission = plugin.admission ?? null;
    this.nowMillis = now === undefined ? DEFAULT_NOW_MILLIS : now.getTime();
    this.cluster = new ClusterInfo(LOCAL_CLUSTER);
    this.logs = [];
  }

  withObjects(...objects) {
    objects.forEach((o) => this.insert(o));
    return this;
  }

  /** Adds or replaces an object (a broken object is a broken test: throws). */
  insert(object) {
    const kind = KindRef.of(object);
    if (kind === null || !name(object)) {
      throw new TypeError(`cannot cache ${JSON.stringify(object)}: it needs apiVersion, kind and metadata.name`);
    }
    const entry = { kind, namespace: namespace(object), name: name(object), object: structuredClone(object) };
    this.#objects.set(JSON.stringify([kind.group, kind.version, kind.kind, entry.namespace, entry.name]), entry);
  }

  remove(kind, ns, objectName) {
    return this.#objects.delete(JSON.stringify([kind.group, kind.version, kind.kind, ns ?? null, objectName]));
  }

  at(date) {
    this.nowMillis = date.getTime();
    return this;
  }

  /** Reconciles as if in the member cluster `clusterName` with `labels` (plus the name label, as the host gives it); `local` until called. */
  inCluster(clusterName, labels = {}) {
    this.cluster = new ClusterInfo(clusterName, labels);
    return this;
  }

  advance(ms) {
    this.nowMillis += ms;
  }

  #sorted() {
    return [...this.#objects.values()].sort(order);
  }

  /** The owned children the host would pass, sorted by kind, namespace, name. */
  childrenOf(primary) {
    const ns = namespace(primary);
    return this.#sorted()
      .filter((e) => this.metadata.owned.some((k) => k.equals(e.kind)) && e.namespace === ns)
      .filter((e) => isControlledBy(e.object, primary))
      .map((e) => e.object);
  }

  /**
   * Whether the host would wake a primary for this change of an object from `old`
   * to `next`, by the plugin's declared triggers (`PluginMetadata.wakeOn`): the
   * host's own comparison. A kind with no trigger wakes on any change; creation
   * and deletion always wake.
   */
  wakes(old, next) {
    const changes = this.metadata.triggerOf(KindRef.of(next));
    return changes === null || changes.some((c) => changeHappened(c, old, next));
  }

  /** Reconciles `primary` as the host would; the plugin's error, and a response the host would refuse (`./response-rules.js`), is thrown as `ReconcileError`. */
  reconcile(primary) {
    const request = {
      primary: JSON.stringify(primary),
      children: this.childrenOf(primary).map((c) => JSON.stringify(c)),
      deleting: primary.metadata?.deletionTimestamp != null,
    };
    const response = dispatch(this.reconcileFn, request, this.#hostFor(namespace(primary)));
    // What the host refuses, the harness refuses, in the host's words.
    checkResponse(this.metadata, namespace(primary), response);
    return new Outcome(response);
  }

  /**
   * Admission as the host runs it, for `{operation, object, oldObject,
   * userInfo, dryRun}` (objects as plain objects): for a plugin that serves
   * admission for the operation, defaults first (when mutating, on create
   * and update), then validates the defaulted object. A plugin that serves
   * none, or not this operation, admits everything. A failed call throws:
   * the host answers it by the failure policy.
   */
  admit({ operation, object = null, oldObject = null, userInfo, dryRun = false }) {
    const served = this.admission;
    if (served === null || !served.settings.effectiveOperations().includes(operation)) {
      return new AdmissionOutcome(Verdict.allow(), null);
    }
    const text = (o) => (o === null ? undefined : JSON.stringify(o));
    const call = { operation, object: text(object), oldObject: text(oldObject), userInfo, dryRun };
    let defaulted = null;
    if (served.settings.mutating && (operation === Operation.CREATE || operation === Operation.UPDATE)) {
      const changed = dispatchDefaults(served, call);
      if (changed !== undefined) {
        defaulted = JSON.parse(changed);
        call.object = changed;
      }
    }
    return new AdmissionOutcome(dispatchValidate(served, call), defaulted);
  }

  admitCreate(object) {
    return this.admit({ operation: Operation.CREATE, object });
  }

  admitUpdate(oldObject, object) {
    return this.admit({ operation: Operation.UPDATE, object, oldObject });
  }

  admitDelete(oldObject) {
    return this.admit({ operation: Operation.DELETE, oldObject });
  }

  #hostFor(primaryNamespace) {
    const project = (kind, object) =>
      JSON.stringify(this.metadata.isMetadataOnly(kind) ? metadataOnly(object) : object);
    return {
      get: (kind, ns, objectName) => {
        const at = this.metadata.checkRead(kind, ns, primaryNamespace);
        const entry = this.#objects.get(JSON.stringify([kind.group, kind.version, kind.kind, at ?? null, objectName]));
        return entry === undefined ? undefined : project(kind, entry.object);
      },
      list: (kind, ns, selector) => {
        const at = this.metadata.checkRead(kind, ns, primaryNamespace);
        const matches = parseSelector(selector);
        return this.#sorted()
          .filter((e) => e.kind.equals(kind) && (at === null || e.namespace === at) && matches(labels(e.object)))
          .map((e) => project(kind, e.object));
      },
      nowMillis: () => this.nowMillis,
      cluster: () => this.cluster,
      log: (level, message, fields) => this.logs.push({ level, message, fields }),
    };
  }
}

/** What admission answered: the verdict on the (defaulted) object, and the defaulted object when defaulting changed it. */
export class AdmissionOutcome {
  constructor(verdict, defaulted) {
    this.verdict = verdict;
    this.defaulted = defaulted;
  }

  get allowed() {
    return this.verdict.allowed;
  }

  /** The denial message, or "" when there is none. */
  get message() {
    return this.verdict.message ?? '';
  }

  get warnings() {
    return this.verdict.warnings;
  }
}

/** A plugin's response, with accessors for assertions. */
export class Outcome {
  constructor(response) {
    this.response = response;
    this.applied = response.applied.map((text) => JSON.parse(text));
  }

  appliedOf(kind) {
    return this.applied.filter((o) => kind.equals(KindRef.of(o)));
  }

  get status() {
    return this.response.statusJson === undefined ? null : JSON.parse(this.response.statusJson);
  }

  get events() {
    return this.response.events;
  }

  get deleted() {
    return this.response.deleted;
  }

  get requeueAfterMs() {
    return this.response.requeueAfterMs ?? null;
  }

  get finalized() {
    return this.response.isFinalized;
  }
}
