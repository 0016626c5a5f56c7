// Admission in the harness is admission as the host runs it: the settings a
// plugin declares, defaults before validation, and the errors that make a
// call fail rather than deny.

import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  AdmissionSettings,
  FailurePolicy,
  KindRef,
  Operation,
  PluginMetadata,
  ReconcileError,
  Response,
  Verdict,
  plugin,
} from '../src/index.js';
import { Harness } from '../src/testing.js';

const METADATA = new PluginMetadata('counter', '0.1.0', new KindRef('example.com', 'v1', 'Counter'));
const counter = (spec = {}) => ({ apiVersion: 'example.com/v1', kind: 'Counter', metadata: { name: 'c', namespace: 'a' }, spec });
const nothing = () => new Response();
const nonNegative = (request) =>
  (request.object.spec.size ?? 0) < 0 ? Verdict.deny('spec.size cannot be negative').warn('sizes start at 0') : Verdict.allow();
const sizeOne = (object) => {
  object.spec.size ??= 1;
};

test('a plugin without admission declares none and admits everything', () => {
  const reconciler = plugin(METADATA, nothing);
  assert.equal(reconciler.admission, null);
  assert.equal(new Harness(reconciler).admitCreate(counter({ size: -1 })).allowed, true);
});

test('settings are derived from the functions given', () => {
  assert.deepEqual(plugin(METADATA, nothing, { validate: nonNegative }).admission.settings, new AdmissionSettings());
  const { settings } = plugin(METADATA, nothing, { applyDefaults: sizeOne }).admission;
  assert.equal(settings.mutating, true);
  assert.equal(settings.failurePolicy, FailurePolicy.FAIL);
});

test('a declaration that cannot work is refused at once', () => {
  assert.throws(() => plugin(METADATA, nothing, { admission: new AdmissionSettings() }), /nothing to call/);
  assert.throws(
    () => plugin(METADATA, nothing, { validate: nonNegative, admission: new AdmissionSettings({ mutating: true }) }),
    /no applyDefaults/,
  );
  assert.throws(() => plugin(METADATA, nothing, { applyDefaults: sizeOne, admission: new AdmissionSettings() }), /never be called/);
  assert.throws(() => new AdmissionSettings({ operations: ['create'] }), /unknown admission operation "create"/);
});

test('a denial carries its message and warnings', () => {
  const outcome = new Harness(plugin(METADATA, nothing, { validate: nonNegative })).admitCreate(counter({ size: -1 }));
  assert.deepEqual([outcome.allowed, outcome.message, outcome.warnings], [false, 'spec.size cannot be negative', ['sizes start at 0']]);
});

test('defaults come first, and validation sees the defaulted object', () => {
  const seen = [];
  const record = (request) => {
    seen.push(request.object.spec);
    return Verdict.allow();
  };
  const harness = new Harness(plugin(METADATA, nothing, { validate: record, applyDefaults: sizeOne }));
  assert.deepEqual(harness.admitCreate(counter()).defaulted.spec, { size: 1 });
  assert.deepEqual(seen, [{ size: 1 }]);
  assert.equal(harness.admitCreate(counter({ size: 4 })).defaulted, null);
});

test('defaults may return a new object', () => {
  const replaced = (object) => ({ ...object, spec: { size: 2 } });
  assert.deepEqual(new Harness(plugin(METADATA, nothing, { applyDefaults: replaced })).admitCreate(counter()).defaulted.spec, { size: 2 });
});

test('only the declared operations reach the plugin', () => {
  const denyAll = () => Verdict.deny('no');
  const harness = new Harness(
    plugin(METADATA, nothing, { validate: denyAll, admission: new AdmissionSettings({ operations: [Operation.DELETE] }) }),
  );
  assert.equal(harness.admitCreate(counter()).allowed, true);
  assert.equal(harness.admitDelete(counter()).allowed, false);
  assert.equal(new Harness(plugin(METADATA, nothing, { validate: denyAll })).admitUpdate(counter(), counter()).allowed, false);
});

test('an answer that is not a Verdict, or defaults that are not an object, fail the call', () => {
  assert.throws(() => new Harness(plugin(METADATA, nothing, { validate: () => true })).admitCreate(counter()), ReconcileError);
  assert.throws(
    () => new Harness(plugin(METADATA, nothing, { applyDefaults: () => 'size=1' })).admitCreate(counter()),
    /other than the object/,
  );
});
