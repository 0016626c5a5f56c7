#!/usr/bin/env node
// Builds a JavaScript plugin into a component of the `plugin` world of
// wit/reconciler.wit, or of `plugin-with-admission` when the plugin serves
// admission:
//
//   node sdk-js/bin/build-plugin.js plugins/podset-js/podset.js -o plugins/podset-js/podset-js.wasm
//
// The plugin module's default export is `plugin(metadata, reconcile)`. This
// writes a three-line entry module that exports it as the world's
// `reconciler` interface through the SDK's guest glue, and hands the entry to
// componentize-js (installed in sdk-js/node_modules by scripts/build-plugins).
// componentize-js loads modules only from below the entry's directory, so the
// entry goes in the closest directory holding both the plugin and the SDK
// (for the plugins of this project, the project root), as a dotfile removed
// after the build.

import { writeFile, rm, rename } from 'node:fs/promises';
import { basename, dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

import { componentize } from '@bytecodealliance/componentize-js';

const sdk = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { out: { type: 'string', short: 'o' }, wit: { type: 'string', default: join(sdk, '..', 'wit') } },
});
if (positionals.length !== 1 || !values.out) {
  console.error('usage: build-plugin.js <plugin.js> -o <plugin.wasm> [--wit <dir>]');
  process.exit(2);
}
const source = resolve(positionals[0]);
const root = commonDirectory(dirname(source), sdk);
const entry = join(root, `.${basename(source, '.js')}-${process.pid}.entry.js`);
// The plugin's module, loaded natively, says which world to build: with
// admission (`plugin(..., { validate, applyDefaults })`) or without.
const declared = (await import(pathToFileURL(source).href)).default;
if (declared?.metadata === undefined || typeof declared.reconcile !== 'function') {
  console.error(`${positionals[0]}: its default export is not a plugin: end it with \`export default plugin(METADATA, reconcile);\``);
  process.exit(1);
}
const withAdmission = declared.admission != null;
const guest = relative(root, join(sdk, 'src', 'guest.js'));
await writeFile(
  entry,
  `import plugin from './${relative(root, source)}';\n` +
    `import { exportAdmission, exportPlugin } from './${guest}';\n` +
    'export const reconciler = exportPlugin(plugin);\n' +
    (withAdmission ? 'export const admission = exportAdmission(plugin);\n' : ''),
);
try {
  const { component } = await componentize({
    sourcePath: entry,
    witPath: resolve(values.wit),
    worldName: withAdmission ? 'plugin-with-admission' : 'plugin',
    // Clocks stay: WASI's clocks are the host's clock (see wit/reconciler.wit).
    disableFeatures: ['http', 'fetch-event'],
  });
  await writeFile(`${values.out}.tmp`, component);
  await rename(`${values.out}.tmp`, values.out);
  console.log(
    `built ${values.out} (${(component.length / 1e6).toFixed(1)} MB, world ${withAdmission ? 'plugin-with-admission' : 'plugin'}) from ${relative(process.cwd(), source)}`,
  );
} finally {
  await rm(entry, { force: true });
}

function commonDirectory(a, b) {
  const [x, y] = [a.split(sep), b.split(sep)];
  let n = 0;
  while (n < x.length && n < y.length && x[n] === y[n]) n++;
  return x.slice(0, n).join(sep) || sep;
}
