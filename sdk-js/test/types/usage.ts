// Compiled by `tsc -p sdk-js/tsconfig.json` only (never run): the typed
// surface of the SDK as a TypeScript plugin's tests use it. A declaration
// that stops matching this use fails the type check.

import { AdmissionSettings, FailurePolicy, KindRef, Operation, PluginMetadata, Response, Verdict, plugin } from '../../src/index.js';
import type { AdmissionRequest, KubeObject } from '../../src/index.js';
import { Harness } from '../../src/testing.js';

type Counter = KubeObject<{ size?: number }, { seen?: boolean }>;

const METADATA = new PluginMetadata('counter', '0.1.0', new KindRef('example.com', 'v1', 'Counter'));

const counters = plugin<Counter>(
  METADATA,
  (counter, ctx) => {
    const size: number = counter.spec?.size ?? 0;
    const pods: KubeObject[] = ctx.list(new KindRef('', 'v1', 'Pod'), ctx.cluster().name, '');
    return new Response().status({ seen: size >= pods.length });
  },
  {
    validate: (request: AdmissionRequest<Counter>) =>
      request.operation === Operation.DELETE ? Verdict.allow() : Verdict.deny('no').warn('really'),
    applyDefaults: (counter) => {
      counter.spec = { size: 1, ...counter.spec };
    },
    admission: new AdmissionSettings({ mutating: true, failurePolicy: FailurePolicy.IGNORE, timeoutMs: 500 }),
  },
);

const harness = new Harness(counters).inCluster('east', { region: 'us-east' });
const counter: Counter = { apiVersion: 'example.com/v1', kind: 'Counter', metadata: { name: 'c' } };
const seen: boolean | undefined = harness.reconcile(counter).status?.seen;
const outcome = harness.admitUpdate(counter, counter);
const defaulted: Counter | null = outcome.defaulted;
const verdict: [boolean, string, string[]] = [outcome.allowed, outcome.message, outcome.warnings];
export { seen, defaulted, verdict };
