#!/usr/bin/env node
// Builds a JavaScript or TypeScript plugin into a component of the `plugin`
// world of wit/reconciler.wit, or of `plugin-with-admission` when the plugin
// serves admission:
//
//   node sdk-js/bin/build-plugin.js plugins/podset-js/podset.js -o plugins/podset-js/podset-js.wasm
//   node sdk-js/bin/build-plugin.js plugins/podset-ts/podset.ts -o plugins/podset-ts/podset-ts.wasm
//
// The plugin module's default export is `plugin(metadata, reconcile)`. This
// loads it natively to see whether it serves admission, writes a small entry
// module that exports it as the world's interfaces through the SDK's guest
// glue, and hands the entry to componentize-js (installed in
// sdk-js/node_modules by scripts/build-plugins). componentize-js loads modules
// only from below the entry's directory, so the entry goes in the closest
// directory holding both the plugin and the SDK (for the plugins of this
// project, the project root), as a dotfile removed after the build.
//
// A TypeScript plugin is type-checked and compiled by `tsc` (the pinned
// `typescript` package; strict) first. Its JavaScript goes to a scratch
// directory beside the plugin's, at the same depth, so relative imports
// (`../../sdk-js/src/index.js`) mean the same; the plugin directory's other
// .js and .json files are copied there too. A type error stops the build
// with tsc's messages.

import { spawnSync } from 'node:child_process';
import { copyFile, mkdir, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { basename, dirname, extname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

import { componentize } from '@bytecodealliance/componentize-js';

const sdk = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { out: { type: 'string', short: 'o' }, wit: { type: 'string', default: join(sdk, '..', 'wit') } },
});
if (positionals.length !== 1 || !values.out) {
  console.error('usage: build-plugin.js <plugin.js|plugin.ts> -o <plugin.wasm> [--wit <dir>]');
  process.exit(2);
}
/** A build that cannot go on, for a reason the user can act on: said without a stack. */
class BuildError extends Error {}

const given = resolve(positionals[0]);
const scratch = [];
try {
  await build();
} catch (e) {
  if (!(e instanceof BuildError)) throw e;
  console.error(`build-plugin.js: ${e.message}`);
  process.exitCode = 1;
} finally {
  for (const path of scratch) await rm(path, { recursive: true, force: true });
}

async function build() {
  const source = extname(given) === '.ts' ? await compileTypeScript(given) : given;
  const root = commonDirectory(dirname(source), sdk);
  const entry = join(root, `.${basename(source, '.js')}-${process.pid}.entry.js`);
  scratch.push(entry);
  // The plugin's module, loaded natively, says which world to build: with
  // admission (`plugin(..., { validate, applyDefaults })`) or without. Every
  // build exports triggers (none declared: every change wakes).
  const declared = (await import(pathToFileURL(source).href)).default;
  if (declared?.metadata === undefined || typeof declared.reconcile !== 'function') {
    throw new BuildError(
      `${positionals[0]}: its default export is not a plugin: end it with \`export default plugin(METADATA, reconcile);\``,
    );
  }
  const withAdmission = declared.admission != null;
  const world = withAdmission ? 'plugin-with-admission-and-triggers' : 'plugin-with-triggers';
  const guest = relative(root, join(sdk, 'src', 'guest.js'));
  await writeFile(
    entry,
    `import plugin from './${relative(root, source)}';\n` +
      `import { exportAdmission, exportPlugin, exportTriggers } from './${guest}';\n` +
      'export const reconciler = exportPlugin(plugin);\n' +
      'export const triggers = exportTriggers(plugin);\n' +
      (withAdmission ? 'export const admission = exportAdmission(plugin);\n' : ''),
  );
  const { component } = await componentize({
    sourcePath: entry,
    witPath: resolve(values.wit),
    worldName: world,
    // Clocks stay: WASI's clocks are the host's clock (see wit/reconciler.wit).
    disableFeatures: ['http', 'fetch-event'],
  });
  await writeFile(`${values.out}.tmp`, component);
  await rename(`${values.out}.tmp`, values.out);
  console.log(
    `built ${values.out} (${(component.length / 1e6).toFixed(1)} MB, world ${world}) from ${relative(process.cwd(), given)}`,
  );
}

/** Type-checks and compiles `source` with tsc; returns the compiled module's path. */
async function compileTypeScript(source) {
  const dir = dirname(source);
  const out = join(dirname(dir), `.${basename(dir)}-${process.pid}.tsc`);
  scratch.push(out);
  let tsc;
  try {
    tsc = join(dirname(createRequire(import.meta.url).resolve('typescript/package.json')), 'bin', 'tsc');
  } catch {
    throw new BuildError('building a TypeScript plugin needs the typescript package: npm install --save-dev typescript@7.0.2');
  }
  // The plugin directory's other modules and data, for the compiled one to import.
  await mkdir(out, { recursive: true });
  for (const name of await readdir(dir)) {
    if (/\.(js|mjs|json)$/.test(name) && !/\.test\.js$/.test(name)) await copyFile(join(dir, name), join(out, name));
  }
  const run = spawnSync(
    process.execPath,
    [tsc, '--strict', '--module', 'es2022', '--moduleResolution', 'bundler', '--target', 'es2022',
      '--types', '', '--skipLibCheck', '--rootDir', dir, '--outDir', out, source],
    { encoding: 'utf8' },
  );
  if (run.status !== 0) {
    throw new BuildError(`tsc refused ${relative(process.cwd(), source)}:\n${(run.stdout + run.stderr).trim()}`);
  }
  return join(out, `${basename(source, '.ts')}.js`);
}

function commonDirectory(a, b) {
  const [x, y] = [a.split(sep), b.split(sep)];
  let n = 0;
  while (n < x.length && n < y.length && x[n] === y[n]) n++;
  return x.slice(0, n).join(sep) || sep;
}
