import type { AdmissionOptions, ServedAdmission } from './admission.js';
import type { HostApi, Context } from './context.js';
import type { PluginMetadata } from './contract.js';
import type { KubeObject } from './objects.js';
import type { Response } from './response.js';

export type ReconcileFn<P extends KubeObject = KubeObject> = (primary: P, ctx: Context) => Response;

/** What `plugin()` returns: make it the module's default export. */
export interface Plugin<P extends KubeObject = KubeObject> {
  readonly metadata: PluginMetadata;
  readonly reconcile: ReconcileFn<P>;
  readonly admission: ServedAdmission<P> | null;
}

/**
 * Declares a plugin; with `validate`, `applyDefaults` or both it also serves
 * admission for its primary kind.
 */
export function plugin<P extends KubeObject = KubeObject>(
  metadata: PluginMetadata,
  reconcile: ReconcileFn<P>,
  admission?: AdmissionOptions<P>,
): Plugin<P>;

export interface ReconcileRequest {
  primary: string;
  children: string[];
  deleting: boolean;
}

export function dispatch<P extends KubeObject>(reconcile: ReconcileFn<P>, request: ReconcileRequest, host: HostApi): Response;
