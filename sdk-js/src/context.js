// What a plugin can observe during one reconcile, beyond its primary.

import { KindRef, LogLevel } from './contract.js';
import { HostError, ReconcileError } from './errors.js';

/**
 * The cache (as the host holds it), the owned children observed for this
 * primary, the clock and the log. A refused cache call throws `HostError`;
 * let it escape and the reconcile fails with its message.
 *
 * `host` is the boundary: the WIT imports inside Wasm, the harness in tests.
 */
export class Context {
  #host;
  #childrenJson;
  #children;
  #cluster;

  constructor(host, childrenJson, deleting) {
    this.#host = host;
    this.#childrenJson = childrenJson;
    /** True when the primary has a deletionTimestamp: clean up, then return `new Response().finalized()`. */
    this.deleting = deleting;
  }

  /** The host's clock as a Date (virtual in tests). */
  now() {
    return new Date(this.nowMillis());
  }

  nowMillis() {
    return Number(this.#host.nowMillis());
  }

  /**
   * The cluster this object lives in: `local` for the host's own (and in
   * `simulate`, `test` and the harness unless told otherwise), or the member
   * cluster's name with its source's labels. Everything else the reconcile
   * sees and does stays within it; ask only to decide differently per
   * cluster (`ctx.cluster().label('tier')`).
   */
  cluster() {
    // One call cannot change cluster, and asking the host costs a crossing
    // of the sandbox boundary each time.
    this.#cluster ??= this.#host.cluster();
    return this.#cluster;
  }

  /** Owned children the host observed for this primary, of `kind` (all when omitted). */
  children(kind) {
    this.#children ??= this.#childrenJson.map((text) => parse(text, 'a child object'));
    return this.#children.filter((c) => kind == null || kind.equals(KindRef.of(c)));
  }

  /** One object from the cache, or null. A metadata-only read kind comes as apiVersion, kind and metadata. */
  get(kind, namespace, name) {
    const text = hostCall(() => this.#host.get(kind, namespace ?? undefined, name));
    return text == null ? null : parse(text, `${kind} ${name}`);
  }

  /** Objects of `kind` matching a label selector (`''` for all), ordered by namespace, then name. */
  list(kind, namespace, selector = '') {
    return hostCall(() => this.#host.list(kind, namespace ?? undefined, selector)).map((text) =>
      parse(text, `a listed ${kind}`),
    );
  }

  /** A structured log entry; the host tags it with plugin and object. */
  log(level, message, fields = {}) {
    this.#host.log(level, message, Object.entries(fields).map(([k, v]) => [k, String(v)]));
  }

  info(message, fields) {
    this.log(LogLevel.INFO, message, fields);
  }

  warn(message, fields) {
    this.log(LogLevel.WARN, message, fields);
  }
}

function hostCall(call) {
  try {
    return call();
  } catch (e) {
    if (e instanceof HostError) throw e;
    // The WIT import throws its `err` string as the error's payload.
    const reason = typeof e?.payload === 'string' ? e.payload : (e?.message ?? String(e));
    throw new HostError(`host: ${reason}`);
  }
}

function parse(text, what) {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new ReconcileError(`cannot parse ${what}: ${e.message}`);
  }
}
