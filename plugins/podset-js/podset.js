// The PodSet operator in JavaScript: the same decisions as plugins/podset.
//
// A PodSet asks for `spec.size` busybox pods. The plugin answers with one
// owned Deployment of that many replicas and reports the names of the pods
// carrying its labels in `status.podNames`. Pods are read through the host's
// cache (metadata only, in the PodSet's namespace, mapped back by the
// `podset` label), so a pod appearing or vanishing updates the status.

import {
  Change,
  EventType,
  KindRef,
  LOCAL_CLUSTER,
  MapRule,
  PluginMetadata,
  ReconcileError,
  Response,
  objects,
  plugin,
} from '../../sdk-js/src/index.js';

export const PODSET = new KindRef('example.com', 'v1alpha1', 'PodSet');
export const DEPLOYMENT = new KindRef('apps', 'v1', 'Deployment');
export const POD = new KindRef('', 'v1', 'Pod');

/** The label that maps a Pod back to its PodSet. */
export const PODSET_LABEL = 'podset';

export const METADATA = new PluginMetadata('podset-js', '0.1.0', PODSET)
  .owns(DEPLOYMENT)
  .readsInNamespace(POD, MapRule.label(PODSET_LABEL), { metadataOnly: true })
  // What the decision reads: the PodSet's and the Deployment's specs, the
  // Pods' names and labels. Status updates (the Deployment controller's,
  // our own) change none of it, so they wake nothing.
  .wakeOn(PODSET, Change.generation())
  .wakeOn(DEPLOYMENT, Change.generation())
  .wakeOn(POD, Change.labels());

/**
 * A PodSet as the plugin reads it (the JSDoc types are checked by `tsc`
 * against the SDK's declarations; they change nothing at run time).
 * @typedef {import('../../sdk-js/src/index.js').KubeObject<{ size?: unknown }>} PodSet
 */

/**
 * @param {PodSet} podset
 * @param {import('../../sdk-js/src/index.js').Context} ctx
 */
export function reconcile(podset, ctx) {
  if (ctx.deleting) {
    // The Deployment is garbage-collected through its ownerReference.
    return new Response();
  }
  const name = objects.name(podset);
  const namespace = objects.namespace(podset);
  const size = objects.spec(podset).size ?? 0;
  if (!Number.isInteger(size)) throw new ReconcileError(`spec.size must be an integer, got ${JSON.stringify(size)}`);
  if (size < 0) throw new ReconcileError(`spec.size must be 0 or more, got ${size}`);

  const labels = { app: 'podset', [PODSET_LABEL]: name };
  const podNames = ctx
    .list(POD, namespace, objects.selectorOf(labels))
    .map(objects.name)
    .sort();

  const response = new Response().apply(deployment(name, namespace, size, labels));
  const [observed] = ctx.children(DEPLOYMENT);
  if (observed === undefined) {
    response.event(EventType.NORMAL, 'Created', `Deployment ${name} with ${size} replicas`);
  } else {
    const replicas = observed.spec?.replicas ?? 1;
    if (replicas !== size) {
      response.event(EventType.NORMAL, 'Scaled', `Deployment ${name} from ${replicas} to ${size} replicas`);
    }
  }
  const { name: cluster } = ctx.cluster();
  return response.status(cluster === LOCAL_CLUSTER ? { podNames } : { podNames, cluster });
}

/**
 * @param {string} name
 * @param {string | null} namespace
 * @param {number} size
 * @param {Record<string, string>} labels
 */
function deployment(name, namespace, size, labels) {
  return {
    apiVersion: DEPLOYMENT.apiVersion,
    kind: DEPLOYMENT.kind,
    metadata: { name, ...(namespace === null ? {} : { namespace }), labels },
    spec: {
      replicas: size,
      selector: { matchLabels: labels },
      template: {
        metadata: { labels },
        spec: { containers: [{ name: 'busybox', image: 'busybox:1.36', command: ['sleep', '3600'] }] },
      },
    },
  };
}

export default plugin(METADATA, reconcile);
