import type { ClusterInfo, KindRef, LogLevelValue } from './contract.js';
import type { KubeObject } from './objects.js';

/** The boundary a Context reads through: the WIT imports in Wasm, the harness in tests. */
export interface HostApi {
  get(kind: KindRef, namespace: string | undefined, name: string): string | undefined;
  list(kind: KindRef, namespace: string | undefined, selector: string): string[];
  nowMillis(): number | bigint;
  cluster(): ClusterInfo;
  log(level: LogLevelValue, message: string, fields: [string, string][]): void;
}

/**
 * What a plugin can observe during one reconcile beyond its primary. A
 * refused cache call throws `HostError`; let it escape and the reconcile
 * fails with its message.
 */
export class Context {
  constructor(host: HostApi, childrenJson: string[], deleting: boolean);
  /** True when the primary has a deletionTimestamp: clean up, then return `new Response().finalized()`. */
  readonly deleting: boolean;
  /** The host's clock as a Date (virtual in tests). */
  now(): Date;
  nowMillis(): number;
  /** The cluster this object lives in. */
  cluster(): ClusterInfo;
  /** Owned children the host observed for this primary, of `kind` (all when omitted). */
  children<T extends KubeObject = KubeObject>(kind?: KindRef): T[];
  /** One object from the cache, or null. */
  get<T extends KubeObject = KubeObject>(kind: KindRef, namespace: string | null | undefined, name: string): T | null;
  /** Objects of `kind` matching a label selector (`''` for all), ordered by namespace, then name. */
  list<T extends KubeObject = KubeObject>(kind: KindRef, namespace: string | null | undefined, selector?: string): T[];
  /** A structured log entry; the host tags it with plugin and object. */
  log(level: LogLevelValue, message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
}
