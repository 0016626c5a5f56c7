// Write reconciler-host plugins in JavaScript or TypeScript: the
// declarations of index.js.

export * as objects from './objects.js';
export type { KubeObject, ObjectMeta, OwnerReference } from './objects.js';
export { AdmissionSettings, FailurePolicy, Operation, Verdict } from './admission.js';
export type {
  AdmissionOptions,
  AdmissionRequest,
  ApplyDefaultsFn,
  FailurePolicyValue,
  OperationValue,
  UserInfo,
  ValidateFn,
} from './admission.js';
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
export type { ChangeValue, EventTypeValue, Hints, KindTrigger, LogLevelValue, MapRuleValue } from './contract.js';
export { HostError, ReconcileError } from './errors.js';
export { plugin } from './plugin.js';
export type { Plugin, ReconcileFn } from './plugin.js';
export { Response } from './response.js';
