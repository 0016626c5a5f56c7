import type { AdmissionRequest, OperationValue, UserInfo, Verdict } from './admission.js';
import type { ClusterInfo, KindRef, LogLevelValue, PluginMetadata } from './contract.js';
import type { KubeObject } from './objects.js';
import type { Plugin } from './plugin.js';
import type { DeleteRef, Response, ResponseEvent } from './response.js';

/** The clock of a test that sets none, 2024-01-01T00:00:00Z: the same as `reconciler-host test`. */
export const DEFAULT_NOW_MILLIS: number;

/** What a metadata-only read returns. */
export function metadataOnly(object: KubeObject): KubeObject;
/** Whether `object`'s controller ownerReference points at `owner`. */
export function isControlledBy(object: KubeObject, owner: KubeObject): boolean;

export interface LogEntry {
  level: LogLevelValue;
  message: string;
  fields: [string, string][];
}

/** A plugin's response, with accessors for assertions. */
export class Outcome<P extends KubeObject = KubeObject> {
  readonly response: Response;
  /** The applied objects, parsed. */
  readonly applied: KubeObject[];
  appliedOf<T extends KubeObject = KubeObject>(kind: KindRef): T[];
  /** The status the plugin asked for, typed as the primary's. */
  readonly status: NonNullable<P['status']> | null;
  readonly events: ResponseEvent[];
  readonly deleted: DeleteRef[];
  readonly requeueAfterMs: number | null;
  readonly finalized: boolean;
}

/** What admission answered: the verdict, and the defaulted object when defaulting changed it. */
export class AdmissionOutcome<P extends KubeObject = KubeObject> {
  readonly verdict: Verdict;
  readonly defaulted: P | null;
  readonly allowed: boolean;
  /** The denial message, or "" when there is none. */
  readonly message: string;
  readonly warnings: string[];
}

/** One plugin against an in-memory cache and a settable clock, with the host's rules. */
export class Harness<P extends KubeObject = KubeObject> {
  constructor(plugin: Plugin<P>, options?: { now?: Date });
  readonly metadata: PluginMetadata;
  nowMillis: number;
  cluster: ClusterInfo;
  readonly logs: LogEntry[];
  withObjects(...objects: KubeObject[]): this;
  /** Adds or replaces an object (a broken object is a broken test: throws). */
  insert(object: KubeObject): void;
  remove(kind: KindRef, namespace: string | null | undefined, name: string): boolean;
  at(date: Date): this;
  /** Reconciles as if in the member cluster `name` with `labels`. */
  inCluster(name: string, labels?: Record<string, string>): this;
  advance(ms: number): void;
  /** The owned children the host would pass, sorted by kind, namespace, name. */
  childrenOf(primary: KubeObject): KubeObject[];
  /** Reconciles `primary` as the host would; the plugin's error is thrown. */
  /** Whether the host would wake a primary for this change of an object, by the plugin's declared triggers. */
  wakes(old: object, next: object): boolean;
  reconcile(primary: P): Outcome<P>;
  /** Admission as the host runs it: defaults first (when mutating), then validation. */
  admit(request: {
    operation: OperationValue;
    object?: P | null;
    oldObject?: P | null;
    userInfo?: UserInfo;
    dryRun?: boolean;
  }): AdmissionOutcome<P>;
  admitCreate(object: P): AdmissionOutcome<P>;
  admitUpdate(oldObject: P, object: P): AdmissionOutcome<P>;
  admitDelete(oldObject: P): AdmissionOutcome<P>;
}

export type { AdmissionRequest };
