// The contract (`wit/reconciler.wit`, `reconciler:plugin@0.2.3`) in
// JavaScript: plain classes that mirror the WIT records. The guest glue
// converts them into the component's values; the native harness uses them
// directly, so a plugin tested with `node --test` declares and is checked
// exactly as inside the host.

export const CONTRACT_PACKAGE = 'reconciler:plugin';
export const CONTRACT_VERSION = '0.2.3';
export const CLUSTER_NAME_LABEL = 'reconciler-host.io/cluster';
export const LOCAL_CLUSTER = 'local';

/**
 * The cluster a reconcile runs in (WIT `cluster.cluster-info`, 0.2.2): `local`
 * for the host's own, or a member cluster's name, with the labels of its
 * source (a plain object), which always hold `CLUSTER_NAME_LABEL` with the name.
 */
export class ClusterInfo {
  constructor(name, labels = {}) {
    this.name = name;
    this.labels = Object.freeze({ ...labels, [CLUSTER_NAME_LABEL]: name });
    Object.freeze(this);
  }

  label(key) {
    return Object.hasOwn(this.labels, key) ? this.labels[key] : undefined;
  }
}

/** A Kubernetes group-version-kind; the core group is `""`. */
export class KindRef {
  constructor(group, version, kind) {
    this.group = group;
    this.version = version;
    this.kind = kind;
    Object.freeze(this);
  }

  static fromApiVersion(apiVersion, kind) {
    const slash = apiVersion.lastIndexOf('/');
    return slash < 0
      ? new KindRef('', apiVersion, kind)
      : new KindRef(apiVersion.slice(0, slash), apiVersion.slice(slash + 1), kind);
  }

  /** The kind of an object from its `apiVersion` and `kind`, or null. */
  static of(object) {
    const { apiVersion, kind } = object ?? {};
    if (typeof apiVersion !== 'string' || typeof kind !== 'string') return null;
    return KindRef.fromApiVersion(apiVersion, kind);
  }

  get apiVersion() {
    return this.group ? `${this.group}/${this.version}` : this.version;
  }

  equals(other) {
    return other != null && this.group === other.group && this.version === other.version && this.kind === other.kind;
  }

  /** Orders as the host does: group, then version, then kind. */
  static compare(a, b) {
    return cmp(a.group, b.group) || cmp(a.version, b.version) || cmp(a.kind, b.kind);
  }

  toString() {
    return `${this.apiVersion} ${this.kind}`;
  }
}

