// The admission of plugins/kubernetescluster, in JavaScript: the same checks,
// the same messages, passing the Rust plugin's admission golden cases.
//
// - An update may not change `spec.masters`, except back to the value the
//   cluster started with (`status.masters`).
// - `spec.timeoutSeconds` must be 1 or more.
// - Defaulting fills an empty `spec.version` with DEFAULT_VERSION.
//
// Its reconcile does only what the masters rule relies on: it records
// `spec.masters` in `status.masters` the first time it sees a cluster. The
// cluster operations themselves (Jobs, ConfigMaps, phases, the cleanup
// finalizer) are the Rust plugin's; this one shows admission in JavaScript.

import {
  Change,
  KindRef,
  Operation,
  PluginMetadata,
  ReconcileError,
  Response,
  Verdict,
  plugin,
} from '../../sdk-js/src/index.js';

export const KUBERNETES_CLUSTER = new KindRef('example.com', 'v1alpha1', 'KubernetesCluster');

/** The Kubernetes version a cluster gets when its spec names none. */
export const DEFAULT_VERSION = '1.33';
const DEFAULT_TIMEOUT_SECONDS = 600;

// Only the spec matters here; this plugin's own status write wakes nothing.
export const METADATA = new PluginMetadata('kubernetescluster-js', '0.1.0', KUBERNETES_CLUSTER).wakeOn(
  KUBERNETES_CLUSTER,
  Change.generation(),
);

/**
 * A KubernetesCluster as the plugin reads it (the JSDoc types are checked by
 * `tsc` against the SDK's declarations; they change nothing at run time).
 * @typedef {import('../../sdk-js/src/index.js').KubeObject<
 *   { masters?: unknown, version?: string, timeoutSeconds?: number },
 *   { masters?: number }
 * >} KubernetesCluster
 * @typedef {import('../../sdk-js/src/index.js').AdmissionRequest<KubernetesCluster>} Request
 */

/** @param {KubernetesCluster} cluster */
function specOf(cluster) {
  const { spec } = cluster;
  if (spec === null || typeof spec !== 'object') throw new ReconcileError('the KubernetesCluster has no spec');
  return spec;
}

/** @param {KubernetesCluster} cluster */
function mastersOf(cluster) {
  const { masters } = specOf(cluster);
  if (!Number.isInteger(masters)) throw new ReconcileError(`spec.masters must be an integer, got ${JSON.stringify(masters)}`);
  return masters;
}

/** @param {KubernetesCluster} cluster */
const startedWith = (cluster) => cluster.status?.masters ?? null;

/** @param {Request} request */
export function validate(request) {
  const cluster = request.object;
  if (cluster === null) return Verdict.allow();
  const timeout = specOf(cluster).timeoutSeconds ?? DEFAULT_TIMEOUT_SECONDS;
  if (timeout < 1) return Verdict.deny(`spec.timeoutSeconds must be 1 or more, got ${timeout}`);
  const old = request.oldObject;
  if (request.operation === Operation.UPDATE && old !== null) {
    const [was, now] = [mastersOf(old), mastersOf(cluster)];
    if (was !== now && startedWith(old) !== now) {
      return Verdict.deny(
        `spec.masters cannot change after creation: it is ${was}, the update asks for ${now}; ` +
          'create a new KubernetesCluster for another control-plane size',
      );
    }
  }
  return Verdict.allow();
}

/** @param {KubernetesCluster} cluster */
export function applyDefaults(cluster) {
  const { spec } = cluster;
  if (spec !== null && typeof spec === 'object' && (spec.version ?? '') === '') spec.version = DEFAULT_VERSION;
}

/**
 * @param {KubernetesCluster} cluster
 * @param {import('../../sdk-js/src/index.js').Context} ctx
 */
export function reconcile(cluster, ctx) {
  if (ctx.deleting || startedWith(cluster) !== null) return new Response();
  return new Response().status({ masters: mastersOf(cluster) });
}

export default plugin(METADATA, reconcile, { validate, applyDefaults });
