// The plugin's logic, natively: the harness runs it as the host would.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Harness } from './node_modules/reconciler-sdk/src/testing.js';
import plugin from './{{name}}.js';

const example = (spec = {}) => ({
  apiVersion: '{{api_version}}',
  kind: '{{kind}}',
{{#namespaced}}
  metadata: { name: 'example', namespace: 'default', generation: 2 },
{{/namespaced}}
{{^namespaced}}
  metadata: { name: 'example', generation: 2 },
{{/namespaced}}
{{#custom}}
  spec,
{{/custom}}
});

test('a {{kind}} is reconciled', () => {
{{#custom}}
  assert.deepEqual(new Harness(plugin).reconcile(example({ size: 1 })).status, { observedGeneration: 2 });
{{/custom}}
{{^custom}}
  const outcome = new Harness(plugin).reconcile(example());
  assert.deepEqual([outcome.applied, outcome.status], [[], null]);
{{/custom}}
});
{{#admission}}
{{#custom}}

test('a negative size is denied, and a missing one defaults to 1', () => {
  const harness = new Harness(plugin);
  assert.equal(harness.admitCreate(example({ size: -1 })).allowed, false);
  assert.equal(harness.admitCreate(example()).defaulted.spec.size, 1);
});
{{/custom}}
{{^custom}}

test('the admission stubs admit unchanged', () => {
  const outcome = new Harness(plugin).admitCreate(example());
  assert.deepEqual([outcome.allowed, outcome.defaulted], [true, null]);
});
{{/custom}}
{{/admission}}
