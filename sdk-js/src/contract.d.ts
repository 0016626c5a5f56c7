// The contract (`wit/reconciler.wit`, `reconciler:plugin@0.2.3`) in
// TypeScript: the declarations of contract.js.

export const CONTRACT_PACKAGE: 'reconciler:plugin';
export const CONTRACT_VERSION: string;
export const CLUSTER_NAME_LABEL: 'reconciler-host.io/cluster';
export const LOCAL_CLUSTER: 'local';

/** The cluster a reconcile runs in: `local`, or a member's name with its source's labels. */
export class ClusterInfo {
  constructor(name: string, labels?: Record<string, string>);
  readonly name: string;
  /** Always holds `CLUSTER_NAME_LABEL` with the name. */
  readonly labels: Readonly<Record<string, string>>;
  label(key: string): string | undefined;
}

/** A Kubernetes group-version-kind; the core group is `""`. */
export class KindRef {
  constructor(group: string, version: string, kind: string);
  readonly group: string;
  readonly version: string;
  readonly kind: string;
  static fromApiVersion(apiVersion: string, kind: string): KindRef;
  /** The kind of an object from its `apiVersion` and `kind`, or null. */
  static of(object: unknown): KindRef | null;
  /** Orders as the host does: group, then version, then kind. */
  static compare(a: KindRef, b: KindRef): number;
  readonly apiVersion: string;
  equals(other: KindRef | null | undefined): boolean;
  toString(): string;
}

/** Code-unit order, as the host compares names. */
export function cmp(a: string, b: string): -1 | 0 | 1;

/** How an event on a read kind finds its primary object. */
export type MapRuleValue =
  | { rule: 'label'; key: string }
  | { rule: 'annotation'; key: string }
  | { rule: 'same-name' }
  | { rule: 'none' };

export const MapRule: Readonly<{
  /** The primary is named by this label of the read object (in its namespace). */
  label(key: string): MapRuleValue;
  /** The primary is named by this annotation (`namespace/name` or `name`). */
  annotation(key: string): MapRuleValue;
  /** The primary has the read object's namespace and name. */
  sameName(): MapRuleValue;
  /** Events on the read kind reconcile nothing. */
  none(): MapRuleValue;
}>;

/** A kind of change of one object that wakes its primary (WIT `triggers.change`, 0.2.3). */
export type ChangeValue =
  | { change: 'any' }
  | { change: 'generation' }
  | { change: 'labels' }
  | { change: 'annotations' }
  | { change: 'fields'; paths: readonly string[] };

export const Change: Readonly<{
  /** Any change at all (what a kind with no trigger gets). */
  any(): ChangeValue;
  /** `metadata.generation` moved (the spec changed), or deletion began. */
  generation(): ChangeValue;
  /** `metadata.labels` changed. */
  labels(): ChangeValue;
  /** `metadata.annotations` changed. */
  annotations(): ChangeValue;
  /** The value at one of these dotted paths changed, appeared or went. */
  fields(...paths: string[]): ChangeValue;
}>;

/** Whether going from `old` to `next` is `change`: the host's comparison. */
export function changeHappened(change: ChangeValue, old: object, next: object): boolean;

export interface KindTrigger {
  kind: KindRef;
  wakeOn: ChangeValue[];
}

export type EventTypeValue = 'Normal' | 'Warning';
export const EventType: Readonly<{ NORMAL: 'Normal'; WARNING: 'Warning' }>;

export type LogLevelValue = 'trace' | 'debug' | 'info' | 'warn' | 'error';
export const LogLevel: Readonly<{ TRACE: 'trace'; DEBUG: 'debug'; INFO: 'info'; WARN: 'warn'; ERROR: 'error' }>;

/** Requests of the sandbox; left out means the host's default. */
export interface Hints {
  maxConcurrentReconciles?: number;
  memoryLimitMib?: number;
  timeoutMs?: number;
  maxOutputKib?: number;
  maxEvents?: number;
  maxApplies?: number;
  maxDeletes?: number;
}

export interface ReadKind {
  kind: KindRef;
  mapsBy: MapRuleValue;
  metadataOnly: boolean;
  sameNamespace: boolean;
}

/** What a plugin is and which kinds it may touch, declared builder style. */
export class PluginMetadata {
  constructor(name: string, version: string, primary: KindRef);
  readonly name: string;
  readonly version: string;
  readonly primary: KindRef;
  readonly owned: KindRef[];
  readonly reads: ReadKind[];
  readonly written: KindRef[];
  readonly finalizer: string | undefined;
  readonly hints: Hints;
  readonly triggers: KindTrigger[];
  /** Which changes of objects of `kind` wake their primary: any one of `changes` (none declared: every change). */
  wakeOn(kind: KindRef, ...changes: ChangeValue[]): this;
  /** The changes of `kind` that wake a primary; null: any change. */
  triggerOf(kind: KindRef): ChangeValue[] | null;
  /** An owned child kind: ownerReference set, children passed back, pruned when not returned. */
  owns(kind: KindRef): this;
  /** A read kind, readable in any namespace. */
  readsKind(kind: KindRef, mapsBy: MapRuleValue, options?: { metadataOnly?: boolean }): this;
  /** A read kind confined to the primary's namespace. */
  readsInNamespace(kind: KindRef, mapsBy: MapRuleValue, options?: { metadataOnly?: boolean }): this;
  /** A kind patched without owning it. */
  writes(kind: KindRef): this;
  withFinalizer(finalizer: string): this;
  withHints(hints: Hints): this;
  declares(kind: KindRef): boolean;
  /** The namespace a read of `kind` uses, or throws with the host's message. */
  checkRead(kind: KindRef, namespace: string | null | undefined, primaryNamespace: string | null | undefined): string | null;
  isMetadataOnly(kind: KindRef): boolean;
}
