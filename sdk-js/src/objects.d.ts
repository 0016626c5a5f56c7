// Kubernetes objects as the SDK sees them: parsed JSON, typed loosely enough
// for any kind and tightly enough to catch a misspelt `metadata` field.

/** An ownerReference, as in `metadata.ownerReferences`. */
export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

/** `metadata` of any object; fields the SDK does not name are still there. */
export interface ObjectMeta {
  name?: string;
  namespace?: string;
  uid?: string;
  generation?: number;
  resourceVersion?: string;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  finalizers?: string[];
  ownerReferences?: OwnerReference[];
  [field: string]: unknown;
}

/**
 * Any Kubernetes object. Give a plugin's primary its own interface
 * (`interface PodSet extends KubeObject<{ size?: number }, { podNames?: string[] }>`)
 * and `plugin()` types `reconcile`, `validate` and `applyDefaults` by it.
 */
export interface KubeObject<Spec = Record<string, unknown>, Status = Record<string, unknown>> {
  apiVersion: string;
  kind: string;
  metadata: ObjectMeta;
  spec?: Spec;
  status?: Status;
  [field: string]: unknown;
}

/** `metadata`, or `{}` when missing. */
export function metadata(object: unknown): ObjectMeta;
/** `metadata.name`, or `''`. */
export function name(object: unknown): string;
/** `metadata.namespace`, or null for a cluster-scoped object. */
export function namespace(object: unknown): string | null;
/** `spec`, or `{}` when missing. */
export function spec<Spec = Record<string, any>>(object: { spec?: Spec } | unknown): Spec;
/** Whether the object has a deletionTimestamp. */
export function isDeleting(object: unknown): boolean;
/** The string-valued labels. */
export function labels(object: unknown): Record<string, string>;
/** The string-valued annotations. */
export function annotations(object: unknown): Record<string, string>;
/** The label selector string (`a=b,c=d`) that selects these labels. */
export function selectorOf(wanted: Record<string, string>): string;
