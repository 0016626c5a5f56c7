// The harness keeps the host's rules: a plugin tested here sees what it sees
// inside the host.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { KindRef, MapRule, PluginMetadata, ReconcileError, Response, plugin } from '../src/index.js';
import { parseSelector, SelectorError } from '../src/selector.js';
import { DEFAULT_NOW_MILLIS, Harness } from '../src/testing.js';

const POD = new KindRef('', 'v1', 'Pod');
const SECRET = new KindRef('', 'v1', 'Secret');
const CONFIGMAP = new KindRef('', 'v1', 'ConfigMap');
const COUNTER = new KindRef('example.com', 'v1', 'Counter');

const pod = (namespace, name, labels = {}) => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { namespace, name, labels },
  spec: { containers: [{ name: 'c' }] },
});
const counter = (spec = {}, meta = {}) => ({
  apiVersion: 'example.com/v1',
  kind: 'Counter',
  metadata: { name: 'c', namespace: 'team-a', uid: 'u-1', ...meta },
  spec,
});

/** A plugin whose status is whatever `look(primary, ctx)` returns. */
function looking(look) {
  const metadata = new PluginMetadata('counter', '1', COUNTER)
    .owns(CONFIGMAP)
    .readsInNamespace(POD, MapRule.none(), { metadataOnly: true })
    .readsKind(SECRET, MapRule.none());
  return plugin(metadata, (primary, ctx) => new Response().status({ seen: look(primary, ctx) }));
}

test('a same-namespace read kind reads only the primary namespace', () => {
  const h = new Harness(looking((p, ctx) => ctx.list(POD, p.spec.ns).map((x) => x.metadata.name)));
  h.withObjects(pod('team-a', 'mine'), pod('team-b', 'theirs'));
  assert.deepEqual(h.reconcile(counter()).status, { seen: ['mine'] }, "no namespace means the primary's");
  assert.deepEqual(h.reconcile(counter({ ns: 'team-a' })).status, { seen: ['mine'] });
  assert.throws(() => h.reconcile(counter({ ns: 'team-b' })), (e) => {
    assert.ok(e instanceof ReconcileError);
    assert.match(e.message, /same-namespace read kind.*"team-b"/);
    return true;
  });
});

test('undeclared kinds cannot be read', () => {
  const h = new Harness(looking((_, ctx) => ctx.get(new KindRef('', 'v1', 'Node'), null, 'n1')));
  assert.throws(() => h.reconcile(counter()), /did not declare v1 Node/);
});

test('metadata-only reads drop spec, status and managedFields', () => {
  const p = pod('team-a', 'mine', { app: 'web' });
  p.metadata.managedFields = [{ manager: 'kubectl' }];
  const h = new Harness(looking((_, ctx) => ctx.get(POD, 'team-a', 'mine'))).withObjects(p);
  assert.deepEqual(h.reconcile(counter()).status, {
    seen: { apiVersion: 'v1', kind: 'Pod', metadata: { namespace: 'team-a', name: 'mine', labels: { app: 'web' } } },
  });
});

test('full reads return the whole object, in namespace then name order', () => {
  const secrets = [['b', 'x'], ['a', 'z'], ['a', 'y']].map(([namespace, name]) => ({
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { namespace, name },
    data: { k: 'dg==' },
  }));
  const h = new Harness(looking((_, ctx) => ctx.list(SECRET))).withObjects(...secrets);
  const seen = h.reconcile(counter()).status.seen;
  assert.deepEqual(seen.map((s) => [s.metadata.namespace, s.metadata.name]), [['a', 'y'], ['a', 'z'], ['b', 'x']]);
  assert.ok(seen.every((s) => s.data.k === 'dg=='));
});

