// The conformance suite (tests/conformance/cases) run by the JavaScript SDK's
// native harness: each case's probe reconciled by `Harness`, its answer
// compared with what the case expects, as `reconciler-host test` compares
// the compiled probe's. A rule the host keeps and the harness does not fails
// here, naming the case.

import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { parse } from '../../../sdk-js/node_modules/yaml/dist/index.js';

import { ReconcileError } from '../../../sdk-js/src/index.js';
import { Harness } from '../../../sdk-js/src/testing.js';
import probe from './probe.js';

const cases = join(dirname(fileURLToPath(import.meta.url)), '..', 'cases');

const order = (o) => [o.apiVersion ?? '', o.kind ?? '', o.metadata?.namespace ?? '', o.metadata?.name ?? ''].join('\0');
const sorted = (objects, key) => [...objects].sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));

/** The answer in the expectation's shape: absent keys mean nothing. */
function answer(outcome) {
  const out = {};
  if (outcome.applied.length) out.apply = sorted(outcome.applied, order);
  if (outcome.deleted.length) {
    out.delete = sorted(
      outcome.deleted.map(({ apiVersion, kind, namespace, name }) => ({ apiVersion, kind, namespace, name })),
      (d) => [d.apiVersion, d.kind, d.namespace ?? '', d.name].join('\0'),
    );
  }
  if (outcome.status !== null) out.status = outcome.status;
  if (outcome.events.length) out.events = outcome.events.map(({ type, reason, message }) => ({ type, reason, message }));
  return out;
}

for (const file of readdirSync(cases).filter((f) => f.endsWith('.yaml')).sort()) {
  test(`${file.replace(/\.yaml$/, '')}: the JavaScript harness answers as the host`, () => {
    // Times stay strings, as the host reads them.
    const c = parse(readFileSync(join(cases, file), 'utf8'), { schema: 'core' });
    const harness = new Harness(probe, c.now === undefined ? {} : { now: new Date(c.now) });
    harness.withObjects(...(c.objects ?? []));
    if (c.cluster) harness.inCluster(c.cluster.name, c.cluster.labels ?? {});
    if (c.expect.error !== undefined) {
      let outcome;
      try {
        outcome = harness.reconcile(c.primary);
      } catch (e) {
        assert.ok(e instanceof ReconcileError, `not a ReconcileError: ${e}`);
        assert.ok(e.message.includes(c.expect.error), `expected an error containing ${JSON.stringify(c.expect.error)}, got: ${e.message}`);
        return;
      }
      assert.fail(`expected an error containing ${JSON.stringify(c.expect.error)}, but the probe answered ${JSON.stringify(answer(outcome))}`);
    }
    const expected = { ...c.expect };
    if (expected.apply) expected.apply = sorted(expected.apply, order);
    assert.deepEqual(JSON.parse(JSON.stringify(answer(harness.reconcile(c.primary)))), expected);
  });
}
