import type { KubeObject } from './objects.js';

export type OperationValue = 'CREATE' | 'UPDATE' | 'DELETE' | 'CONNECT';
/** What the API server is doing to the object (AdmissionReview's names). */
export const Operation: Readonly<{ CREATE: 'CREATE'; UPDATE: 'UPDATE'; DELETE: 'DELETE'; CONNECT: 'CONNECT' }>;

export type FailurePolicyValue = 'Fail' | 'Ignore';
/** What the host does when a call fails: `FAIL` denies naming the failure, `IGNORE` admits unchanged. */
export const FailurePolicy: Readonly<{ FAIL: 'Fail'; IGNORE: 'Ignore' }>;

/** A plugin's declaration that it serves admission. */
export class AdmissionSettings {
  constructor(options?: {
    /** Empty (the default) means create and update. */
    operations?: OperationValue[];
    mutating?: boolean;
    failurePolicy?: FailurePolicyValue;
    /** Deadline of one call; the host's default is 2000. */
    timeoutMs?: number;
  });
  readonly operations: OperationValue[];
  readonly mutating: boolean;
  readonly failurePolicy: FailurePolicyValue;
  readonly timeoutMs: number | undefined;
  effectiveOperations(): OperationValue[];
}

/** The answer to one request. Deny with `Verdict.deny(message)`; throwing instead is a failed call. */
export class Verdict {
  constructor(allowed: boolean, message?: string, warnings?: string[]);
  readonly allowed: boolean;
  readonly message: string | undefined;
  readonly warnings: string[];
  static allow(): Verdict;
  static deny(message: string): Verdict;
  warn(warning: string): this;
}

export interface UserInfo {
  username: string;
  uid: string;
  groups: string[];
  extra: Record<string, string[]>;
}

/** One request with its objects parsed: `object` for create and update, `oldObject` for update and delete. */
export interface AdmissionRequest<P extends KubeObject = KubeObject> {
  operation: OperationValue;
  object: P | null;
  oldObject: P | null;
  userInfo: UserInfo;
  /** Nothing will be persisted (`kubectl --dry-run=server`). */
  dryRun: boolean;
}

export type ValidateFn<P extends KubeObject = KubeObject> = (request: AdmissionRequest<P>) => Verdict;
/** Changes `object` in place (returning nothing) or returns the defaulted object. */
export type ApplyDefaultsFn<P extends KubeObject = KubeObject> = (object: P, request: AdmissionRequest<P>) => P | void;

export interface AdmissionOptions<P extends KubeObject = KubeObject> {
  validate?: ValidateFn<P>;
  applyDefaults?: ApplyDefaultsFn<P>;
  /** Settings other than the ones derived from the functions given. */
  admission?: AdmissionSettings;
}

export interface ServedAdmission<P extends KubeObject = KubeObject> {
  readonly settings: AdmissionSettings;
  readonly validate: ValidateFn<P> | undefined;
  readonly applyDefaults: ApplyDefaultsFn<P> | undefined;
}

export function declareAdmission<P extends KubeObject>(options?: AdmissionOptions<P>): ServedAdmission<P> | null;

/** A request in wire form, as in WIT: the objects as JSON text. */
export interface AdmissionCall {
  operation: OperationValue;
  object?: string;
  oldObject?: string;
  userInfo?: UserInfo;
  dryRun?: boolean;
}

/** `validate` from wire form to a Verdict (allow when the plugin only defaults). */
export function dispatchValidate<P extends KubeObject>(served: ServedAdmission<P>, call: AdmissionCall): Verdict;

/** `applyDefaults` from wire form to wire form: the defaulted object as JSON, or undefined when nothing changed. */
export function dispatchDefaults<P extends KubeObject>(served: ServedAdmission<P>, call: AdmissionCall): string | undefined;
