// A plugin: its declared metadata and its reconcile function.

import { declareAdmission } from './admission.js';
import { Context } from './context.js';
import { ReconcileError } from './errors.js';
import { Response } from './response.js';

/**
 * Declares a plugin. Make it the default export of the plugin's module:
 *
 *   export default plugin(METADATA, reconcile);
 *
 * With `{ validate, applyDefaults }` (either or both; `admission` for other
 * settings) it also serves admission for its primary kind (see
 * `./admission.js`). `node sdk-js/bin/build-plugin.js` wraps it into the
 * component's exports; `Harness` runs it under `node --test`.
 */
export function plugin(metadata, reconcile, { validate, applyDefaults, admission } = {}) {
  return Object.freeze({ metadata, reconcile, admission: declareAdmission({ validate, applyDefaults, admission }) });
}

/**
 * One reconcile from wire form (`{primary, children, deleting}`, JSON text
 * as in WIT) to a Response. The Wasm export and the native harness both go
 * through here, so they parse identically.
 */
export function dispatch(reconcile, request, host) {
  let primary;
  try {
    primary = JSON.parse(request.primary);
  } catch (e) {
    throw new ReconcileError(`cannot parse the primary object: ${e.message}`);
  }
  const response = reconcile(primary, new Context(host, request.children, request.deleting));
  if (!(response instanceof Response)) {
    throw new ReconcileError(`reconcile returned ${response === null ? 'null' : typeof response}, not a Response`);
  }
  return response;
}
