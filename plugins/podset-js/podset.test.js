// The podset logic, natively through the SDK harness: no Wasm involved.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { ReconcileError } from '../../sdk-js/src/index.js';
import { Harness } from '../../sdk-js/src/testing.js';
import podset, { DEPLOYMENT } from './podset.js';

const podSet = (name, size, meta = {}) => ({
  apiVersion: 'example.com/v1alpha1',
  kind: 'PodSet',
  metadata: { name, namespace: 'default', uid: `uid-${name}`, ...meta },
  spec: { size },
});
const pod = (name, owner, namespace = 'default') => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name, namespace, labels: { app: 'podset', podset: owner } },
});

function observedDeployment(owner, replicas) {
  const [d] = new Harness(podset).reconcile(podSet(owner, replicas)).appliedOf(DEPLOYMENT);
  d.metadata.ownerReferences = [
    { apiVersion: 'example.com/v1alpha1', kind: 'PodSet', name: owner, uid: `uid-${owner}`, controller: true },
  ];
  return d;
}

test('size becomes an owned Deployment with the podset labels', () => {
  const outcome = new Harness(podset).reconcile(podSet('web', 3));
  const [d, ...others] = outcome.appliedOf(DEPLOYMENT);
  assert.equal(others.length, 0);
  assert.equal(d.metadata.name, 'web');
  assert.equal(d.spec.replicas, 3);
  assert.deepEqual(d.spec.template.metadata.labels, { app: 'podset', podset: 'web' });
  assert.deepEqual(outcome.events, [{ type: 'Normal', reason: 'Created', message: 'Deployment web with 3 replicas' }]);
});

test('status lists its own pods, sorted, from its namespace only', () => {
  const h = new Harness(podset).withObjects(
    pod('web-b', 'web'),
    pod('web-a', 'web'),
    pod('api-a', 'api'),
    pod('web-c', 'web', 'staging'),
  );
  assert.deepEqual(h.reconcile(podSet('web', 2)).status, { podNames: ['web-a', 'web-b'] });
});

test('scaling says so and an unchanged size is quiet', () => {
  const h = new Harness(podset).withObjects(observedDeployment('web', 3));
  assert.deepEqual(h.reconcile(podSet('web', 5)).events.map((e) => e.reason), ['Scaled']);
  assert.deepEqual(h.reconcile(podSet('web', 3)).events, []);
});

test('a negative size is an error and deleting asks for nothing', () => {
  assert.throws(
    () => new Harness(podset).reconcile(podSet('web', -1)),
    (e) => e instanceof ReconcileError && e.message === 'spec.size must be 0 or more, got -1',
  );
  const outcome = new Harness(podset).reconcile(podSet('web', 3, { deletionTimestamp: '2024-01-01T00:00:00Z' }));
  assert.deepEqual(outcome.applied, []);
  assert.equal(outcome.status, null);
});

test('in a member cluster status names it, and in local it does not', () => {
  const member = new Harness(podset).inCluster('east', { region: 'us-east' });
  assert.equal(member.cluster.label('region'), 'us-east');
  assert.equal(member.cluster.label('reconciler-host.io/cluster'), 'east');
  assert.deepEqual(member.reconcile(podSet('web', 1)).status, { podNames: [], cluster: 'east' });
  assert.deepEqual(new Harness(podset).reconcile(podSet('web', 1)).status, { podNames: [] });
});

test('status updates wake nothing; spec and label changes do', () => {
  const h = new Harness(podset);
  const d = { ...observedDeployment('web', 2) };
  d.metadata = { ...d.metadata, generation: 1 };
  assert.equal(h.wakes(d, { ...d, status: { readyReplicas: 1 } }), false, "the Deployment controller's status update");
  const scaled = { ...d, metadata: { ...d.metadata, generation: 2 }, spec: { ...d.spec, replicas: 5 } };
  assert.equal(h.wakes(d, scaled), true, 'a spec change moves the generation');
  const moved = pod('web-a', 'web');
  moved.metadata.labels = { app: 'podset', podset: 'api' };
  assert.equal(h.wakes(pod('web-a', 'web'), moved), true);
  assert.equal(h.wakes(pod('web-a', 'web'), { ...pod('web-a', 'web'), status: { phase: 'Running' } }), false);
});
