// {{name}}: reconciles {{api_version}} {{kind}}.
//
{{#custom}}
// Reports the generation it has seen in `status.observedGeneration`. Add the
// objects a {{kind}} should have with `new Response().apply(object)`, and
// declare their kinds with `.owns(new KindRef(...))` on METADATA.
{{/custom}}
{{^custom}}
// Logs each {{kind}} and changes nothing. Declare what it creates with
// `.owns(new KindRef(...))` on METADATA and return it with
// `new Response().apply(object)`.
{{/custom}}
//
// The SDK is imported by relative path: the component's module loader
// resolves no package names. The JSDoc types are checked by editors and tsc
// against the SDK's declarations.

import {
  KindRef,
  PluginMetadata,
  Response,
{{#admission}}
  Verdict,
{{/admission}}
  objects,
  plugin,
} from './node_modules/reconciler-sdk/src/index.js';

export const {{const}} = new KindRef('{{group}}', '{{version}}', '{{kind}}');

export const METADATA = new PluginMetadata('{{name}}', '0.1.0', {{const}});

{{#custom}}
/** @typedef {import('./node_modules/reconciler-sdk/src/index.js').KubeObject<{ size?: number }, { observedGeneration?: number }>} {{kind}} */
{{/custom}}
{{^custom}}
/** @typedef {import('./node_modules/reconciler-sdk/src/index.js').KubeObject} {{kind}} */
{{/custom}}

/**
 * @param {{{kind}}} object
 * @param {import('./node_modules/reconciler-sdk/src/index.js').Context} ctx
 */
{{#custom}}
export function reconcile(object, ctx) {
  return new Response().status({ observedGeneration: object.metadata.generation ?? 0 });
}
{{/custom}}
{{^custom}}
export function reconcile(object, ctx) {
  ctx.info(`reconciled {{kind}} ${objects.name(object)}`);
  return new Response();
}
{{/custom}}
{{#admission}}

{{#custom}}
/**
 * Creates and updates; a thrown error fails the call, which denies it.
 * @param {import('./node_modules/reconciler-sdk/src/index.js').AdmissionRequest<{{kind}}>} request
 */
export function validate(request) {
  const size = objects.spec(request.object).size;
  if (Number.isInteger(size) && size < 0) return Verdict.deny(`spec.size must be 0 or more, got ${size}`);
  return Verdict.allow();
}

/**
 * Sees the object before `validate` does; the host turns the change into a
 * JSON patch.
 * @param {{{kind}}} object
 */
export function applyDefaults(object) {
  if (object.spec !== null && typeof object.spec === 'object') object.spec.size ??= 1;
}
{{/custom}}
{{^custom}}
/**
 * A stub: allows everything. Deny with `Verdict.deny(message)`.
 * @param {import('./node_modules/reconciler-sdk/src/index.js').AdmissionRequest<{{kind}}>} request
 */
export function validate(request) {
  return Verdict.allow();
}

/**
 * A stub: changes nothing. Change `object` and the host turns the change
 * into a JSON patch.
 * @param {{{kind}}} object
 */
export function applyDefaults(object) {}
{{/custom}}

export default plugin(METADATA, reconcile, { validate, applyDefaults });
{{/admission}}
{{^admission}}

export default plugin(METADATA, reconcile);
{{/admission}}
