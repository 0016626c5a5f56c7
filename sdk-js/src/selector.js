// Kubernetes label selectors in their string form, matched as the host's
// cache matches them: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x,y)`,
// `a` (exists), `!a` (does not exist), joined by commas; `''` selects
// everything. A missing key satisfies `!=` and `notin`.

const KEY = /^[A-Za-z0-9._/-]{1,316}$/;
const VALUE = /^[A-Za-z0-9._-]{0,63}$/;

export class SelectorError extends Error {
  constructor(message) {
    super(message);
    this.name = 'SelectorError';
  }
}

/** Parses `selector` into a predicate over a labels object; throws `SelectorError`. */
export function parseSelector(selector) {
  let requirements;
  try {
    requirements = splitTerms(selector).map(parseTerm);
  } catch (e) {
    if (e instanceof SelectorError) {
      throw new SelectorError(`invalid label selector ${JSON.stringify(selector)}: ${e.message}`);
    }
    throw e;
  }
  return (labels) => requirements.every((r) => r(labels));
}

function splitTerms(selector) {
  const terms = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < selector.length; i++) {
    const c = selector[i];
    if (c === '(') depth++;
    else if (c === ')') {
      if (--depth < 0) throw new SelectorError("unbalanced ')'");
    } else if (c === ',' && depth === 0) {
      terms.push(selector.slice(start, i));
      start = i + 1;
    }
  }
  if (depth !== 0) throw new SelectorError("unbalanced '('");
  terms.push(selector.slice(start));
  return terms.length === 1 && terms[0].trim() === '' ? [] : terms;
}

function key(text) {
  const k = text.trim();
  if (!KEY.test(k)) throw new SelectorError(`${JSON.stringify(k)} is not a valid label key`);
  return k;
}

function value(text) {
  const v = text.trim();
  if (!VALUE.test(v)) throw new SelectorError(`${JSON.stringify(v)} is not a valid label value`);
  return v;
}

const has = (labels, k) => Object.hasOwn(labels, k);

function parseTerm(raw) {
  const term = raw.trim();
  if (term === '') throw new SelectorError('empty requirement (stray comma?)');
  if (term.startsWith('!')) {
    const k = key(term.slice(1));
    return (labels) => !has(labels, k);
  }
  let at = term.indexOf('!=');
  if (at >= 0) {
    const [k, v] = [key(term.slice(0, at)), value(term.slice(at + 2))];
    return (labels) => !has(labels, k) || labels[k] !== v;
  }
  at = term.indexOf('=');
  if (at >= 0) {
    const rest = term.slice(at + 1);
    const [k, v] = [key(term.slice(0, at)), value(rest.startsWith('=') ? rest.slice(1) : rest)];
    return (labels) => has(labels, k) && labels[k] === v;
  }
  const space = term.search(/\s/);
  if (space < 0) {
    const k = key(term);
    return (labels) => has(labels, k);
  }
  const k = key(term.slice(0, space));
  const rest = term.slice(space).trimStart();
  const op = rest.startsWith('notin') ? 'notin' : rest.startsWith('in') ? 'in' : null;
  if (op === null) throw new SelectorError(`expected '=', '!=', 'in' or 'notin' after ${JSON.stringify(k)}`);
  const set = rest.slice(op.length).trim();
  if (!set.startsWith('(') || !set.endsWith(')')) {
    throw new SelectorError(`'${op}' needs a parenthesised set of values, e.g. ${k} ${op} (a,b)`);
  }
  const values = new Set(set.slice(1, -1).split(',').map(value));
  return op === 'in'
    ? (labels) => has(labels, k) && values.has(labels[k])
    : (labels) => !has(labels, k) || !values.has(labels[k]);
}
