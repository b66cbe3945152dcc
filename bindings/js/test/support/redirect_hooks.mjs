// SPDX-License-Identifier: Apache-2.0
// Module resolution hooks of the suites' modes (registered by cluster_register.mjs and
// inprocess_register.mjs with data { wrapper }): a test file's import of the package's
// src/index.js resolves to the mode's wrapper module instead, which exports the same
// names with an AgentStateSessionService of that mode. Imports from src/ itself and from
// the wrapper are left alone.
const INDEX = new URL('../../src/index.js', import.meta.url).href;
const SRC = new URL('../../src/', import.meta.url).href;
let wrapper = '';

export async function initialize(data) {
  wrapper = new URL(data.wrapper, import.meta.url).href;
}

export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  const parent = context.parentURL ?? '';
  if (resolved.url === INDEX && parent !== wrapper && !parent.startsWith(SRC)) {
    return { ...resolved, url: wrapper, shortCircuit: true };
  }
  return resolved;
}
