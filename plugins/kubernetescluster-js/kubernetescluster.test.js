// The admission port, natively; scripts/test also runs the compiled plugin
// against plugins/kubernetescluster's admission golden cases.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Operation, ReconcileError } from '../../sdk-js/src/index.js';
import { Harness } from '../../sdk-js/src/testing.js';
import kubernetesclusters, { DEFAULT_VERSION } from './kubernetescluster.js';

const cluster = ({ masters = 3, version = '1.33', status, ...spec } = {}) => ({
  apiVersion: 'example.com/v1alpha1',
  kind: 'KubernetesCluster',
  metadata: { name: 'prod', namespace: 'default' },
  spec: { masters, workers: 2, version, timeoutSeconds: 600, ...spec },
  ...(status === undefined ? {} : { status }),
});
const harness = () => new Harness(kubernetesclusters);

test('changing masters is denied, naming both values', () => {
  const outcome = harness().admitUpdate(cluster({ status: { masters: 3 } }), cluster({ masters: 5, status: { masters: 3 } }));
  assert.equal(outcome.allowed, false);
  assert.match(outcome.message, /it is 3, the update asks for 5/);
});

test('setting masters back to what the cluster started with is allowed', () => {
  const outcome = harness().admitUpdate(cluster({ masters: 5, status: { masters: 3 } }), cluster({ status: { masters: 3 } }));
  assert.equal(outcome.allowed, true);
});

test('an empty version is defaulted, and a set one left alone', () => {
  const outcome = harness().admitCreate(cluster({ version: '' }));
  assert.equal(outcome.allowed, true);
  assert.equal(outcome.defaulted.spec.version, DEFAULT_VERSION);
  assert.equal(harness().admitCreate(cluster({ version: '1.30' })).defaulted, null);
});

test('a zero timeout is denied', () => {
  assert.equal(harness().admitCreate(cluster({ timeoutSeconds: 0 })).message, 'spec.timeoutSeconds must be 1 or more, got 0');
});

test('deletes are not admission calls of this plugin', () => {
  assert.equal(harness().admit({ operation: Operation.DELETE, oldObject: cluster({ timeoutSeconds: 0 }) }).allowed, true);
});

test('masters that are not a number fail the call', () => {
  assert.throws(() => harness().admitUpdate(cluster(), cluster({ masters: 'three' })), ReconcileError);
});

test('the first reconcile records masters and later ones keep it', () => {
  assert.deepEqual(harness().reconcile(cluster()).status, { masters: 3 });
  assert.equal(harness().reconcile(cluster({ masters: 5, status: { masters: 3 } })).status, null);
});