test('children are owned kinds controlled by the primary, in its namespace', () => {
  const configmap = (name, ref, namespace = 'team-a') => ({
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { namespace, name, ownerReferences: [{ apiVersion: 'example.com/v1', kind: 'Counter', name: 'c', ...ref }] },
  });
  const h = new Harness(looking((_, ctx) => ctx.children(CONFIGMAP).map((c) => c.metadata.name)));
  h.withObjects(
    configmap('mine', { uid: 'u-1', controller: true }),
    configmap('by-name', { controller: true }),
    configmap('not-controller', { uid: 'u-1' }),
    configmap('another-uid', { uid: 'u-2', controller: true }),
    configmap('other-namespace', { uid: 'u-1', controller: true }, 'team-b'),
  );
  assert.deepEqual(h.reconcile(counter()).status, { seen: ['by-name', 'mine'] });
});

test('deleting and the clock follow the primary and the test', () => {
  const h = new Harness(looking((_, ctx) => [ctx.deleting, ctx.nowMillis(), ctx.now().toISOString()]));
  assert.deepEqual(h.reconcile(counter()).status, { seen: [false, DEFAULT_NOW_MILLIS, '2024-01-01T00:00:00.000Z'] });
  h.advance(90_000);
  const deleting = counter({}, { deletionTimestamp: '2024-01-01T00:00:00Z' });
  assert.deepEqual(h.reconcile(deleting).status, {
    seen: [true, DEFAULT_NOW_MILLIS + 90_000, '2024-01-01T00:01:30.000Z'],
  });
});

test('a response carries events, requeue, deletes and finalized', () => {
  const p = plugin(new PluginMetadata('x', '1', COUNTER).owns(CONFIGMAP), () =>
    new Response().event('Warning', 'Stuck', 'waiting').requeueAfter(30_000).delete(CONFIGMAP, 'team-a', 'old').finalized(),
  );
  const outcome = new Harness(p).reconcile(counter());
  assert.deepEqual(outcome.events, [{ type: 'Warning', reason: 'Stuck', message: 'waiting' }]);
  assert.equal(outcome.requeueAfterMs, 30_000);
  assert.deepEqual(outcome.deleted, [{ apiVersion: 'v1', kind: 'ConfigMap', namespace: 'team-a', name: 'old' }]);
  assert.equal(outcome.finalized, true);
});

describe('label selectors match as on the API server', () => {
  const labels = { a: { app: 'web' }, b: { app: 'web', tier: 'db' }, c: { app: 'db', tier: 'x' }, d: {} };
  for (const [selector, expected] of [
    ['', ['a', 'b', 'c', 'd']],
    ['app=web', ['a', 'b']],
    ['app==web,tier!=db', ['a']],
    ['app in (web,db)', ['a', 'b', 'c']],
    ['app notin (web)', ['c', 'd']],
    ['tier', ['b', 'c']],
    ['!tier', ['a', 'd']],
  ]) {
    test(JSON.stringify(selector), () => {
      const matches = parseSelector(selector);
      assert.deepEqual(Object.keys(labels).filter((n) => matches(labels[n])), expected);
    });
  }
  for (const [selector, why] of [
    ['app=we b', /not a valid label value/],
    ['app in web', /parenthesised set/],
    ['a,,b', /empty requirement/],
    ['app in (a', /unbalanced/],
  ]) {
    test(`${JSON.stringify(selector)} is an error`, () => {
      assert.throws(() => parseSelector(selector), (e) => e instanceof SelectorError && why.test(e.message));
    });
  }
});

test('the cluster is asked of the host once per reconcile', async () => {
  const { Context } = await import('../src/context.js');
  const { ClusterInfo } = await import('../src/contract.js');
  const asked = [];
  const host = {
    cluster: () => {
      asked.push('cluster');
      return new ClusterInfo('member-1', { tier: 'prod' });
    },
  };
  const ctx = new Context(host, [], false);
  assert.equal(ctx.cluster().name, 'member-1');
  assert.equal(ctx.cluster().label('tier'), 'prod');
  assert.deepEqual(asked, ['cluster']);
});
