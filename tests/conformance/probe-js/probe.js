// The conformance probe in JavaScript (tests/conformance/README.md): makes
// the host calls its primary's `spec.calls` name, reports what each returned
// in `status.results`, and answers with what `spec.respond` holds. The same
// decisions as the Rust probe (tests/conformance/probe-rust).

import {
  EventType,
  HostError,
  KindRef,
  MapRule,
  PluginMetadata,
  ReconcileError,
  Response,
  plugin,
} from '../../../sdk-js/src/index.js';

/** @param {string} kind */
const core = (kind) => new KindRef('', 'v1', kind);

export const METADATA = new PluginMetadata(
  'conformance-probe',
  '0.1.0',
  new KindRef('conformance.reconciler-host.io', 'v1', 'Probe'),
)
  .owns(core('ConfigMap'))
  .writes(core('Service'))
  .readsInNamespace(core('Pod'), MapRule.label('probe'), { metadataOnly: true })
  .readsKind(core('Secret'), MapRule.none())
  .readsKind(core('Namespace'), MapRule.none())
  .withHints({ maxEvents: 2, maxApplies: 3, maxDeletes: 2 });

/** `v1/Pod` or `apps/v1/Deployment`. @param {string} text */
function kindOf(text) {
  const slash = text.lastIndexOf('/');
  return KindRef.fromApiVersion(text.slice(0, Math.max(slash, 0)), text.slice(slash + 1));
}

/**
 * @typedef {import('../../../sdk-js/src/index.js').KubeObject} KubeObject
 * @param {{ names?: boolean }} call
 * @param {KubeObject[]} objects
 */
function shown(call, objects) {
  if (call.names !== true) return objects;
  return objects.map(({ metadata: { namespace, name } }) => (namespace ? `${namespace}/${name}` : (name ?? '')));
}

/** @param {() => unknown} call */
function refused(call) {
  try {
    return call();
  } catch (e) {
    if (e instanceof HostError) return { refused: true };
    throw e;
  }
}

/**
 * @param {Record<string, any>} call
 * @param {import('../../../sdk-js/src/index.js').Context} ctx
 */
function resultOf(call, ctx) {
  if ('get' in call) {
    const c = call.get;
    return refused(() => ctx.get(kindOf(c.kind ?? ''), c.namespace, c.name ?? ''));
  }
  if ('list' in call) {
    const c = call.list;
    return refused(() => shown(c, ctx.list(kindOf(c.kind ?? ''), c.namespace, c.selector ?? '')));
  }
  if ('children' in call) return shown(call.children, ctx.children(kindOf(call.children.kind ?? '')));
  if ('now' in call) return ctx.nowMillis();
  if ('cluster' in call) {
    const { name, labels } = ctx.cluster();
    return { name, labels: { ...labels } };
  }
  if ('deleting' in call) return ctx.deleting;
  throw new ReconcileError(`unknown call ${JSON.stringify(call)}`);
}

/**
 * @param {KubeObject} probe
 * @param {import('../../../sdk-js/src/index.js').Context} ctx
 */
export function reconcile(probe, ctx) {
  /** @type {Record<string, any>} */
  const spec = probe.spec ?? {};
  const results = (spec.calls ?? []).map((/** @type {Record<string, any>} */ call) => resultOf(call, ctx));
  const response = new Response().status({ results });
  const respond = spec.respond ?? {};
  for (const object of respond.apply ?? []) response.apply(object);
  for (const d of respond.delete ?? []) response.delete(kindOf(d.kind ?? ''), d.namespace, d.name ?? '');
  for (const e of respond.events ?? []) {
    response.event(e.type === 'Warning' ? EventType.WARNING : EventType.NORMAL, e.reason ?? '', e.message ?? '');
  }
  return response;
}

export default plugin(METADATA, reconcile);
