// Write reconciler-host plugins in JavaScript.
//
// A plugin module declares its metadata, defines `reconcile(primary, ctx)`
// on plain objects, and exports both as its default:
//
//   import { KindRef, PluginMetadata, Response, plugin } from '../../sdk-js/src/index.js';
//   const METADATA = new PluginMetadata('podset-js', '0.1.0', new KindRef('example.com', 'v1alpha1', 'PodSet'));
//   export function reconcile(podset, ctx) { return new Response().status({ seen: true }); }
//   export default plugin(METADATA, reconcile);
//
// With `{ validate, applyDefaults }` as a third argument it also serves
// admission for its primary kind (`./admission.js`).
//
// `node sdk-js/bin/build-plugin.js` builds it into a component against
// `wit/reconciler.wit` with componentize-js; `Harness` from `./testing.js`
// runs the same module under `node --test`. The contract a plugin keeps
// (idempotent, no effects beyond the response, the full desired state every
// time) is the WIT file's.

export * as objects from './objects.js';
export { AdmissionSettings, FailurePolicy, Operation, Verdict } from './admission.js';
export { Context } from './context.js';
export {
  CONTRACT_VERSION,
  ClusterInfo,
  EventType,
  KindRef,
  LOCAL_CLUSTER,
  Change,
  LogLevel,
  MapRule,
  PluginMetadata,
} from './contract.js';
export { HostError, ReconcileError } from './errors.js';
export { plugin } from './plugin.js';
export { Response } from './response.js';