/** Code-unit order, as Rust compares strings byte-wise for ASCII names. */
export function cmp(a, b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** How an event on a read kind finds its primary object. */
export const MapRule = Object.freeze({
  label: (key) => ({ rule: 'label', key }),
  annotation: (key) => ({ rule: 'annotation', key }),
  sameName: () => ({ rule: 'same-name' }),
  none: () => ({ rule: 'none' }),
});

/**
 * A kind of change of one object that wakes its primary (WIT `triggers.change`, 0.2.3):
 * `Change.any()`, `Change.generation()` (the spec moved, or deletion began),
 * `Change.labels()`, `Change.annotations()`, `Change.fields('status.readyReplicas', ...)`.
 */
export const Change = Object.freeze({
  any: () => Object.freeze({ change: 'any' }),
  generation: () => Object.freeze({ change: 'generation' }),
  labels: () => Object.freeze({ change: 'labels' }),
  annotations: () => Object.freeze({ change: 'annotations' }),
  fields: (...paths) => Object.freeze({ change: 'fields', paths: Object.freeze([...paths]) }),
});

/** The value at `path` (object keys only); undefined when a step is missing or not an object, and for an empty object. */
function valueAt(value, path) {
  for (const key of path) {
    if (value === null || typeof value !== 'object' || Array.isArray(value) || !(key in value)) return undefined;
    value = value[key];
  }
  if (value !== null && typeof value === 'object' && !Array.isArray(value) && Object.keys(value).length === 0) return undefined;
  return value === null ? undefined : value;
}

const same = (a, b) => JSON.stringify(canonical(a)) === JSON.stringify(canonical(b));
function canonical(v) {
  if (Array.isArray(v)) return v.map(canonical);
  if (v !== null && typeof v === 'object') {
    return Object.fromEntries(Object.keys(v).sort().map((k) => [k, canonical(v[k])]));
  }
  return v;
}

/** Whether going from `old` to `next` is `change`: the host's comparison (`contract/src/triggers.rs`). */
export function changeHappened(change, old, next) {
  const differs = (path) => !same(valueAt(old, path), valueAt(next, path));
  switch (change.change) {
    case 'any':
      return !same(old, next);
    case 'generation':
      return (
        differs(['metadata', 'generation']) ||
        (valueAt(old, ['metadata', 'deletionTimestamp']) === undefined &&
          valueAt(next, ['metadata', 'deletionTimestamp']) !== undefined)
      );
    case 'labels':
    case 'annotations':
      return differs(['metadata', change.change]);
    default:
      return change.paths.some((p) => differs(p.split('.')));
  }
}

export const EventType = Object.freeze({ NORMAL: 'Normal', WARNING: 'Warning' });
export const LogLevel = Object.freeze({ TRACE: 'trace', DEBUG: 'debug', INFO: 'info', WARN: 'warn', ERROR: 'error' });

const HINTS = ['maxConcurrentReconciles', 'memoryLimitMib', 'timeoutMs', 'maxOutputKib', 'maxEvents', 'maxApplies', 'maxDeletes'];

/**
 * What a plugin is and which kinds it may touch, declared builder style:
 *
 *   new PluginMetadata('podset-js', '0.1.0', PODSET)
 *     .owns(DEPLOYMENT)
 *     .readsInNamespace(POD, MapRule.label('podset'), { metadataOnly: true })
 */
export class PluginMetadata {
  constructor(name, version, primary) {
    this.name = name;
    this.version = version;
    this.primary = primary;
    this.owned = [];
    this.reads = [];
    this.written = [];
    this.finalizer = undefined;
    this.hints = {};
    this.triggers = [];
  }

  /**
   * Which changes of objects of `kind` (the primary, an owned kind or a mapped
   * read kind) wake their primary: any one of `changes`. Without it every change
   * does; creation and deletion always wake.
   */
  wakeOn(kind, ...changes) {
    this.triggers.push({ kind, wakeOn: changes });
    return this;
  }

  /** The changes of `kind` that wake a primary; null: any change. */
  triggerOf(kind) {
    return this.triggers.find((t) => t.kind.equals(kind))?.wakeOn ?? null;
  }

  /** An owned child kind: ownerReference set, children passed back, pruned when not returned. */
  owns(kind) {
    this.owned.push(kind);
    return this;
  }

  /** A read kind, readable in any namespace. */
  readsKind(kind, mapsBy, { metadataOnly = false } = {}) {
    this.reads.push({ kind, mapsBy, metadataOnly, sameNamespace: false });
    return this;
  }

  /** A read kind confined to the primary's namespace. */
  readsInNamespace(kind, mapsBy, { metadataOnly = false } = {}) {
    this.reads.push({ kind, mapsBy, metadataOnly, sameNamespace: true });
    return this;
  }

  /** A kind patched without owning it. */
  writes(kind) {
    this.written.push(kind);
    return this;
  }

  withFinalizer(finalizer) {
    this.finalizer = finalizer;
    return this;
  }

  /** Sets hints by their WIT names in camelCase (`{ memoryLimitMib: 128 }`). */
  withHints(hints) {
    for (const key of Object.keys(hints)) {
      if (!HINTS.includes(key)) throw new TypeError(`unknown hint ${key}: one of ${HINTS.join(', ')}`);
    }
    this.hints = { ...this.hints, ...hints };
    return this;
  }

  // The cache rules, as the host applies them to every `get` and `list`.

  declares(kind) {
    return (
      this.primary.equals(kind) ||
      this.owned.some((k) => k.equals(kind)) ||
      this.written.some((k) => k.equals(kind)) ||
      this.reads.some((r) => r.kind.equals(kind))
    );
  }

  /** The namespace a read of `kind` uses, or throws with the host's message. */
  checkRead(kind, namespace, primaryNamespace) {
    if (!this.declares(kind)) {
      throw new Error(
        `plugin ${JSON.stringify(this.name)} did not declare ${kind}: add it to owns, reads or writes in its metadata to read it`,
      );
    }
    const confined = this.reads.some((r) => r.sameNamespace && r.kind.equals(kind));
    if (!confined || primaryNamespace == null) return namespace ?? null;
    if (namespace == null || namespace === primaryNamespace) return primaryNamespace;
    throw new Error(
      `plugin ${JSON.stringify(this.name)} declared ${kind} a same-namespace read kind, so it reads it only in its ` +
        `primary's namespace ${JSON.stringify(primaryNamespace)}, not in ${JSON.stringify(namespace)}: declare it with ` +
        '`readsKind` instead of `readsInNamespace` to read across namespaces',
    );
  }

  /** Whether reads of `kind` return metadata only. */
  isMetadataOnly(kind) {
    return this.reads.some((r) => r.metadataOnly && r.kind.equals(kind));
  }
}
