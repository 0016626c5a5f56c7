// The type declarations (src/*.d.ts) are written by hand beside the modules
// they describe: every value a module exports must be declared, and nothing
// declared may be missing from the module, or TypeScript users are told of
// an API that is not there (or not told of one that is).

import assert from 'node:assert/strict';
import { readdir, readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const src = join(dirname(fileURLToPath(import.meta.url)), '..', 'src');

/** The value names a declaration file exports (types and interfaces left out). */
function declaredValues(text) {
  const names = new Set();
  for (const [, name] of text.matchAll(/^export (?:declare )?(?:const|function|class) (\w+)/gm)) names.add(name);
  for (const [, list] of text.matchAll(/^export \{([^}]*)\} from/gm)) {
    for (const item of list.split(',')) if (item.trim()) names.add(item.trim().split(/\s+as\s+/).pop());
  }
  for (const [, name] of text.matchAll(/^export \* as (\w+) from/gm)) names.add(name);
  return [...names].sort();
}

const modules = (await readdir(src)).filter((f) => f.endsWith('.js') && f !== 'guest.js');

for (const file of modules) {
  test(`${file}: its declarations name exactly its exports`, async () => {
    const declarations = await readFile(join(src, file.replace(/\.js$/, '.d.ts')), 'utf8');
    const exported = Object.keys(await import(join(src, file))).sort();
    assert.deepEqual(declaredValues(declarations), exported);
  });
}
